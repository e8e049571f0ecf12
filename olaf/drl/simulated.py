"""The virtual clock (``olaf run --clock virtual``): the one training loop
(olaf.drl.core) over a backend whose time is simulated, so that a result does not depend
on the machine that computed it.

Everything runs in this process, on a discrete-event scheduler (a heap of timed events):

* **workers**: every logical worker is the real thing (``build_worker``: the platform
  ``Worker`` with its environments and torch learner, and a ``Sender`` with its P_s
  policy); only its *time* is modelled. A turn is: take the newest weights that reached
  it, act for ``steps x step_time_us x f_w x j`` simulated microseconds, compute the loss
  (the real ``Worker.rollout()`` runs at the end of acting, so IMPACT's refresh before the
  loss sees the weights published meanwhile) for ``compute_time_us x f_w x j``, send.
  ``f_w`` is the worker's lognormal speed factor (sigma ``heterogeneity``, drawn from the
  seed), ``j`` a lognormal factor per turn (sigma ``jitter``, a stream per worker);
* **links**: each worker's UPDATEs serialise on its own link (``uplink_rate``) and
  propagate (``propagation_s``) to the switch; ACKs come back after the propagation delay;
  DATA leaves the switch through the egress link toward the PS at ``C``
  (``egress_rate``: PULLs every ``(36 + 4V) / C`` seconds, as ``Receiver``'s paced mode
  does), then propagates; the weights go back to the workers as a modelled delay
  (``num_blocks x (36 + 4V)`` bytes over ``uplink_rate``, plus the propagation; MODEL
  messages do not queue behind UPDATEs, they travel the other direction);
* **switch**: the one reference ``dataplane.queue.OlafQueue``, fed decoded codec batches
  of UPDATE and PULL datagrams in time order, as the software switch feeds it. A PULL
  that can only find the queue empty changes nothing (DESIGN.md §3) and is counted, not
  run: the scheduler bounds the occupancy from above between arrivals and runs only the
  PULLs that may pop a slot, so an idle 10 GbE port costs nothing;
* **PS**: ``PsApply`` with ``RunPolicies`` and the ``ParameterServer``, AoM on the
  simulated clock, weights published every ``broadcast_period`` of simulated time, the
  threshold controller on the loop's schedule, evaluations (greedy and stochastic) by an
  in-process ``Evaluator`` at the loop's requests (in zero simulated time: the evaluator
  stands for a machine of its own).

The same seed gives the same run bit for bit on one machine: the event order is a
function of the seed (ties broken by insertion order), torch runs on one thread, and
every random stream is seeded. Across machines it need not: re-run on an AMD EPYC, the
1M-step LunarLander-v3 runs of docs/archive/results-2026-12-06.md kept another machine's blocks applied,
model versions and FIFO drops exactly and its training returns to a few tenths, while
late greedy evaluations and OLAF's merge counts moved (floating-point rounding differs
somewhere below; not in torch's kernel choice, which ``ATEN_CPU_CAPABILITY=avx2`` left
bit for bit).
Time to target and every reported time are simulated seconds (the summary says
``clock: simulated``); the host's seconds are in ``receiver.host_s``.
Not modelled: the PS's own compute time, switch processing time, and loss on the links
unless ``--chaos`` asks for it (``impairment``, ``chaos``: olaf.drl.chaos applies its
loss, switch restarts and worker kills here as simulated events).
"""

from __future__ import annotations

import heapq
import itertools
import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from control_plane.threshold import ThresholdLoop
from dataplane.impairment import Impairment
from dataplane.queue import OlafQueue, QueueConfig
from olaf.drl.bottleneck import block_bytes
from olaf.drl.config import RunConfig
from olaf.drl.controller import RecentRewards, threshold_raw
from olaf.drl.core import PsApply, RecentDelivery, Status, TrainingLoop, finish_returns
from olaf.drl.elastic import ElasticAoM, worker_bits
from olaf.drl.evaluation import Evaluator
from olaf.drl.learners import algo_config, parameter_server, run_model
from olaf.drl.policies import RunPolicies
from olaf.drl.results import EvalScores, RunResult, Snapshot
from olaf.drl.worker_turn import Progress, build_worker, tx_totals, worker_seed
from worker_transport.aom import MAX_WORKER_BITS
from worker_transport.codec import decode_rows, encode_array, mean_values
from worker_transport.protocol import HEADER_LEN, Mode, MsgType, Outcome
from worker_transport.receiver import DataBatch, pull_packet
from worker_transport.transport import Transport

