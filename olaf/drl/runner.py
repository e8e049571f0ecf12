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

Platform duties on top (docs/platform.md):

* fault tolerance: a worker process (or the evaluator) that dies is started again with
  the same logical workers (fresh sockets, same ids, seeds of a new generation) and
  counted in ``restarts``; past ``max_restarts`` the run ends with ``RunFailed``, which
  carries the metrics so far, as SIGINT/SIGTERM end it early with them;
* checkpoints every ``checkpoint_every`` env steps and at the end (olaf.drl.checkpoint),
  and ``resume`` from one: same versions, env steps and learning curve;
* elastic workers: ``olaf workers DIR add|remove|set N`` through the run directory
  (olaf.drl.elastic), on the active-worker flags boost scaling uses.
"""

from __future__ import annotations

import contextlib
import math
import multiprocessing as mp
import os
import pickle
import queue as queue_mod
import signal
import threading
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
READY_TIMEOUT = 300.0
"""Seconds the child processes get to import torch and build their workers (minutes on a
2-core machine that is busy with other runs)."""
STATUS_PERIOD = 1.0
"""Seconds between rewrites of the run directory's ``run.json``."""
PARENT_CHECK_PERIOD = 0.5
"""Seconds between a child process's checks that the run's process is still there."""
GENERATION_STRIDE = 1 << 20
"""Seed distance between generations of worker processes (``worker_seed``)."""
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
    active_workers: int = 0
    """Logical workers active at the sample (boost scaling, ``olaf workers``)."""
    restarts: int = 0
    """Worker processes restarted so far."""


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
    restarts: int = 0
    """Child processes that died and were started again (over every resumed part)."""
    restart_log: list[tuple[float, str, int | None]] = field(default_factory=list)
    """(time s, process name, exit code) per restart in this part of the run."""
    checkpoints: int = 0
    """Checkpoints written by this part of the run."""
    resumed_from: int | None = None
    """Env steps of the checkpoint this run continued, if it was resumed."""
    error: str = ""
    """Why the run ended early (``stopped_by == "error"``), else empty."""
    active_workers: int = 0
    """Logical workers active when the run ended."""
    worker_changes: list[tuple[float, int]] = field(default_factory=list)
    """(time s, active workers) per change made by hand (``olaf workers``)."""

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
            "worker_restarts": self.restarts,
            "checkpoints_written": self.checkpoints,
            "resumed_from_steps": self.resumed_from,
            "max_workers": cfg.max_workers or cfg.workers,
            "active_workers": self.active_workers,
            "error": self.error or None,
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


# -- worker processes ----------------------------------------------------------------
class SharedFlag:
    """A one-byte flag in shared memory, read without a lock.

    ``multiprocessing.Event`` takes a lock on every ``is_set``; a worker process killed
    with SIGKILL while holding it would leave every other process blocked for good. A
    byte needs no lock: one writer sets it, readers poll it.
    """

    def __init__(self, ctx: Any) -> None:
        self._value = ctx.RawValue("b", 0)

    def set(self) -> None:
        self._value.value = 1

    def is_set(self) -> bool:
        return bool(self._value.value)

    def wait(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while not self.is_set() and time.monotonic() < deadline:
            time.sleep(0.01)
        return self.is_set()


def worker_seed(seed: int, worker_id: int, generation: int) -> int:
    """Seed of logical worker ``worker_id`` in a worker process of ``generation``.

    Generation 0 is the first start of a run (the seeds of a run without restarts); a
    restarted process and every process of a resumed run get a new generation, so they
    do not replay the episodes their predecessors already played.
    """
    return seed * 1000 + worker_id + GENERATION_STRIDE * generation


def _guard_parent(parent_pid: int) -> None:
    """Child processes ignore SIGINT (the terminal sends it to the whole process group;
    the run's process decides how to stop) and exit if the run's process is gone (a PS
    killed with SIGKILL must not leave its workers training for nobody)."""

    def watch() -> None:
        while True:
            time.sleep(PARENT_CHECK_PERIOD)
            if os.getppid() != parent_pid:
                os._exit(1)

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=watch, name="olaf-parent-watch", daemon=True).start()


