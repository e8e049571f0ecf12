"""The local backend's child processes: worker processes hosting logical workers, and the
evaluator, with what they share with the run's process (flags, queues, the weight board).

Everything here runs in a process started with the ``spawn`` method by
``olaf.drl.local.LocalProcesses``; what a child reports goes into its own event queue
(olaf.drl.local reads it):

* ``("ready", pid)`` once built, ``("progress", pid, steps, episodes, tx, learner)``
  every ``PROGRESS_PERIOD``, ``("final", pid, sender stats)`` when told to stop;
* the evaluator: ``("eval", steps, elapsed, scores, version, wall s)`` per request
  (``scores``: an ``EvalScores``, greedy and stochastic);
* with boost scaling, the process of worker 0: ``("curvature", pid, lambda_max,
  lambda_min, wall s, CPU s)``.
"""

from __future__ import annotations

import contextlib
import os
import queue as queue_mod
import signal
import threading
import time
from dataclasses import dataclass
from typing import Any

import torch

from olaf.drl.boosting import CurvatureProbe
from olaf.drl.config import RunConfig
from olaf.drl.evaluation import Evaluator
from olaf.drl.learners import algo_config
from olaf.drl.model import build_model
from olaf.drl.weights import WeightBoard
from olaf.drl.worker_turn import Progress, build_worker, take_turn, tx_totals, worker_seed

PROGRESS_PERIOD = 0.25
"""Seconds between a worker process's progress messages."""
PARENT_CHECK_PERIOD = 0.5
"""Seconds between a child process's checks that the run's process is still there."""
WORKER_NICENESS = 5
"""Worker processes yield the CPU to the switch and the PS: on a loaded 2-core machine the
pull rate, not the scheduler, must be the bottleneck the queue absorbs."""


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


def guard_parent(parent_pid: int) -> None:
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


def evaluator_main(cfg: RunConfig, board_name: str, num_params: int, requests: Any, events: Any,
                    stop: SharedFlag, parent_pid: int) -> None:
    """The evaluator process: for each ``(steps, elapsed)`` request, evaluate the newest
    weights and report ``("eval", steps, elapsed, scores, version, wall s)``."""
    guard_parent(parent_pid)
    torch.set_num_threads(1)
    with contextlib.suppress(OSError):
        os.nice(WORKER_NICENESS)
    board = WeightBoard(num_params, name=board_name)
    evaluator = Evaluator(cfg)
    events.put(("ready", os.getpid()))
    try:
        while not stop.is_set():
            try:
                steps, elapsed = requests.get(timeout=0.1)
            except queue_mod.Empty:
                continue
            began = time.perf_counter()
            weights, version = board.read()
            scores = evaluator.evaluate(weights)
            events.put(("eval", steps, elapsed, scores, version, time.perf_counter() - began))
    finally:
        board.close()


def worker_main(
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
    if parent_pid is not None:
        guard_parent(parent_pid)
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
            probe = CurvatureProbe(cfg.boost, cfg.boost_period, cfg.seed, time.monotonic())
            probe_model = build_model(cfg.env_id, algo_config(cfg).hidden, cfg.seed)
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
class Child:
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