NS = 1_000_000_000
"""The scheduler counts integer nanoseconds: exact, and the same on every machine."""
TX_PERIOD_NS = NS // 4
"""Simulated time between reports of the senders' totals (a real worker process: 0.25 s)."""
TIME_MODEL_STREAM = 0x01AF
"""Seed-sequence key of the time model's random streams, apart from the learners'."""


class SimTransport(Transport):
    """One worker's way to the switch in simulated time: ``send`` puts the UPDATEs on the
    worker's link, ``recv`` returns the ACKs that have arrived by now."""

    def __init__(self, sim: Simulated, worker_id: int) -> None:
        self.sim, self.worker_id = sim, worker_id
        self.inbox: deque[tuple[int, bytes]] = deque()
        """(arrival ns, ACK datagram), in arrival order."""

    def send(self, packets: Any) -> int:
        rows = np.array(packets, np.uint8, copy=True)  # the Sender reuses its buffer
        self.sim.uplink(self.worker_id, rows)
        return len(rows)

    def recv(self, timeout: float | None, max_count: int = 4096) -> list[bytes]:
        now, inbox, out = self.sim.now_ns, self.inbox, []
        while inbox and inbox[0][0] <= now and len(out) < max_count:
            out.append(inbox.popleft()[1])
        return out

    def close(self) -> None:
        self.inbox.clear()


@dataclass
class _Publication:
    deliver_ns: int
    weights: np.ndarray
    version: int