def _evaluator_entry(parent_pid: int, *args: Any) -> None:
    from olaf.drl.evaluation import evaluator_main

    _guard_parent(parent_pid)
    evaluator_main(*args)


def _worker_main(
    cfg: RunConfig,
    worker_ids: list[int],
    switch_address: tuple[str, int],
    board_name: str,
    num_params: int,
    events: Any,
    go: Any,
    stop: Any,
    active: Any,
    generation: int = 0,
    parent_pid: int | None = None,
) -> None:
    """Entry point of one worker process: several logical workers, round-robin.

    ``worker_ids`` are the logical workers this process may host; ``active`` holds one
    flag per logical worker of the run (boost scaling and elastic workers set them). A
    worker is built (environment, sender, socket) when its flag is first seen up, skipped
    while it is down, and a process with none active idles. With boost scaling the
    process that hosts worker 0 also runs the curvature probe every ``boost_period`` and
    reports ``("curvature", pid, lambda_max, lambda_min, wall s, CPU s)``.

    Reports ``("ready", pid)`` once its active workers are built, waits for ``go``, then
    sends ``("progress", pid, steps, episodes, totals)`` every ``PROGRESS_PERIOD`` (totals:
    ``tx_totals`` of its senders) and ``("final", pid, sender stats)`` after ``stop``.
    """
    import torch

    from olaf.drl.model import build_model
    from olaf.drl.weights import WeightBoard
    from olaf.drl.worker_turn import Progress, build_worker, take_turn, tx_totals

    if parent_pid is not None:
        _guard_parent(parent_pid)
    torch.set_num_threads(1)
    with contextlib.suppress(OSError):
        os.nice(WORKER_NICENESS)
    board = WeightBoard(num_params, name=board_name)
    pool: dict[int, tuple[Any, Any]] = {}

    def build(w: int) -> None:
        pool[w] = build_worker(cfg, w, worker_seed(cfg.seed, w, generation), switch_address,
                               board.read)

    try:
        for w in worker_ids:
            if active[w]:
                build(w)
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
        progress = Progress()
        last_report = time.monotonic()
        while not stop.is_set():
            ran = False
            for w in worker_ids:
                if not active[w]:
                    continue
                if w not in pool:
                    build(w)
                worker, sender = pool[w]
                ran = True
                progress.add(w, take_turn(worker, sender, board.read), time.time())
                if probe is not None and worker.last_rollout is not None:
                    probe.add(*worker.last_rollout)
            if probe is not None and probe.due(time.monotonic()):
                probe_model.load_flat_parameters(board.read()[0])
                events.put(("curvature", pid, *probe.run(probe_model.policy, time.monotonic())))
            if not ran:
                stop.wait(0.01)
            if time.monotonic() - last_report >= PROGRESS_PERIOD:
                stats = [s.stats() for _, s in pool.values()]
                steps, episodes, learner = progress.take()
                events.put(("progress", pid, steps, episodes, tx_totals(stats), learner))
                last_report = time.monotonic()
        for _, sender in pool.values():
            sender.poll(0.05)
        stats = [s.stats() for _, s in pool.values()]
        steps, episodes, learner = progress.take()
        events.put(("progress", pid, steps, episodes, tx_totals(stats), learner))
        events.put(("final", pid, stats))
    finally:
        for worker, sender in pool.values():
            worker.close()
            sender.close()
        board.close()


@dataclass
class _Child:
    """One child process of the run: a worker process (``ids``) or the evaluator."""

    name: str
    ids: list[int]
    events: Any
    """The child's own event queue: a child killed while writing can only break its own."""
    is_evaluator: bool = False
    proc: Any = None
    generation: int = 0
    requests: Any = None
    """The evaluator's request queue (recreated with the evaluator, for the same reason)."""


class RunFailed(RuntimeError):
    """The run ended on an error; ``result`` holds everything measured until then."""

    def __init__(self, message: str, result: RunResult) -> None:
        super().__init__(message)
        self.result = result


