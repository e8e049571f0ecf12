"""``olaf run`` as a library: software switch + parameter server + N workers, here.

Processes and threads:

* this process: the software switch (``UdpSwitch`` in a thread, the embedded mode),
  the parameter server (a ``Receiver`` thread PULLing at ``pull_rate`` and applying
  each DATA block with Adam), and the main loop, which publishes weights every
  ``broadcast_period``, runs the controller loop every ``controller_interval``,
  samples metrics and checks the stop condition;
* ``worker_processes`` worker processes, each hosting several logical workers
  round-robin (worker ``w`` lives in process ``w % P``): a worker reads the newest
  weights from the shared-memory ``WeightBoard``, rolls out, computes its clipped
  gradient and sends it through its own ``Sender`` and UDP socket to the switch.
  Several logical workers per process is how 32 workers fit on 2 cores: what the
  switch sees is 32 worker ids, 32 sockets and 32 independent send policies.

Every gradient crosses the switch as UPDATE datagrams on loopback; weights come back
through shared memory (the embedded "separate channel" instead of MODEL messages).
Everything started here is stopped here, by handle: processes are joined, then
terminated by PID if they do not exit; sockets are closed; the shared memory is
unlinked.
"""

from __future__ import annotations

import contextlib
import math
import multiprocessing as mp
import os
import queue as queue_mod
import time
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from olaf.drl.config import RunConfig

PROGRESS_PERIOD = 0.25
"""Seconds between a worker process's progress messages."""
SAMPLE_PERIOD = 0.5
"""Seconds between rows of the metrics timeline."""
JOIN_TIMEOUT = 10.0
"""Seconds a worker process gets to exit by itself before it is terminated."""
WORKER_NICENESS = 5
"""Worker processes yield the CPU to the switch and the PS: on a loaded 2-core machine the
pull rate, not the scheduler, must be the bottleneck the queue absorbs."""


@dataclass
class Snapshot:
    """What the live display shows, sampled every ``SAMPLE_PERIOD``."""

    elapsed: float
    env_steps: int
    episodes: int
    mean_return: float
    aom_ms: float
    occupied: int
    capacity: int
    outcomes: dict[str, int]
    model_version: int
    blocks_applied: int
    threshold: float | None
    updates_sent: int
    updates_skipped: int
    updates_probes: int = 0
    """Sent only because the worker's feedback had expired (DESIGN.md §4)."""
    p_s_mean: float = math.nan
    """Mean P_s of the workers' draws since the previous sample (NaN: no draw)."""
    eval_return: float = math.nan
    """Mean return of the latest greedy evaluation (NaN before the first)."""
    learner: dict[str, float] = field(default_factory=dict)
    """Mean loss terms and gradient norms of the gradients made since the previous sample."""