class Simulated:
    """The virtual-clock backend (see the module doc), a ``Backend`` of the training loop."""

    def __init__(self, cfg: RunConfig, result: RunResult, ps: Any) -> None:
        if cfg.scaling not in ("fixed", "auto"):
            raise ValueError("the virtual clock runs fixed scaling and --elastic auto only")
        self.cfg, self.result, self.ps = cfg, result, ps
        self.now_ns = 0
        self._events: list[tuple[int, int, str, int, Any]] = []
        self._order = itertools.count()
        self.queue = OlafQueue(QueueConfig(
            capacity=cfg.capacity, values=cfg.values, max_clusters=cfg.queue_max_clusters,
            max_blocks=ps.num_blocks, frac_bits=cfg.frac_bits, cluster_quota=cfg.queue_cluster_quota,
            mode=Mode.OLAF if cfg.mode == "olaf" else Mode.FIFO, feedback=cfg.feedback))
        self.active = bytearray([1] * cfg.workers)
        """Active logical workers (``--elastic auto`` changes them); an inactive one idles
        after its turn until ``set_workers`` wakes it."""
        self._idle: set[int] = set()
        self.policies = RunPolicies(cfg, ps, self.active if cfg.scaling == "auto" else None)
        if self.policies.aggregator is not None:
            self.policies.aggregator.clock = self.seconds  # holds expire in simulated time
        self.rewards = RecentRewards(cfg.reward_history)
        self.apply = PsApply(ps, self.policies, self.rewards)
        self.apply.data = result.data
        bits = min(cfg.workers, MAX_WORKER_BITS)
        self.aom = ElasticAoM(start_us=0, workers=bits, clock=self.now_us,
                              active_bits=np.ones(bits, bool))
        self.delivery = RecentDelivery(self.apply.data, lambda: self.aom.series.ages_ms)
        size = block_bytes(cfg.values)
        self.block_bytes = size
        self.uplink_ns = size / cfg.uplink_rate * NS if cfg.uplink_rate else 0.0
        self.prop_ns = round(cfg.propagation_s * NS)
        self.pull_ns = NS / cfg.pull_rate
        """Between two PULLs: one block's time on the egress link C."""
        self.model_ns = (round(ps.num_blocks * size / cfg.uplink_rate * NS) if cfg.uplink_rate
                         else 0) + self.prop_ns
        self._pull_row = np.zeros(size, np.uint8)
        self._pull_row[:HEADER_LEN] = pull_packet(cfg.frac_bits)[0]
        self.next_pull = 0
        """Index k of the next PULL, due at ``k * pull_ns``."""
        self._arrivals: list[tuple[int, int, int, np.ndarray]] = []
        """UPDATE blocks on their way: (arrival ns at the switch, order, worker, row)."""
        self._link_free = [0] * cfg.workers
        self._data: deque[tuple[int, DataBatch]] = deque()
        """DATA on the egress link: (arrival ns at the PS, the blocks of one switch batch)."""
        self.counts = dict.fromkeys(("pulls_sent", "data_blocks", "aggregated_updates",
                                     "empty", "empty_not_run"), 0)
        self._publications: deque[_Publication] = deque()
        # The time model: a factor per worker and a stream of per-turn factors per worker,
        # so that one worker's draws do not depend on the order of the others' turns.
        self.factors = np.random.default_rng([cfg.seed, TIME_MODEL_STREAM]).lognormal(
            0.0, cfg.heterogeneity, cfg.workers)
        self._jitter = [np.random.default_rng([cfg.seed, TIME_MODEL_STREAM, w])
                        for w in range(cfg.workers)]
        learner = algo_config(cfg)
        guess = getattr(learner, "envs_per_worker", 1) * getattr(learner, "rollout_steps", 32)
        self._steps = [guess] * cfg.workers
        """Env steps of each worker's next turn: its last turn's (a rollout's size is fixed)."""
        self.transports = [SimTransport(self, w) for w in range(cfg.workers)]
        self.pool = [build_worker(cfg, w, worker_seed(cfg.seed, w, 0), None, self.newest,
                                  transport=self.transports[w], clock=self.now_us)
                     for w in range(cfg.workers)]
        self.progress = Progress()
        self._next_tx = 0
        self.evaluator = Evaluator(cfg)
        self._answer: tuple[int, float, EvalScores, int] | None = None
        # --chaos (olaf.drl.chaos): its loss drops UPDATEs on arrival at the switch and DATA
        # as it leaves, by message type, from a stream of the seed; its tick runs in ours.
        self.impairment = Impairment(seed=cfg.seed, type_drop={})
        self.chaos: Any = None

    # -- clocks ---------------------------------------------------------------------------
    def now_us(self) -> int:
        return self.now_ns // 1000

    def seconds(self) -> float:
        return self.now_ns / NS

    # -- Backend ----------------------------------------------------------------------------
    def now(self) -> float:
        return self.seconds()

    def poll(self, loop: TrainingLoop) -> None:
        if self._answer is not None:
            loop.evaluation(*self._answer)
            self._answer = None
        steps, episodes, learner = self.progress.take()
        tx = None
        if self.now_ns >= self._next_tx:
            tx = tx_totals([sender.stats() for _, sender in self.pool])
            self._next_tx = self.now_ns + TX_PERIOD_NS
        loop.progress("virtual", steps, episodes, tx, learner)

    def publish(self) -> None:
        weights, version = self.ps.snapshot()
        self._publications.append(_Publication(self.now_ns + self.model_ns, weights, version))

    def request_eval(self, steps: int, elapsed: float) -> None:
        self.publish()
        latest = self._publications[-1]
        self._answer = (steps, elapsed, self.evaluator.evaluate(latest.weights), latest.version)

    def recent_rewards(self) -> list[float]:
        return self.rewards.snapshot()

    def status(self) -> Status:
        self.aom.advance(self.now_us())
        tail = self.aom.series.global_ms
        staleness, ages = self.delivery.take()
        return Status(aom_ms=float(tail[-1]) if len(tail) else math.nan,
                      occupied=self.queue.occupied, outcomes=self.outcomes(),
                      model_version=self.ps.model_version, blocks_applied=self.ps.blocks_applied,
                      active_workers=sum(self.active), staleness=staleness, update_age_ms=ages)

    def tick(self, loop: TrainingLoop, elapsed: float) -> None:
        self.policies.tick(self.seconds())
        if self.chaos is not None:
            self.chaos.tick(self, loop)

    def stop_signal(self) -> str | None:
        return None

    def wait(self, seconds: float) -> None:
        """Run every event of the next ``seconds`` of simulated time."""
        end = self.now_ns + round(seconds * NS)
        events = self._events
        while events and events[0][0] <= end:
            t, _, kind, w, grad = heapq.heappop(events)
            self.now_ns = t
            if kind == "act":
                self._act(w)
            else:
                self._send(w, grad)
        self.now_ns = end
        self.switch_until(end)
        self.deliver_data(end)

    # -- workers ---------------------------------------------------------------------------
    def newest(self, version: int) -> tuple[np.ndarray, int] | None:
        """The newest weights that have reached the workers, if newer than ``version``."""
        pubs, now = self._publications, self.now_ns
        while len(pubs) > 1 and pubs[1].deliver_ns <= now:
            pubs.popleft()
        if not pubs or pubs[0].deliver_ns > now or pubs[0].version <= version:
            return None
        return pubs[0].weights, pubs[0].version

    def _at(self, t_ns: int, kind: str, w: int, grad: Any = None) -> None:
        heapq.heappush(self._events, (t_ns, next(self._order), kind, w, grad))

    def _factor(self, w: int) -> float:
        sigma = self.cfg.jitter
        jitter = self._jitter[w].lognormal(0.0, sigma) if sigma else 1.0
        return float(self.factors[w] * jitter)

    def set_workers(self, n: int) -> None:
        """``--elastic auto``: ids 0..n-1 active from now; a woken worker starts a turn, a
        stopped one finishes the turn it is in and then idles."""
        self.policies.set_workers(n, self.seconds())
        self.aom.set_active(worker_bits(list(range(n)), self.aom.workers), self.now_us())
        for w in sorted(w for w in self._idle if self.active[w]):
            self._idle.discard(w)
            self.start_turn(w)

    def start_turn(self, w: int) -> None:
        """Worker ``w`` takes the newest weights it has and starts acting."""
        if not self.active[w]:
            self._idle.add(w)
            return
        worker, _ = self.pool[w]
        fresh = self.newest(worker.model_version)
        if fresh is not None:
            worker.load_weights(*fresh)
        act_ns = self._steps[w] * self.cfg.step_time_us * 1000.0 * self._factor(w)
        self._at(self.now_ns + max(1, round(act_ns)), "act", w)

    def _act(self, w: int) -> None:
        worker, _ = self.pool[w]
        grad = worker.rollout()  # acted with the weights of start_turn; refreshed now
        self._steps[w] = grad.steps
        self.progress.add(w, grad, self.seconds())
        compute_ns = self.cfg.compute_time_us * 1000.0 * self._factor(w)
        self._at(self.now_ns + max(1, round(compute_ns)), "send", w, grad)

    def _send(self, w: int, grad: Any) -> None:
        _, sender = self.pool[w]
        self.switch_until(self.now_ns)  # the ACKs that can have arrived are there
        sender.send_gradient(grad.flat, reward=grad.reward, model_version=grad.model_version)
        self.start_turn(w)

    def uplink(self, w: int, rows: np.ndarray) -> None:
        """Worker ``w``'s blocks serialise on its link, then propagate to the switch."""
        start = max(self.now_ns, self._link_free[w])
        n = len(rows)
        arrives = self.impairment.keep_types(np.full(n, MsgType.UPDATE))  # chaos loss
        for i in range(n):
            t = start + round((i + 1) * self.uplink_ns) + self.prop_ns
            if arrives[i]:
                heapq.heappush(self._arrivals, (t, next(self._order), w, rows[i]))
        self._link_free[w] = start + round(n * self.uplink_ns)

    # -- the switch ----------------------------------------------------------------------------
    def _pulls_before(self, t_ns: int) -> int:
        """Index of the first PULL due at or after ``t_ns``."""
        return max(self.next_pull, math.ceil(t_ns / self.pull_ns))

    def switch_until(self, t_ns: int) -> None:
        """Run the switch up to ``t_ns``: every UPDATE that has arrived and every PULL
        due, in time order, through the reference queue in one batch."""
        arrivals, cap = self._arrivals, self.cfg.capacity
        rows: list[np.ndarray] = []
        times: list[int] = []
        workers: list[int] = []
        bound = self.queue.occupied  # an upper bound of the occupancy as the batch goes on

        def pulls(until_k: int) -> None:
            nonlocal bound
            due = until_k - self.next_pull
            run = min(due, bound)
            for k in range(self.next_pull, self.next_pull + run):
                rows.append(self._pull_row)
                times.append(round(k * self.pull_ns))
                workers.append(-1)
            self.counts["pulls_sent"] += due
            self.counts["empty_not_run"] += due - run
            self.next_pull = until_k
            bound -= run

        while arrivals and arrivals[0][0] <= t_ns:
            t, _, w, row = heapq.heappop(arrivals)
            pulls(self._pulls_before(t))
            rows.append(row)
            times.append(t)
            workers.append(w)
            bound = min(bound + 1, cap)
        pulls(self._pulls_before(t_ns + 1))
        if rows:
            self._process(np.stack(rows), times, workers)

    def _process(self, rows: np.ndarray, times: list[int], workers: list[int]) -> None:
        cfg = self.cfg
        lengths = np.array([len(r) if w >= 0 else HEADER_LEN for r, w in zip(rows, workers,
                                                                             strict=True)])
        batch = decode_rows(rows, lengths, cfg.values)
        responses, source, _ = self.queue.process(batch)
        h = responses.headers
        kinds = h["msg_type"]
        src = source.tolist()
        acks = np.flatnonzero(kinds == MsgType.ACK)
        if len(acks):
            wire = encode_array(responses)[acks, :HEADER_LEN]
            for row, i in zip(wire, acks.tolist(), strict=True):
                j = src[i]
                self.transports[workers[j]].inbox.append((times[j] + self.prop_ns, row.tobytes()))
        data = np.flatnonzero((kinds == MsgType.DATA) & self.impairment.keep_types(kinds))
        self.counts["empty"] += int((kinds == MsgType.EMPTY).sum())
        if len(data):
            heads = h[data]
            values = mean_values(responses.values[data], heads["agg_count"], cfg.frac_bits)
            rewards = heads["reward"].astype(np.float64) * 2.0 ** -cfg.frac_bits
            # A DATA reaches the PS one block's time on C and a propagation after its PULL.
            arrive = times[src[int(data[-1])]] + round(self.pull_ns) + self.prop_ns
            self._data.append((arrive, DataBatch(heads, values, rewards, arrive // 1000)))

    def deliver_data(self, t_ns: int) -> None:
        """The PS applies the DATA that has reached it by ``t_ns``."""
        while self._data and self._data[0][0] <= t_ns:
            _, batch = self._data.popleft()
            h = batch.headers
            self.aom.record_batch(batch.received_at, h["contributors"], h["gen_time_us"])
            self.counts["data_blocks"] += len(batch)
            self.counts["aggregated_updates"] += int(h["agg_count"].sum())
            self.apply(batch)

    def outcomes(self) -> dict[str, int]:
        return {o.name: int(self.queue.counters.outcomes[o]) for o in Outcome}

    def set_threshold(self, threshold: float) -> int:
        """The controller's target: the queue's reward threshold, raw fixed point."""
        self.queue.threshold = threshold_raw(threshold, self.cfg.frac_bits)
        return self.queue.threshold

    def close(self) -> list[dict[str, Any]]:
        finals = [sender.stats() for _, sender in self.pool]
        for worker, sender in self.pool:
            worker.close()
            sender.close()
        return finals


def run_simulated(cfg: RunConfig, progress: Callable[[Snapshot], None] | None = None,
                  tensorboard: Any = None, chaos: Any = None) -> RunResult:
    """One run on the virtual clock (see the module doc); ``duration`` caps simulated time;
    ``chaos``: an ``olaf.drl.chaos.Chaos`` whose faults the run suffers."""
    began = time.perf_counter()
    torch.set_num_threads(1)
    ps = parameter_server(cfg, run_model(cfg))
    result = RunResult(cfg, num_parameters=len(ps.params), num_blocks=ps.num_blocks,
                       weights_downlink="modelled delay: model bytes over the uplink rate + propagation")
    backend = Simulated(cfg, result, ps)
    backend.chaos = chaos
    tb = None
    if tensorboard is not None:
        from olaf.drl.tensorboard import TensorBoardLog  # optional: imports tensorboard

        tb = TensorBoardLog(tensorboard)
    controller = ThresholdLoop(backend.set_threshold, floor=cfg.threshold_floor,
                               interval=cfg.controller_interval, fraction=cfg.threshold_fraction,
                               rule=cfg.reward_rule, congested=lambda: backend.queue.congested)
    loop = TrainingLoop(cfg, result, backend, 0.0, controller=controller, progress=progress,
                        tb=tb)
    # The initial weights are every worker's at once, as the local backend's board is.
    weights, version = ps.snapshot()
    backend._publications.append(_Publication(0, weights, version))
    backend.policies.start(0.0)
    try:
        for w in range(cfg.workers):
            backend.start_turn(w)
        loop.run()
    finally:
        result.senders = backend.close()
        if tb is not None:
            tb.close()
    backend.policies.finish(backend.seconds())
    result.wall_time = backend.seconds()
    result.receiver = {**backend.counts, "host_s": time.perf_counter() - began}
    result.switch = {"outcomes": backend.outcomes()}
    backend.aom.advance(backend.now_us())
    result.aom = backend.aom.summary()
    series = backend.aom.series
    result.aom_t_ms, result.aom_global_ms = series.t_ms, series.global_ms
    result.update_age_ms = series.ages_ms
    result.model_version, result.blocks_applied = ps.model_version, ps.blocks_applied
    result.policies = backend.policies.stats([d[3] for d in result.data])
    result.active_workers = sum(backend.active)
    result.final_eval_return = Evaluator(cfg).final(ps.params)
    finish_returns(result)
    result.receiver["host_s"] = time.perf_counter() - began
    return result