class _Stop:
    """SIGINT/SIGTERM during a run: remember the first, end the run cleanly; a second
    SIGINT interrupts at once."""

    def __init__(self) -> None:
        self.signal: str | None = None
        self._previous: dict[int, Any] = {}

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # signal handlers can only be set from the main thread
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._previous[sig] = signal.signal(sig, self._handle)

    def _handle(self, signum: int, _frame: Any) -> None:
        if self.signal is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.signal = signal.Signals(signum).name

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()


# -- the run -------------------------------------------------------------------------
def run_experiment(
    cfg: RunConfig,
    progress: Callable[[Snapshot], None] | None = None,
    tensorboard: Path | None = None,
    run_dir: Path | None = None,
    resume: Any = None,
) -> RunResult:
    """Run one experiment to its step budget, target or wall-clock cap; see the module doc.

    ``tensorboard``: a directory for TensorBoard event files of the run's scalars.
    ``run_dir``: the run's directory, where ``run.json`` and the worker control requests
    live (olaf.drl.elastic); None: no elastic control.
    ``resume``: an ``olaf.drl.checkpoint.Checkpoint`` to continue from.

    Raises ``RunFailed`` (with the partial result) on an unrecoverable error; SIGINT or
    SIGTERM end the run early with ``stopped_by`` naming the signal.
    """
    import torch

    from control_plane.controller import ThresholdLoop
    from dataplane.queue import OlafQueue, QueueConfig
    from dataplane.switch import UdpSwitch
    from olaf.algorithm import initial_model
    from olaf.drl.controller import RecentRewards, embedded_setter
    from olaf.drl.elastic import ElasticAoM, WorkerControl, worker_bits
    from olaf.drl.evaluation import EVAL_SEED_OFFSET, evaluate_greedy
    from olaf.drl.learners import make_algorithm
    from olaf.drl.policies import RunPolicies
    from olaf.drl.server import ParameterServer
    from olaf.drl.weights import WeightBoard
    from worker_transport.aom import MAX_WORKER_BITS
    from worker_transport.protocol import Mode
    from worker_transport.receiver import DataBatch, Receiver
    from worker_transport.transport import UdpTransport

    torch.set_num_threads(1)
    max_workers = cfg.max_workers or cfg.workers
    if max_workers < cfg.workers:
        raise ValueError(f"max_workers ({max_workers}) must be >= workers ({cfg.workers})")
    model = initial_model(make_algorithm(cfg), cfg.env_id, cfg.seed)
    ps = ParameterServer(model.flat_parameters(), cfg.algo_config, cfg.values)
    result = RunResult(cfg, num_parameters=len(ps.params), num_blocks=ps.num_blocks)
    offset, generation = 0.0, 0
    if resume is not None:
        from olaf.drl.checkpoint import restore_rng

        ps.load_state(resume.ps)
        restore_rng(resume.rng)
        _restore_metrics(result, resume)
        offset, generation = resume.elapsed, resume.generation + 1
        result.resumed_from = resume.env_steps
    qcfg = QueueConfig(capacity=cfg.capacity, values=cfg.values, max_clusters=1,
                       max_blocks=ps.num_blocks, frac_bits=cfg.frac_bits,
                       mode=Mode.OLAF if cfg.mode == "olaf" else Mode.FIFO)
    ctx = mp.get_context("spawn")
    go, stop = SharedFlag(ctx), SharedFlag(ctx)
    children: list[_Child] = []
    active = ctx.Array("b", [1 if w < cfg.workers else 0 for w in range(max_workers)], lock=False)
    policies = RunPolicies(cfg, ps, active)
    board = WeightBoard(len(ps.params))
    switch = UdpSwitch(OlafQueue(qcfg), "127.0.0.1", 0)
    result.switch_address, result.weight_board = switch.address, board.name
    switch_thread, switch_stop = switch.start()
    receiver: Receiver | None = None
    receiver_error: BaseException | None = None
    failure: BaseException | None = None
    control = WorkerControl(run_dir) if run_dir is not None else None
    stopper = _Stop()
    tb = None
    if tensorboard is not None:
        from olaf.drl.tensorboard import TensorBoardLog

        tb = TensorBoardLog(tensorboard)

    # The controller loop, in process: ThresholdLoop's rule, the embedded switch as target.
    controller = ThresholdLoop(embedded_setter(switch, cfg.frac_bits), floor=cfg.threshold_floor,
                               interval=cfg.controller_interval, fraction=cfg.threshold_fraction)
    rewards = RecentRewards(cfg.reward_history)
    data_log = result.data
    t0 = time.time() - offset
    nproc = cfg.worker_processes
    parent = os.getpid()
    counter = {"generation": generation}

    def spawn(child: _Child) -> None:
        """(Re)start ``child`` with fresh queues and the next generation."""
        child.events = ctx.Queue()
        if child.is_evaluator:
            child.requests = ctx.Queue()
            target, args = _evaluator_entry, (parent, cfg, board.name, len(ps.params),
                                              child.requests, child.events, stop, WORKER_NICENESS)
        else:
            child.generation = counter["generation"]
            target, args = _worker_main, (cfg, child.ids, switch.address, board.name,
                                          len(ps.params), child.events, go, stop, active,
                                          child.generation, parent)
        child.proc = ctx.Process(target=target, name=child.name, args=args, daemon=True)
        child.proc.start()
        result.worker_pids.append(child.proc.pid)

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
        stopper.install()
        weights, version = ps.snapshot()
        board.publish(weights, version)
        for p in range(nproc):
            children.append(_Child(f"olaf-worker-{p}", list(range(p, max_workers, nproc)), None))
        children.append(_Child("olaf-evaluator", [], None, is_evaluator=True))
        for child in children:
            spawn(child)
        _wait_ready(children, stopper)
        # The clock starts when every worker is built: process start-up (importing torch)
        # is not training time, and AoM must not count it either.
        bits = min(max_workers, MAX_WORKER_BITS)
        aom = ElasticAoM(active_bits=worker_bits(list(range(cfg.workers)), bits), workers=bits)
        receiver = Receiver(UdpTransport(switch.address), values=cfg.values,
                            frac_bits=cfg.frac_bits, pull_rate=cfg.pull_rate, on_batch=on_batch,
                            aom=aom)
        t0 = aom.start_us / 1e6 - offset
        policies.start(aom.start_us / 1e6)
        loop = _Loop(cfg, result, ps, board, controller, rewards, switch, receiver, children,
                     progress, t0, policies, tb, control, stopper, spawn, counter, active)
        if resume is not None:
            # The resumed run's first evaluation is of the checkpoint's weights exactly:
            # it is asked and answered before any worker may send a gradient.
            loop.evaluate_now(timeout=READY_TIMEOUT)
        receiver.start()
        go.set()
        loop.run()
    except Exception as exc:  # the metrics so far are still collected and returned with it
        failure = exc
        result.stopped_by = "error"
        result.error = f"{type(exc).__name__}: {exc}"
    finally:
        stop.set()
        stopper.restore()
        if receiver is not None:
            # Stop pulling first: AoM is sampled up to here, not through the shutdown.
            receiver_error = _stop_receiver(receiver)
        policies.finish(time.time())
        finals = _drain_until_exit(children, result, t0)
        for child in children:
            if child.proc is None:
                continue
            if child.proc.is_alive():
                child.proc.terminate()
                child.proc.join(2.0)
            if child.proc.is_alive():
                child.proc.kill()
                child.proc.join()
        for child in children:
            for q in (child.events, child.requests):
                if q is not None:
                    q.cancel_join_thread()
                    q.close()
        if receiver is not None:
            receiver.transport.close()
        switch_stop.set()
        switch_thread.join()
        switch.close()
        board.close()
        if tb is not None:
            tb.close()
    if receiver_error is not None and failure is None:
        failure = RuntimeError("the parameter server's receiver failed")
        failure.__cause__ = receiver_error
        result.stopped_by = "error"
        result.error = f"the parameter server's receiver failed: {receiver_error!r}"
    result.senders = finals
    # A run that never started training adds no run time (its checkpoint keeps the clock).
    result.wall_time = time.time() - t0 if receiver is not None else offset
    result.receiver = receiver.stats() if receiver is not None else {}
    result.switch = switch.pipeline.snapshot()
    if receiver is not None:
        result.aom = receiver.aom.summary()
        series = receiver.aom.series
        shift = offset * 1000.0
        result.aom_t_ms = np.concatenate([result.aom_t_ms, series.t_ms + shift])
        result.aom_global_ms = np.concatenate([result.aom_global_ms, series.global_ms])
        result.update_age_ms = np.concatenate([result.update_age_ms, series.ages_ms])
    result.model_version, result.blocks_applied = ps.model_version, ps.blocks_applied
    result.policies = policies.stats([d[3] for d in result.data])
    result.active_workers = int(sum(active[:]))
    if cfg.checkpoint_dir:
        try:
            _save_checkpoint(cfg, result, ps, counter["generation"], receiver_series=None)
        except OSError as exc:
            result.error = (result.error + "; " if result.error else "") + f"checkpoint: {exc}"
    # The weights the run ended with, judged like every evaluation (workers are gone now).
    model.load_flat_parameters(ps.params)
    result.final_eval_return = float(evaluate_greedy(
        model, cfg.env_id, cfg.eval_episodes, EVAL_SEED_OFFSET - 1 - cfg.seed).mean())
    _, _, rolling = rolling_returns(result.episodes, cfg.target_window)
    if len(rolling):
        result.initial_return = float(rolling[0])
        result.final_return = float(rolling[-1])
    if failure is not None:
        raise RunFailed(result.error, result) from failure
    return result