@dataclass
class RunResult:
    """Everything a run measured; ``summary()`` is what the table and JSON show."""

    config: RunConfig
    wall_time: float = 0.0
    time_to_target: float | None = None
    steps_to_target: int | None = None
    episodes: list[tuple[float, int, int, float, int]] = field(default_factory=list)
    """(time s, env steps when reported, worker, return, length) per finished episode."""
    timeline: list[Snapshot] = field(default_factory=list)
    data: list[tuple[float, int, int, int, float]] = field(default_factory=list)
    """(time s, block_id, agg_count, staleness in versions, reward) per DATA block."""
    aom: dict[str, Any] = field(default_factory=dict)
    aom_t_ms: np.ndarray = field(default_factory=lambda: np.zeros(0))
    aom_global_ms: np.ndarray = field(default_factory=lambda: np.zeros(0))
    update_age_ms: np.ndarray = field(default_factory=lambda: np.zeros(0))
    switch: dict[str, Any] = field(default_factory=dict)
    receiver: dict[str, Any] = field(default_factory=dict)
    senders: list[dict[str, Any]] = field(default_factory=list)
    env_steps: int = 0
    model_version: int = 0
    blocks_applied: int = 0
    num_parameters: int = 0
    num_blocks: int = 0
    initial_return: float = math.nan
    final_return: float = math.nan
    """Mean of the last window of episodes, including those reported while the run shut down."""
    return_at_target: float = math.nan
    """The greedy evaluation that first reached the target (NaN if none did)."""
    evaluations: list[tuple[float, int, float, float, int]] = field(default_factory=list)
    """(time s, env steps, mean, std, model version) per greedy evaluation."""
    final_eval_return: float = math.nan
    """Greedy evaluation of the weights the run ended with."""
    stopped_by: str = "duration"
    switch_address: tuple[str, int] = ("", 0)
    weight_board: str = ""
    """Name of the shared-memory segment (removed at the end of the run)."""
    worker_pids: list[int] = field(default_factory=list)
    policies: dict[str, Any] = field(default_factory=dict)
    """Aggregation and worker-scaling figures (``RunPolicies.stats``)."""

    def summary(self) -> dict[str, Any]:
        cfg = self.config
        _, _, rolling = rolling_returns(self.episodes, cfg.target_window)
        block_bytes = 36 + 4 * cfg.values
        data_blocks = int(self.receiver.get("data_blocks", 0))
        sent = sum(s.get("sent_updates", 0) for s in self.senders)
        skipped = sum(s.get("skipped_updates", 0) for s in self.senders)
        per_worker = [worker_tx(s) for s in self.senders]
        shares = [w["skipped_share"] for w in per_worker if w["skipped_share"] is not None]
        p_sum = sum(s.get("p_s_sum", 0.0) for s in self.senders)
        per_aom = self.aom.get("per_worker", {}).get("mean", [])
        agg = [d[2] for d in self.data]
        stale = [d[3] for d in self.data]
        return {
            "env": cfg.env_id,
            "mode": cfg.mode,
            "variant": cfg.variant,
            "workers_send": "P_s" if cfg.workers_use_p_s else "always",
            "feedback_ttl_ms": cfg.feedback_ttl_ms,
            "workers": cfg.workers,
            "worker_processes": cfg.worker_processes,
            "pull_rate": cfg.pull_rate,
            "capacity": cfg.capacity,
            "seed": cfg.seed,
            "algo": cfg.algo,
            "target_reward": cfg.target_reward,
            "total_steps_budget": cfg.total_steps,
            "wall_time_s": self.wall_time,
            "stopped_by": self.stopped_by,
            "time_to_target_s": self.time_to_target,
            "steps_to_target": self.steps_to_target,
            "env_steps": self.env_steps,
            "episodes": len(self.episodes),
            "initial_return": self.initial_return,
            "final_return": self.final_return,
            "return_at_target": self.return_at_target,
            "best_return": float(rolling.max()) if len(rolling) else math.nan,
            "evaluations": len(self.evaluations),
            "eval_return_last": self.evaluations[-1][2] if self.evaluations else math.nan,
            "best_eval_return": (max(e[2] for e in self.evaluations) if self.evaluations
                                 else math.nan),
            "final_eval_return": self.final_eval_return,
            "aom_mean_ms": self.aom.get("mean", math.nan),
            "aom_p99_ms": self.aom.get("p99", math.nan),
            "aom_fairness_gap_ms": self.aom.get("fairness_gap_ms", math.nan),
            "aom_worker_spread_ms": (float(max(per_aom) - min(per_aom)) if per_aom else math.nan),
            "update_age_mean_ms": self.aom.get("update_age", {}).get("mean", math.nan),
            "update_age_p99_ms": self.aom.get("update_age", {}).get("p99", math.nan),
            "data_blocks": data_blocks,
            "bytes_to_ps": data_blocks * block_bytes,
            "aggregated_updates": int(self.receiver.get("aggregated_updates", 0)),
            "mean_agg_count": float(np.mean(agg)) if agg else math.nan,
            "mean_staleness_versions": float(np.mean(stale)) if stale else math.nan,
            "updates_sent": sent,
            "updates_skipped": skipped,
            "updates_probes": sum(s.get("probe_updates", 0) for s in self.senders),
            "skipped_share": skipped / (sent + skipped) if sent + skipped else math.nan,
            "skipped_share_min": min(shares) if shares else math.nan,
            "skipped_share_max": max(shares) if shares else math.nan,
            "p_s_mean": p_sum / (sent + skipped) if sent + skipped else math.nan,
            "worker_blocks_sent": sum(s.get("sent_blocks", 0) for s in self.senders),
            "worker_bytes": sum(s.get("sent_blocks", 0) for s in self.senders) * block_bytes,
            "per_worker": per_worker,
            "model_version": self.model_version,
            "blocks_applied": self.blocks_applied,
            "num_parameters": self.num_parameters,
            "blocks_per_gradient": self.num_blocks,
            "outcomes": self.switch.get("outcomes", {}),
            **self.policies,
        }