def _restore_metrics(result: RunResult, ckpt: Any) -> None:
    """The checkpoint's learning curve and counters, so the resumed run continues them."""
    m = ckpt.metrics

    def rows(key: str, ints: tuple[int, ...]) -> list[tuple]:
        return [tuple(int(v) if i in ints else float(v) for i, v in enumerate(r))
                for r in np.asarray(m.get(key, np.zeros((0, 5)))).reshape(-1, 5).tolist()]

    result.episodes = rows("episodes", (1, 2, 4))
    result.evaluations = rows("evaluations", (1, 4))
    result.data = rows("data", (1, 2, 3))
    result.aom_t_ms = np.asarray(m.get("aom_t_ms", np.zeros(0)), np.float64)
    result.aom_global_ms = np.asarray(m.get("aom_global_ms", np.zeros(0)), np.float64)
    result.update_age_ms = np.asarray(m.get("update_age_ms", np.zeros(0)), np.float64)
    result.timeline = [Snapshot(**row) for row in ckpt.timeline]
    s = ckpt.scalars
    result.time_to_target, result.steps_to_target = s.get("time_to_target"), s.get("steps_to_target")
    result.return_at_target = float(s.get("return_at_target") or math.nan)
    result.restarts = int(s.get("restarts", 0))
    result.env_steps = ckpt.env_steps


def _save_checkpoint(cfg: RunConfig, result: RunResult, ps: Any, generation: int,
                     receiver_series: Any, elapsed: float | None = None) -> None:
    """Write the run's checkpoint now (``receiver_series``: the live AoM series, if the
    receiver is still running; None when ``result`` already holds all of it)."""
    from olaf.drl.checkpoint import Checkpoint, capture_rng, save

    aom_t, aom_g, ages = result.aom_t_ms, result.aom_global_ms, result.update_age_ms
    if receiver_series is not None:
        series, shift = receiver_series
        aom_t = np.concatenate([aom_t, series.t_ms + shift])
        aom_g = np.concatenate([aom_g, series.global_ms])
        ages = np.concatenate([ages, series.ages_ms])
    ckpt = Checkpoint(
        config=cfg, ps=ps.state(), env_steps=result.env_steps,
        elapsed=result.wall_time if elapsed is None else elapsed,
        metrics={"episodes": np.asarray(result.episodes, np.float64).reshape(-1, 5),
                 "evaluations": np.asarray(result.evaluations, np.float64).reshape(-1, 5),
                 "data": np.asarray(result.data, np.float64).reshape(-1, 5),
                 "aom_t_ms": aom_t, "aom_global_ms": aom_g, "update_age_ms": ages},
        timeline=[asdict(s) for s in result.timeline],
        scalars={"time_to_target": result.time_to_target,
                 "steps_to_target": result.steps_to_target,
                 "return_at_target": (result.return_at_target
                                      if math.isfinite(result.return_at_target) else None),
                 "restarts": result.restarts},
        rng=capture_rng(), generation=generation)
    save(cfg.checkpoint_dir, ckpt)
    result.checkpoints += 1