def worker_tx(stats: dict[str, Any]) -> dict[str, Any]:
    """One worker's sending figures from its ``Sender.stats()``."""
    sent, skipped = stats.get("sent_updates", 0), stats.get("skipped_updates", 0)
    draws = sent + skipped
    return {
        "worker_id": stats.get("worker_id"),
        "sent": sent,
        "skipped": skipped,
        "probes": stats.get("probe_updates", 0),
        "skipped_share": skipped / draws if draws else None,
        "p_s_mean": stats.get("p_s_sum", 0.0) / draws if draws else None,
        "blocks_sent": stats.get("sent_blocks", 0),
        "blocks_acked": stats.get("acked_blocks", 0),
        "blocks_lost": stats.get("lost_blocks", 0),
    }


def _tx_totals(stats: list[dict[str, Any]]) -> dict[str, float]:
    """What a worker process reports of its senders: sums of updates, probes and P_s."""
    return {"sent": sum(st["sent_updates"] for st in stats),
            "skipped": sum(st["skipped_updates"] for st in stats),
            "probes": sum(st["probe_updates"] for st in stats),
            "p_s_sum": sum(st["p_s_sum"] for st in stats)}


def rolling_returns(
    episodes: list[tuple[float, int, int, float, int]], window: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(end time s, env steps, mean return of the last ``window`` episodes), one row per episode.

    Episodes arrive in batches per worker process, so arrival order is not the order in
    which they ended: a process starved for a while delivers old episodes late. Ordering
    by end time makes "the last ``window`` episodes" mean what it says.
    """
    ep = sorted(episodes, key=lambda e: e[0])
    if not ep:
        return np.zeros(0), np.zeros(0), np.zeros(0)
    t = np.array([e[0] for e in ep])
    steps = np.array([e[1] for e in ep])
    ret = np.array([e[3] for e in ep], np.float64)
    w = min(window, len(ret))
    mean = np.convolve(ret, np.ones(w) / w, mode="valid")
    return t[w - 1 :], steps[w - 1 :], mean


class LearnerStats:
    """Running means of the ``Gradient.stats`` a worker process made since the last report."""

    def __init__(self) -> None:
        self._sums: dict[str, float] = {}
        self._count = 0

    def add(self, stats: dict[str, float]) -> None:
        for k, v in stats.items():
            self._sums[k] = self._sums.get(k, 0.0) + float(v)
        self._count += 1

    def take(self) -> dict[str, float]:
        """The means so far (empty if none), and start over."""
        out = {k: v / self._count for k, v in self._sums.items()} if self._count else {}
        self._sums, self._count = {}, 0
        return out


# -- worker processes ----------------------------------------------------------------
def _worker_main(
    cfg: RunConfig,
    worker_ids: list[int],
    switch_address: tuple[str, int],
    board_name: str,
    num_params: int,
    events: Any,
    go: Any,
    stop: Any,
    active: Any = None,
) -> None:
    """Entry point of one worker process: several logical workers, round-robin.

    ``active`` (boost scaling) holds one flag per logical worker: an inactive worker is
    skipped, and a process with none active idles. With boost scaling the process that
    hosts worker 0 also runs the curvature probe every ``boost_period`` and reports
    ``("curvature", pid, lambda_max, lambda_min, wall s, CPU s)``.

    Reports ``("ready", pid)`` once its workers are built, waits for ``go``, then sends
    ``("progress", pid, steps, episodes, totals)`` every ``PROGRESS_PERIOD`` (totals:
    ``_tx_totals`` of its senders) and
    ``("final", pid, sender stats)`` after ``stop``.
    """
    import torch

    from olaf.drl.learners import make_worker
    from olaf.drl.model import build_model
    from olaf.drl.weights import WeightBoard
    from worker_transport.policy import AlwaysSend, OlafPolicy
    from worker_transport.sender import Sender
    from worker_transport.transport import UdpTransport

    torch.set_num_threads(1)
    with contextlib.suppress(OSError):
        os.nice(WORKER_NICENESS)
    board = WeightBoard(num_params, name=board_name)
    pool: list[tuple[Any, Sender]] = []
    try:
        for w in worker_ids:
            policy = (OlafPolicy(feedback_ttl_ms=cfg.feedback_ttl_ms) if cfg.workers_use_p_s
                      else AlwaysSend())
            sender = Sender(UdpTransport(switch_address), cluster_id=0, worker_id=w,
                            values=cfg.values, frac_bits=cfg.frac_bits, policy=policy,
                            seed=cfg.seed * 1000 + w, ack_thread=False,
                            shuffle_blocks=cfg.shuffle_blocks)
            worker = make_worker(cfg, w, cfg.seed * 1000 + w)
            if cfg.algo == "impact":
                # IMPACT takes the newest weights just before its loss, always.
                worker.refresh = lambda version: board.read(newer_than=version)
            elif cfg.aggregation == "staleness-aware":
                worker.rho = cfg.staleness.rho
                if cfg.staleness.refresh_before_loss:
                    worker.refresh = lambda version: board.read(newer_than=version)
            pool.append((worker, sender))
        probe, probe_model = None, None
        if cfg.scaling == "boost" and 0 in worker_ids:
            from olaf.drl.boosting import CurvatureProbe

            probe = CurvatureProbe(cfg.boost, cfg.boost_period, cfg.seed, time.monotonic())
            probe_model = build_model(cfg.env_id, cfg.algo_config.hidden, cfg.seed)
        pid = os.getpid()
        events.put(("ready", pid))
        while not go.wait(0.1):
            if stop.is_set():
                return
        episodes: list[tuple[float, int, float, int]] = []
        steps = 0
        learner = LearnerStats()
        last_report = time.monotonic()
        while not stop.is_set():
            ran = False
            for worker, sender in pool:
                if active is not None and not active[worker.worker_id]:
                    continue
                ran = True
                fresh = board.read(newer_than=worker.model_version)
                if fresh is not None:
                    worker.load_weights(*fresh)
                grad = worker.rollout()
                sender.send_gradient(grad.flat, reward=grad.reward,
                                     model_version=grad.model_version)
                now = time.time()
                episodes.extend((now, worker.worker_id, e.ret, e.length) for e in grad.episodes)
                steps += grad.steps
                learner.add(grad.stats)
                if probe is not None and worker.last_rollout is not None:
                    probe.add(*worker.last_rollout)
            if probe is not None and probe.due(time.monotonic()):
                probe_model.load_flat_parameters(board.read()[0])
                events.put(("curvature", pid, *probe.run(probe_model.policy, time.monotonic())))
            if not ran:
                stop.wait(0.01)
            if time.monotonic() - last_report >= PROGRESS_PERIOD:
                stats = [s.stats() for _, s in pool]
                events.put(("progress", pid, steps, episodes, _tx_totals(stats), learner.take()))
                episodes, steps, last_report = [], 0, time.monotonic()
        for _, sender in pool:
            sender.poll(0.05)
        stats = [s.stats() for _, s in pool]
        events.put(("progress", pid, steps, episodes, _tx_totals(stats), learner.take()))
        events.put(("final", pid, stats))
    finally:
        for worker, sender in pool:
            worker.close()
            sender.close()
        board.close()


# -- the run -------------------------------------------------------------------------
def run_experiment(
    cfg: RunConfig,
    progress: Callable[[Snapshot], None] | None = None,
    tensorboard: Path | None = None,
) -> RunResult:
    """Run one experiment to its step budget, target or wall-clock cap; see the module doc.

    ``tensorboard``: a directory for TensorBoard event files of the run's scalars.
    """
    import torch

    from control_plane.controller import ThresholdLoop
    from dataplane.queue import OlafQueue, QueueConfig
    from dataplane.switch import UdpSwitch
    from olaf.drl.controller import RecentRewards, embedded_setter
    from olaf.drl.evaluation import EVAL_SEED_OFFSET, evaluate_greedy, evaluator_main
    from olaf.drl.model import build_model
    from olaf.drl.policies import RunPolicies
    from olaf.drl.server import ParameterServer
    from olaf.drl.weights import WeightBoard
    from worker_transport.protocol import Mode
    from worker_transport.receiver import DataBatch, Receiver
    from worker_transport.transport import UdpTransport

    torch.set_num_threads(1)
    model = build_model(cfg.env_id, cfg.algo_config.hidden, cfg.seed)
    ps = ParameterServer(model.flat_parameters(), cfg.algo_config, cfg.values)
    result = RunResult(cfg, num_parameters=len(ps.params), num_blocks=ps.num_blocks)
    qcfg = QueueConfig(capacity=cfg.capacity, values=cfg.values, max_clusters=1,
                       max_blocks=ps.num_blocks, frac_bits=cfg.frac_bits,
                       mode=Mode.OLAF if cfg.mode == "olaf" else Mode.FIFO)
    ctx = mp.get_context("spawn")
    events = ctx.Queue()
    eval_requests = ctx.Queue()
    go = ctx.Event()
    stop = ctx.Event()
    procs: list[Any] = []
    active = ctx.Array("b", [1] * cfg.workers, lock=False) if cfg.scaling != "fixed" else None
    policies = RunPolicies(cfg, ps, active)
    board = WeightBoard(len(ps.params))
    switch = UdpSwitch(OlafQueue(qcfg), "127.0.0.1", 0)
    result.switch_address, result.weight_board = switch.address, board.name
    switch_thread, switch_stop = switch.start()
    receiver: Receiver | None = None
    receiver_error: BaseException | None = None
    tb = None
    if tensorboard is not None:
        from olaf.drl.tensorboard import TensorBoardLog

        tb = TensorBoardLog(tensorboard)

    # The controller loop, in process: ThresholdLoop's rule, the embedded switch as target.
    controller = ThresholdLoop(embedded_setter(switch, cfg.frac_bits), floor=cfg.threshold_floor,
                               interval=cfg.controller_interval, fraction=cfg.threshold_fraction)
    rewards = RecentRewards(cfg.reward_history)
    data_log = result.data
    t0 = time.time()

    def on_batch(batch: DataBatch) -> None:
        h = batch.headers
        version = ps.model_version
        t = batch.received_at / 1e6 - t0
        policies.apply(h["block_id"].tolist(), batch.values, h["agg_count"].tolist(),
                       h["model_version"].tolist(), version)
        rewards.extend(batch.rewards.tolist())
        data_log.extend(
            (t, b, a, version - m, r)
            for b, a, m, r in zip(h["block_id"].tolist(), h["agg_count"].tolist(),
                                  h["model_version"].tolist(), batch.rewards.tolist(),
                                  strict=True))

    try:
        weights, version = ps.snapshot()
        board.publish(weights, version)
        nproc = cfg.worker_processes
        for p in range(nproc):
            ids = list(range(p, cfg.workers, nproc))
            proc = ctx.Process(target=_worker_main, name=f"olaf-worker-{p}", daemon=True,
                               args=(cfg, ids, switch.address, board.name, len(ps.params),
                                     events, go, stop, active))
            proc.start()
            procs.append(proc)
            result.worker_pids.append(proc.pid)
        evaluator = ctx.Process(target=evaluator_main, name="olaf-evaluator", daemon=True,
                                args=(cfg, board.name, len(ps.params), eval_requests, events, stop,
                                      WORKER_NICENESS))
        evaluator.start()
        procs.append(evaluator)
        result.worker_pids.append(evaluator.pid)
        _wait_ready(events, procs)
        # The clock starts when every worker is built: process start-up (importing torch)
        # is not training time, and AoM must not count it either.
        receiver = Receiver(UdpTransport(switch.address), values=cfg.values,
                            frac_bits=cfg.frac_bits, pull_rate=cfg.pull_rate, on_batch=on_batch,
                            workers=min(cfg.workers, 32))
        t0 = receiver.aom.start_us / 1e6
        policies.start(t0)
        receiver.start()
        go.set()
        _main_loop(cfg, result, ps, board, controller, rewards, switch, receiver, events, procs,
                   progress, t0, policies, eval_requests, tb)
        policies.finish(time.time())
    finally:
        stop.set()
        if receiver is not None:
            # Stop pulling first: AoM is sampled up to here, not through the shutdown.
            receiver_error = _stop_receiver(receiver)
        finals = _drain_until_exit(events, procs, result, t0)
        for proc in procs:
            if proc.is_alive():
                proc.terminate()
                proc.join(2.0)
            if proc.is_alive():
                proc.kill()
                proc.join()
        for q in (events, eval_requests):
            q.close()
            q.join_thread()
        if receiver is not None:
            receiver.transport.close()
        switch_stop.set()
        switch_thread.join()
        switch.close()
        board.close()
        if tb is not None:
            tb.close()
    if receiver_error is not None:
        raise RuntimeError("the parameter server's receiver failed") from receiver_error
    result.senders = finals
    result.wall_time = time.time() - t0
    result.receiver = receiver.stats() if receiver is not None else {}
    result.switch = switch.pipeline.snapshot()
    if receiver is not None:
        result.aom = receiver.aom.summary()
        series = receiver.aom.series
        result.aom_t_ms, result.aom_global_ms = series.t_ms, series.global_ms
        result.update_age_ms = series.ages_ms
    result.model_version, result.blocks_applied = ps.model_version, ps.blocks_applied
    result.policies = policies.stats([d[3] for d in result.data])
    # The weights the run ended with, judged like every evaluation (workers are gone now).
    model.load_flat_parameters(ps.params)
    result.final_eval_return = float(evaluate_greedy(
        model.policy, cfg.env_id, cfg.eval_episodes, EVAL_SEED_OFFSET - 1 - cfg.seed).mean())
    _, _, rolling = rolling_returns(result.episodes, cfg.target_window)
    if len(rolling):
        result.initial_return = float(rolling[0])
        result.final_return = float(rolling[-1])
    return result


def _main_loop(
    cfg: RunConfig,
    result: RunResult,
    ps: Any,
    board: Any,
    controller: Any,
    rewards: Any,
    switch: Any,
    receiver: Any,
    events: Any,
    procs: list[Any],
    progress: Callable[[Snapshot], None] | None,
    t0: float,
    policies: Any,
    eval_requests: Any = None,
    tb: Any = None,
) -> None:
    recent: deque[float] = deque(maxlen=cfg.target_window)
    counters: dict[str, Any] = {"steps": 0, "tx": {}, "policies": policies, "learner": {},
                                "eval_pending": False, "tb": tb, "target": cfg.target_reward}
    last_draws, last_p_sum = 0.0, 0.0
    next_publish = next_control = next_sample = time.time()
    next_eval = 0
    while True:
        now = time.time()
        elapsed = now - t0
        try:
            while True:
                _handle_event(events.get_nowait(), result, recent, counters, t0)
        except queue_mod.Empty:
            pass
        if now >= next_publish:
            board.publish(*ps.snapshot())
            next_publish = now + cfg.broadcast_period
        if (eval_requests is not None and not counters["eval_pending"]
                and counters["steps"] >= next_eval):
            # One evaluation at a time: a slow evaluator skips points, it never queues them.
            board.publish(*ps.snapshot())
            eval_requests.put((counters["steps"], elapsed))
            counters["eval_pending"] = True
            next_eval = counters["steps"] + cfg.eval_every
        policies.tick()
        if now >= next_control:
            controller.feed(rewards.snapshot())
            controller.step()
            next_control = now + cfg.controller_interval
        reached = result.time_to_target is not None
        if now >= next_sample or elapsed >= cfg.duration:
            receiver.aom.advance()
            series_tail = receiver.aom.series.global_ms
            tx = {k: sum(t[k] for t in counters["tx"].values())
                  for k in ("sent", "skipped", "probes", "p_s_sum")}
            draws = tx["sent"] + tx["skipped"]
            p_s_mean = ((tx["p_s_sum"] - last_p_sum) / (draws - last_draws)
                        if draws > last_draws else math.nan)
            last_draws, last_p_sum = draws, tx["p_s_sum"]
            snap = Snapshot(
                elapsed=elapsed,
                env_steps=counters["steps"],
                episodes=len(result.episodes),
                mean_return=float(np.mean(recent)) if recent else math.nan,
                aom_ms=float(series_tail[-1]) if len(series_tail) else math.nan,
                occupied=switch.queue.occupied,
                capacity=cfg.capacity,
                outcomes=dict(switch.pipeline.snapshot()["outcomes"]),
                model_version=ps.model_version,
                blocks_applied=ps.blocks_applied,
                threshold=controller.history[-1].threshold if controller.history else None,
                updates_sent=int(tx["sent"]),
                updates_skipped=int(tx["skipped"]),
                updates_probes=int(tx["probes"]),
                p_s_mean=p_s_mean,
                eval_return=result.evaluations[-1][2] if result.evaluations else math.nan,
                learner=_mean_learner(counters["learner"]),
            )
            counters["learner"] = {}
            result.timeline.append(snap)
            if tb is not None:
                tb.snapshot(snap)
            if progress is not None:
                progress(snap)
            next_sample = now + SAMPLE_PERIOD
        if reached and cfg.stop_at_target:
            result.stopped_by = "target"
            return
        if counters["steps"] >= cfg.total_steps:
            result.stopped_by = "steps"
            return
        if elapsed >= cfg.duration:
            result.stopped_by = "duration"
            return
        dead = [p for p in procs if not p.is_alive()]
        if dead:
            raise RuntimeError(f"worker process {dead[0].name} exited with {dead[0].exitcode}")
        time.sleep(min(cfg.broadcast_period, 0.02))
        result.env_steps = counters["steps"]


def _mean_learner(per_process: dict[int, dict[str, float]]) -> dict[str, float]:
    """Mean over the worker processes that reported learner statistics since the last sample."""
    keys = sorted({k for stats in per_process.values() for k in stats})
    return {k: float(np.mean([s[k] for s in per_process.values() if k in s])) for k in keys}


def _handle_event(
    event: tuple, result: RunResult, recent: deque[float], counters: dict, t0: float
) -> list[dict[str, Any]] | None:
    kind = event[0]
    tb = counters.get("tb")
    if kind == "progress":
        _, pid, steps, episodes, tx, *rest = event
        counters["steps"] += steps
        result.env_steps = counters["steps"]
        for t, worker, ret, length in episodes:
            result.episodes.append((t - t0, counters["steps"], worker, ret, length))
            recent.append(ret)
            if tb is not None:
                tb.episode(ret, counters["steps"])
        counters["tx"][pid] = tx
        if rest and rest[0] and "learner" in counters:
            counters["learner"][pid] = rest[0]
        return None
    if kind == "final":
        return event[2]
    if kind == "eval":
        _, steps, elapsed, mean, std, version, _wall = event
        result.evaluations.append((elapsed, steps, mean, std, version))
        counters["eval_pending"] = False
        if tb is not None:
            tb.evaluation(mean, std, steps)
        target = counters.get("target")
        if target is not None and mean >= target and result.time_to_target is None:
            # When the evaluated weights were taken, not when the evaluator finished.
            result.time_to_target, result.steps_to_target = elapsed, steps
            result.return_at_target = mean
        return None
    if kind == "curvature":
        if "policies" in counters:
            _, _, lmax, lmin, wall_s, cpu_s = event
            counters["policies"].record_curvature(lmax, lmin, wall_s, time.time(), cpu_s)
        return None
    raise ValueError(f"unknown worker event {kind!r}")


def _drain_until_exit(
    events: Any, procs: list[Any], result: RunResult, t0: float
) -> list[dict[str, Any]]:
    """Read worker events until every process has exited (or JOIN_TIMEOUT passes).

    A process cannot exit while its queue feeder still holds data, so draining comes
    before joining.
    """
    finals: list[dict[str, Any]] = []
    recent: deque[float] = deque(maxlen=1)
    counters = {"steps": result.env_steps, "tx": {}}
    deadline = time.monotonic() + JOIN_TIMEOUT
    while time.monotonic() < deadline:
        try:
            got = _handle_event(events.get(timeout=0.1), result, recent, counters, t0)
            if got is not None:
                finals.extend(got)
        except queue_mod.Empty:
            if not any(p.is_alive() for p in procs):
                break
    for proc in procs:
        proc.join(max(0.0, deadline - time.monotonic()))
    return finals


def _stop_receiver(receiver: Any) -> BaseException | None:
    """Stop the receiver thread; the error it died of, if any, is returned, not raised."""
    try:
        receiver.stop()
    except Exception as exc:  # reported after everything else is cleaned up
        return exc
    return None


def _wait_ready(events: Any, procs: list[Any], timeout: float = 120.0) -> None:
    """Wait for every worker process's ("ready", pid); fail if one dies first."""
    ready: set[int] = set()
    deadline = time.monotonic() + timeout
    while len(ready) < len(procs):
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {len(ready)} of {len(procs)} worker processes started")
        try:
            event = events.get(timeout=0.2)
        except queue_mod.Empty:
            dead = [p for p in procs if not p.is_alive()]
            if dead:
                raise RuntimeError(
                    f"worker process {dead[0].name} exited with {dead[0].exitcode} at start"
                ) from None
            continue
        if event[0] == "ready":
            ready.add(event[1])


def result_json(result: RunResult) -> dict[str, Any]:
    """The summary plus the configuration, JSON-ready."""
    out = result.summary()
    out["config"] = asdict(result.config)
    out["aom"] = result.aom
    out["senders"] = result.senders
    out["receiver"] = result.receiver
    out["switch"] = result.switch
    out["switch_address"] = list(result.switch_address)
    out["weight_board"] = result.weight_board
    out["worker_pids"] = result.worker_pids
    return out