class _Loop:
    """The main loop of a run: publish weights, ask for evaluations, run the controller,
    sample metrics, watch and restart child processes, apply worker control requests,
    write checkpoints, and decide when to stop."""

    def __init__(self, cfg: RunConfig, result: RunResult, ps: Any, board: Any, controller: Any,
                 rewards: Any, switch: Any, receiver: Any, children: list[_Child],
                 progress: Callable[[Snapshot], None] | None, t0: float, policies: Any,
                 tb: Any, control: Any, stopper: _Stop, spawn: Callable[[_Child], None],
                 counter: dict[str, int], active: Any) -> None:
        self.cfg, self.result, self.ps, self.board = cfg, result, ps, board
        self.controller, self.rewards, self.switch, self.receiver = controller, rewards, switch, receiver
        self.children, self.progress, self.t0, self.policies = children, progress, t0, policies
        self.tb, self.control, self.stopper, self.spawn = tb, control, stopper, spawn
        self.counter, self.active = counter, active
        self.max_workers = len(active)
        self.recent: deque[float] = deque(maxlen=cfg.target_window)
        self.counters: dict[str, Any] = {
            "steps": result.env_steps, "tx": {}, "policies": policies, "learner": {},
            "eval_pending": False, "tb": tb, "target": cfg.target_reward}
        self.next_eval = result.env_steps
        every = cfg.checkpoint_every
        self.next_checkpoint = (result.env_steps // every + 1) * every if every else math.inf
        self.next_status = 0.0

    @property
    def evaluator(self) -> _Child:
        return next(c for c in self.children if c.is_evaluator)

    def poll_events(self) -> None:
        for child in self.children:
            _drain_queue(child.events, self.result, self.recent, self.counters, self.t0)

    def request_eval(self, elapsed: float) -> None:
        # One evaluation at a time: a slow evaluator skips points, it never queues them.
        self.board.publish(*self.ps.snapshot())
        self.evaluator.requests.put((self.counters["steps"], elapsed))
        self.counters["eval_pending"] = True
        self.next_eval = self.counters["steps"] + self.cfg.eval_every

    def evaluate_now(self, timeout: float) -> None:
        """Ask for an evaluation and wait for its answer (workers hold still meanwhile)."""
        self.request_eval(time.time() - self.t0)
        deadline = time.monotonic() + timeout
        while self.counters["eval_pending"]:
            if time.monotonic() > deadline:
                raise TimeoutError("the evaluator did not answer")
            if self.stopper.signal is not None:
                return
            self.poll_events()
            self.supervise()
            time.sleep(0.02)

    def supervise(self) -> None:
        """Restart child processes that died (their logical workers rejoin with fresh
        sockets and the same ids); past ``max_restarts`` the run ends with an error."""
        for child in self.children:
            if child.proc.is_alive():
                continue
            code = child.proc.exitcode
            if self.result.restarts >= self.cfg.max_restarts:
                raise RuntimeError(f"worker process {child.name} exited with {code} after "
                                   f"{self.result.restarts} restarts (max_restarts)")
            # Its queue is dropped unread: a message it was writing when it died would block
            # the reader for good (this process holds the pipe's write end too). At most one
            # PROGRESS_PERIOD of its steps and episodes goes uncounted.
            child.proc.join(0)
            for q in (child.events, child.requests):
                if q is not None:
                    q.cancel_join_thread()
                    q.close()
            self.counter["generation"] += 1
            self.result.restarts += 1
            self.result.restart_log.append((time.time() - self.t0, child.name, code))
            if child.is_evaluator:
                self.counters["eval_pending"] = False
            self.spawn(child)
            self.write_status()

    def apply_control(self) -> None:
        from olaf.drl.elastic import change_active, worker_bits

        for _, request in self.control.pending():
            current = [w for w in range(self.max_workers) if self.active[w]]
            try:
                if request.get("malformed"):
                    raise ValueError("unreadable request")
                if self.cfg.scaling != "fixed":
                    raise ValueError(f"--scaling {self.cfg.scaling} sets the active workers itself")
                ids = change_active(current, str(request.get("action")),
                                    int(request.get("count", 0)), self.max_workers)
            except (ValueError, TypeError) as exc:
                self.control.reply(request, {"ok": False, "error": str(exc), "active": current})
                continue
            now = time.time()
            for w in range(self.max_workers):
                self.active[w] = 1 if w in ids else 0
            aom = self.receiver.aom
            aom.set_active(worker_bits(ids, aom.workers), int(now * 1e6))
            if self.policies.meter is not None:
                self.policies.meter.set(len(ids), now)
            self.result.worker_changes.append((now - self.t0, len(ids)))
            self.control.reply(request, {"ok": True, "active": ids})
            self.write_status()

    def write_status(self) -> None:
        if self.control is None:
            return
        self.control.write_status({
            "pid": os.getpid(),
            "env_steps": self.counters["steps"],
            "model_version": self.ps.model_version,
            "active_workers": [w for w in range(self.max_workers) if self.active[w]],
            "max_workers": self.max_workers,
            "processes": {c.name: c.proc.pid for c in self.children},
            "logical_workers": {c.name: c.ids for c in self.children if not c.is_evaluator},
            "restarts": self.result.restarts,
            "checkpoints": self.result.checkpoints,
            "updated_at": time.time(),
        })

    def checkpoint(self, elapsed: float) -> None:
        series = self.receiver.aom.series
        shift = (self.receiver.aom.start_us / 1e6 - self.t0) * 1000.0
        _save_checkpoint(self.cfg, self.result, self.ps, self.counter["generation"],
                         (series, shift), elapsed=elapsed)

    def run(self) -> None:
        cfg, result, counters = self.cfg, self.result, self.counters
        last_draws, last_p_sum = 0.0, 0.0
        next_publish = next_control = next_sample = time.time()
        while True:
            now = time.time()
            elapsed = now - self.t0
            self.poll_events()
            if now >= next_publish:
                self.board.publish(*self.ps.snapshot())
                next_publish = now + cfg.broadcast_period
            if not counters["eval_pending"] and counters["steps"] >= self.next_eval:
                self.request_eval(elapsed)
            self.policies.tick()
            if now >= next_control:
                self.controller.feed(self.rewards.snapshot())
                self.controller.step()
                next_control = now + cfg.controller_interval
            reached = result.time_to_target is not None
            if now >= next_sample or elapsed >= cfg.duration:
                self.receiver.aom.advance()
                series_tail = self.receiver.aom.series.global_ms
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
                    mean_return=float(np.mean(self.recent)) if self.recent else math.nan,
                    aom_ms=float(series_tail[-1]) if len(series_tail) else math.nan,
                    occupied=self.switch.queue.occupied,
                    capacity=cfg.capacity,
                    outcomes=dict(self.switch.pipeline.snapshot()["outcomes"]),
                    model_version=self.ps.model_version,
                    blocks_applied=self.ps.blocks_applied,
                    threshold=(self.controller.history[-1].threshold if self.controller.history
                               else None),
                    updates_sent=int(tx["sent"]),
                    updates_skipped=int(tx["skipped"]),
                    updates_probes=int(tx["probes"]),
                    p_s_mean=p_s_mean,
                    eval_return=result.evaluations[-1][2] if result.evaluations else math.nan,
                    learner=_mean_learner(counters["learner"]),
                    active_workers=int(sum(self.active[:])),
                    restarts=result.restarts,
                )
                counters["learner"] = {}
                result.timeline.append(snap)
                if self.tb is not None:
                    self.tb.snapshot(snap)
                if self.progress is not None:
                    self.progress(snap)
                next_sample = now + SAMPLE_PERIOD
            result.env_steps = counters["steps"]
            if counters["steps"] >= self.next_checkpoint:
                self.checkpoint(elapsed)
                every = cfg.checkpoint_every
                self.next_checkpoint = (counters["steps"] // every + 1) * every
            if self.stopper.signal is not None:
                result.stopped_by = f"signal {self.stopper.signal}"
                return
            if reached and cfg.stop_at_target:
                result.stopped_by = "target"
                return
            if counters["steps"] >= cfg.total_steps:
                result.stopped_by = "steps"
                return
            if elapsed >= cfg.duration:
                result.stopped_by = "duration"
                return
            self.supervise()
            if self.control is not None:
                self.apply_control()
                if now >= self.next_status:
                    self.write_status()
                    self.next_status = now + STATUS_PERIOD
            time.sleep(min(cfg.broadcast_period, 0.02))


def _mean_learner(per_process: dict[int, dict[str, float]]) -> dict[str, float]:
    """Mean over the worker processes that reported learner statistics since the last sample."""
    keys = sorted({k for stats in per_process.values() for k in stats})
    return {k: float(np.mean([s[k] for s in per_process.values() if k in s])) for k in keys}


def _drain_queue(events: Any, result: RunResult, recent: deque[float], counters: dict,
                 t0: float) -> list[dict[str, Any]]:
    """Handle every event waiting in one child's queue; returns the "final" sender stats.

    A queue whose writer was killed mid-message may hold a torn one: it is dropped with
    the rest of that queue, which is discarded with its process anyway.
    """
    finals: list[dict[str, Any]] = []
    while True:
        try:
            event = events.get_nowait()
        except queue_mod.Empty:
            return finals
        except (EOFError, OSError, ValueError, TypeError, AttributeError, ImportError,
                pickle.UnpicklingError):
            return finals
        got = _handle_event(event, result, recent, counters, t0)
        if got is not None:
            finals.extend(got)


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
    if kind == "ready":
        return None  # a restarted process is back; go is already set
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


def _drain_until_exit(children: list[_Child], result: RunResult, t0: float) -> list[dict[str, Any]]:
    """Read the children's events until every process has exited (or JOIN_TIMEOUT passes).

    A process cannot exit while its queue feeder still holds data, so draining comes
    before joining.
    """
    finals: list[dict[str, Any]] = []
    recent: deque[float] = deque(maxlen=1)
    counters = {"steps": result.env_steps, "tx": {}}
    live = [c for c in children if c.proc is not None]
    deadline = time.monotonic() + JOIN_TIMEOUT
    while time.monotonic() < deadline:
        for child in live:
            finals.extend(_drain_queue(child.events, result, recent, counters, t0))
        if not any(c.proc.is_alive() for c in live):
            for child in live:  # what the last ones wrote just before exiting
                finals.extend(_drain_queue(child.events, result, recent, counters, t0))
            break
        time.sleep(0.05)
    for child in live:
        child.proc.join(max(0.0, deadline - time.monotonic()))
    return finals


def _stop_receiver(receiver: Any) -> BaseException | None:
    """Stop the receiver thread; the error it died of, if any, is returned, not raised."""
    try:
        receiver.stop()
    except Exception as exc:  # reported after everything else is cleaned up
        return exc
    return None


def _wait_ready(children: list[_Child], stopper: _Stop | None = None,
                timeout: float = READY_TIMEOUT) -> None:
    """Wait for every child's ("ready", pid); fail if one dies first. A stop signal ends
    the wait early (the main loop then stops at once)."""
    waiting = {id(c): c for c in children}
    deadline = time.monotonic() + timeout
    while waiting:
        if stopper is not None and stopper.signal is not None:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {len(children) - len(waiting)} of {len(children)} "
                               "worker processes started")
        for key, child in list(waiting.items()):
            try:
                event = child.events.get_nowait()
            except queue_mod.Empty:
                if not child.proc.is_alive():
                    raise RuntimeError(f"worker process {child.name} exited with "
                                       f"{child.proc.exitcode} at start") from None
                continue
            if event[0] == "ready":
                del waiting[key]
        time.sleep(0.05)


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
    out["restart_log"] = [list(r) for r in result.restart_log]
    out["worker_changes"] = [list(r) for r in result.worker_changes]
    return out
