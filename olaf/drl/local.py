"""The local backend of ``olaf run``: software switch, parameter server and N workers as
processes on this machine, driven by the one training loop (olaf.drl.core).

Processes and threads:

* this process: the software switch (``UdpSwitch`` in a thread, the embedded mode),
  the parameter server (a ``Receiver`` thread PULLing at ``pull_rate``, applying each
  DATA block through ``PsApply``), and the ``TrainingLoop``, which publishes weights
  every ``broadcast_period``, runs the controller loop every ``controller_interval``,
  samples metrics and checks the stop condition;
* ``worker_processes`` worker processes, each hosting several logical workers
  round-robin (worker ``w`` lives in process ``w % P``): a worker reads the newest
  weights from the shared-memory ``WeightBoard``, rolls out, computes its clipped
  gradient and sends it through its own ``Sender`` and UDP socket to the switch.
  Several logical workers per process is how 32 workers fit on 2 cores: what the
  switch sees is 32 worker ids, 32 sockets and 32 independent send policies;
* one evaluator process (``Evaluator``), niced like a worker.

Every gradient crosses the switch as UPDATE datagrams on loopback; weights come back
through shared memory (the embedded "separate channel" instead of MODEL messages).
Everything started here is stopped here, by handle: processes are joined, then
terminated by PID if they do not exit; sockets are closed; the shared memory is
unlinked.

Platform duties on top (docs/platform.md), all in ``LocalProcesses.tick``:

* fault tolerance: a worker process (or the evaluator) that dies is started again with
  the same logical workers (fresh sockets, same ids, seeds of a new generation) and
  counted in ``restarts``; past ``max_restarts`` the run ends with ``RunFailed``, which
  carries the metrics so far, as SIGINT/SIGTERM end it early with them;
* checkpoints every ``checkpoint_every`` env steps and at the end (olaf.drl.checkpoint),
  and ``resume`` from one: same versions, env steps and learning curve;
* elastic workers: ``olaf workers DIR add|remove|set N`` through the run directory
  (olaf.drl.elastic), on the active-worker flags boost scaling uses;
* ``--chaos PLAN``: the plan's faults, injected by ``olaf.drl.chaos.Chaos.tick``.
"""

from __future__ import annotations

import math
import multiprocessing as mp
import os
import pickle
import queue as queue_mod
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from control_plane.threshold import ThresholdLoop
from dataplane.queue import OlafQueue, QueueConfig
from dataplane.switch import UdpSwitch
from olaf.drl.checkpoint import Checkpoint, restore_metrics, restore_rng, save_run
from olaf.drl.children import Child, SharedFlag, evaluator_main, worker_main
from olaf.drl.config import RunConfig
from olaf.drl.controller import RecentRewards, embedded_setter
from olaf.drl.core import PsApply, RecentDelivery, Status, TrainingLoop, finish_returns, real_clock
from olaf.drl.elastic import ElasticAoM, WorkerControl, change_active, worker_bits
from olaf.drl.evaluation import Evaluator
from olaf.drl.learners import parameter_server, run_model
from olaf.drl.policies import RunPolicies
from olaf.drl.results import RunFailed, RunResult, Snapshot
from olaf.drl.server import ParameterServer
from olaf.drl.weights import WeightBoard
from worker_transport.aom import MAX_WORKER_BITS
from worker_transport.protocol import Mode
from worker_transport.receiver import Receiver
from worker_transport.transport import UdpTransport

if TYPE_CHECKING:
    from olaf.drl.chaos import Chaos

JOIN_TIMEOUT = 10.0
"""Seconds a worker process gets to exit by itself before it is terminated."""
READY_TIMEOUT = 300.0
"""Seconds the child processes get to import torch and build their workers (minutes on a
2-core machine that is busy with other runs)."""
STATUS_PERIOD = 1.0
"""Seconds between rewrites of the run directory's ``run.json``."""


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


class LocalProcesses:
    """The local backend (see the module doc): the switch and the PS in this process, the
    workers and the evaluator as child processes, as a ``Backend`` of the training loop."""

    def __init__(self, cfg: RunConfig, result: RunResult, ps: ParameterServer,
                 run_dir: Path | None, generation: int, chaos: Chaos | None = None) -> None:
        self.cfg, self.result, self.ps = cfg, result, ps
        self.chaos = chaos
        self.last_checkpoint: Checkpoint | None = None
        """What the latest checkpoint held, as it was in memory (the chaos plan's record)."""
        self.max_workers = cfg.max_workers or cfg.workers
        self.ctx = mp.get_context("spawn")
        self.go, self.stop = SharedFlag(self.ctx), SharedFlag(self.ctx)
        self.active = self.ctx.Array("b", [1 if w < cfg.workers else 0
                                           for w in range(self.max_workers)], lock=False)
        self.policies = RunPolicies(cfg, ps, self.active)
        self.rewards = RecentRewards(cfg.reward_history)
        self.apply = PsApply(ps, self.policies, self.rewards)
        self.apply.data = result.data  # a resumed run's log goes on
        self.board = WeightBoard(len(ps.params))
        qcfg = QueueConfig(capacity=cfg.capacity, values=cfg.values, max_clusters=cfg.queue_max_clusters,
                           max_blocks=ps.num_blocks, frac_bits=cfg.frac_bits,
                           cluster_quota=cfg.queue_cluster_quota, feedback=cfg.feedback,
                           mode=Mode.OLAF if cfg.mode == "olaf" else Mode.FIFO)
        self.switch = UdpSwitch(OlafQueue(qcfg), "127.0.0.1", 0)
        result.switch_address, result.weight_board = self.switch.address, self.board.name
        self.switch_thread, self.switch_stop = self.switch.start()
        self.receiver: Receiver | None = None
        self.control = WorkerControl(run_dir) if run_dir is not None else None
        self.stopper = _Stop()
        self.generation = generation
        self.children: list[Child] = []
        nproc = cfg.worker_processes
        for p in range(nproc):
            self.children.append(Child(f"olaf-worker-{p}", list(range(p, self.max_workers, nproc)),
                                        None))
        self.children.append(Child("olaf-evaluator", [], None, is_evaluator=True))
        every = cfg.checkpoint_every
        self.next_checkpoint = (result.env_steps // every + 1) * every if every else math.inf
        self.next_status = 0.0
        self.t0 = 0.0
        self.delivery: RecentDelivery | None = None
        """Staleness and update age since the last timeline row (made with the receiver)."""
        self.loop: TrainingLoop | None = None
        """The loop this backend serves (set by ``run_experiment``)."""

    # -- child processes ----------------------------------------------------------------
    @property
    def evaluator(self) -> Child:
        return next(c for c in self.children if c.is_evaluator)

    def spawn(self, child: Child) -> None:
        """(Re)start ``child`` with fresh queues and the current generation."""
        cfg, ctx, parent = self.cfg, self.ctx, os.getpid()
        child.events = ctx.Queue()
        n = len(self.ps.params)
        if child.is_evaluator:
            child.requests = ctx.Queue()
            target, args = evaluator_main, (cfg, self.board.name, n, child.requests,
                                             child.events, self.stop, parent)
        else:
            child.generation = self.generation
            target, args = worker_main, (cfg, child.ids, self.switch.address, self.board.name,
                                          n, child.events, self.go, self.stop, self.active,
                                          child.generation, parent)
        child.proc = ctx.Process(target=target, name=child.name, args=args, daemon=True)
        child.proc.start()
        self.result.worker_pids.append(child.proc.pid)

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
            _close_queues(child)
            self.generation += 1
            self.result.restarts += 1
            self.result.restart_log.append((time.time() - self.t0, child.name, code))
            if child.is_evaluator:
                self.loop.eval_pending = False
            self.spawn(child)
            self.write_status()

    # -- Backend ------------------------------------------------------------------------
    def now(self) -> float:
        return real_clock()

    def poll(self, loop: TrainingLoop) -> None:
        for child in self.children:
            _drain_queue(child, loop, self.policies)

    def publish(self) -> None:
        self.board.publish(*self.ps.snapshot())

    def request_eval(self, steps: int, elapsed: float) -> None:
        self.publish()
        self.evaluator.requests.put((steps, elapsed))

    def recent_rewards(self) -> list[float]:
        return self.rewards.snapshot()

    def status(self) -> Status:
        aom = self.receiver.aom
        aom.advance()
        tail = aom.series.global_ms
        if self.delivery is None:
            self.delivery = RecentDelivery(self.apply.data, lambda: aom.series.ages_ms)
        staleness, ages = self.delivery.take()
        return Status(aom_ms=float(tail[-1]) if len(tail) else math.nan,
                      occupied=self.switch.queue.occupied,
                      outcomes=self.switch.pipeline.snapshot()["outcomes"],
                      model_version=self.ps.model_version, blocks_applied=self.ps.blocks_applied,
                      active_workers=int(sum(self.active[:])), restarts=self.result.restarts,
                      staleness=staleness, update_age_ms=ages)

    def tick(self, loop: TrainingLoop, elapsed: float) -> None:
        self.policies.tick()
        if loop.steps >= self.next_checkpoint:
            self.checkpoint(elapsed)
            every = self.cfg.checkpoint_every
            self.next_checkpoint = (loop.steps // every + 1) * every
        if loop.stop_rule(elapsed) is not None:
            return  # the run ends at this step: nothing to restart or control
        self.supervise()
        if self.chaos is not None:
            self.chaos.tick(self, loop)
        if self.control is not None:
            self.apply_control()
            now = time.time()
            if now >= self.next_status:
                self.write_status()
                self.next_status = now + STATUS_PERIOD

    def stop_signal(self) -> str | None:
        return self.stopper.signal

    def wait(self, seconds: float) -> None:
        time.sleep(seconds)

    # -- platform duties ----------------------------------------------------------------
    def evaluate_now(self, timeout: float) -> None:
        """Ask for an evaluation and wait for its answer (workers hold still meanwhile)."""
        loop = self.loop
        loop.request_eval(time.time() - self.t0)
        deadline = time.monotonic() + timeout
        while loop.eval_pending:
            if time.monotonic() > deadline:
                raise TimeoutError("the evaluator did not answer")
            if self.stopper.signal is not None:
                return
            self.poll(loop)
            self.supervise()
            time.sleep(0.02)

    def apply_control(self) -> None:
        """``olaf workers DIR add|remove|set N`` requests, answered in the run directory."""
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

    def set_workers(self, n: int) -> None:
        """``--elastic auto``: ids 0..n-1 active from now (the worker processes read the
        flags before every rollout)."""
        now = time.time()
        self.policies.set_workers(n, now)
        aom = self.receiver.aom
        aom.set_active(worker_bits(list(range(n)), aom.workers), int(now * 1e6))
        if self.control is not None:
            self.write_status()

    def write_status(self) -> None:
        if self.control is None:
            return
        self.control.write_status({
            "pid": os.getpid(),
            # Where the embedded switch listens, so another tenant's sender (benchmarks/
            # bench_flood.py) can reach it while the run goes on.
            "switch_address": list(self.switch.address),
            "env_steps": self.result.env_steps,
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
        self.last_checkpoint = save_run(self.cfg, self.result, self.ps, self.generation,
                                        (series, shift), elapsed=elapsed)

    # -- start and stop -------------------------------------------------------------------
    def start_receiver(self, offset: float) -> float:
        """The PS starts pulling; returns the run's t0 (epoch s; ``offset``: seconds of a
        resumed run before this part)."""
        cfg = self.cfg
        # The clock starts when every worker is built: process start-up (importing torch)
        # is not training time, and AoM must not count it either.
        bits = min(self.max_workers, MAX_WORKER_BITS)
        aom = ElasticAoM(active_bits=worker_bits(list(range(cfg.workers)), bits), workers=bits)
        self.receiver = Receiver(UdpTransport(self.switch.address), values=cfg.values,
                                 frac_bits=cfg.frac_bits, pull_rate=cfg.pull_rate,
                                 on_batch=self.apply, aom=aom)
        self.t0 = aom.start_us / 1e6 - offset
        self.apply.t0 = self.t0
        self.policies.start(aom.start_us / 1e6)
        return self.t0

    def close(self, loop: TrainingLoop) -> tuple[list[dict[str, Any]], BaseException | None]:
        """Stop everything this backend started; (the senders' final statistics, the error
        the receiver died of, if any)."""
        self.stop.set()
        self.stopper.restore()
        receiver_error = None
        if self.receiver is not None:
            # Stop pulling first: AoM is sampled up to here, not through the shutdown.
            receiver_error = _stop_receiver(self.receiver)
        self.policies.finish(time.time())
        finals = _drain_until_exit(self.children, loop, self.policies)
        for child in self.children:
            if child.proc is None:
                continue
            if child.proc.is_alive():
                child.proc.terminate()
                child.proc.join(2.0)
            if child.proc.is_alive():
                child.proc.kill()
                child.proc.join()
        for child in self.children:
            _close_queues(child)
        if self.receiver is not None:
            self.receiver.transport.close()
        self.switch_stop.set()
        self.switch_thread.join()
        self.switch.close()
        self.board.close()
        return finals, receiver_error


# -- the run -------------------------------------------------------------------------
def run_experiment(
    cfg: RunConfig,
    progress: Callable[[Snapshot], None] | None = None,
    tensorboard: Path | None = None,
    run_dir: Path | None = None,
    resume: Checkpoint | None = None,
    chaos: Chaos | None = None,
    on_resume: Callable[[ParameterServer, RunResult], None] | None = None,
) -> RunResult:
    """Run one experiment to its step budget, target or wall-clock cap; see the module doc.

    ``tensorboard``: a directory for TensorBoard event files of the run's scalars.
    ``run_dir``: the run's directory, where ``run.json`` and the worker control requests
    live (olaf.drl.elastic); None: no elastic control.
    ``resume``: an ``olaf.drl.checkpoint.Checkpoint`` to continue from; ``on_resume`` is
    called with the PS and the result as the checkpoint restored them, before anything runs.
    ``chaos``: an ``olaf.drl.chaos.Chaos`` whose faults the run suffers (docs/platform.md).

    Raises ``RunFailed`` (with the partial result) on an unrecoverable error; SIGINT or
    SIGTERM end the run early with ``stopped_by`` naming the signal.
    """
    torch.set_num_threads(1)
    max_workers = cfg.max_workers or cfg.workers
    if max_workers < cfg.workers:
        raise ValueError(f"max_workers ({max_workers}) must be >= workers ({cfg.workers})")
    ps = parameter_server(cfg, run_model(cfg))
    result = RunResult(cfg, num_parameters=len(ps.params), num_blocks=ps.num_blocks)
    offset, generation = 0.0, 0
    if resume is not None:
        ps.load_state(resume.ps)
        restore_rng(resume.rng)
        restore_metrics(result, resume)
        offset, generation = resume.elapsed, resume.generation + 1
        result.resumed_from = resume.env_steps
        if on_resume is not None:
            on_resume(ps, result)
    backend = LocalProcesses(cfg, result, ps, run_dir, generation, chaos)
    tb = None
    if tensorboard is not None:
        from olaf.drl.tensorboard import TensorBoardLog  # optional: imports tensorboard

        tb = TensorBoardLog(tensorboard)
    # The controller loop, in process: ThresholdLoop's rule, the embedded switch as target.
    controller = ThresholdLoop(embedded_setter(backend.switch, cfg.frac_bits),
                               floor=cfg.threshold_floor, interval=cfg.controller_interval,
                               fraction=cfg.threshold_fraction, rule=cfg.reward_rule,
                               congested=lambda: backend.switch.queue.congested)
    loop = TrainingLoop(cfg, result, backend, time.time() - offset, controller=controller,
                        progress=progress, tb=tb)
    backend.loop = loop
    failure: BaseException | None = None
    try:
        backend.stopper.install()
        backend.publish()
        for child in backend.children:
            backend.spawn(child)
        _wait_ready(backend.children, backend.stopper)
        loop.t0 = backend.start_receiver(offset)
        if resume is not None:
            # The resumed run's first evaluation is of the checkpoint's weights exactly:
            # it is asked and answered before any worker may send a gradient.
            backend.evaluate_now(timeout=READY_TIMEOUT)
        backend.receiver.start()
        backend.go.set()
        loop.run()
    except Exception as exc:  # the metrics so far are still collected and returned with it
        failure = exc
        result.stopped_by = "error"
        result.error = f"{type(exc).__name__}: {exc}"
    finally:
        finals, receiver_error = backend.close(loop)
        if tb is not None:
            tb.close()
    receiver = backend.receiver
    if receiver_error is not None and failure is None:
        failure = RuntimeError("the parameter server's receiver failed")
        failure.__cause__ = receiver_error
        result.stopped_by = "error"
        result.error = f"the parameter server's receiver failed: {receiver_error!r}"
    result.senders = finals
    # A run that never started training adds no run time (its checkpoint keeps the clock).
    result.wall_time = time.time() - loop.t0 if receiver is not None else offset
    result.receiver = receiver.stats() if receiver is not None else {}
    result.switch = backend.switch.pipeline.snapshot()
    if receiver is not None:
        result.aom = receiver.aom.summary()
        series = receiver.aom.series
        shift = offset * 1000.0
        result.aom_t_ms = np.concatenate([result.aom_t_ms, series.t_ms + shift])
        result.aom_global_ms = np.concatenate([result.aom_global_ms, series.global_ms])
        result.update_age_ms = np.concatenate([result.update_age_ms, series.ages_ms])
    result.model_version, result.blocks_applied = ps.model_version, ps.blocks_applied
    result.policies = backend.policies.stats([d[3] for d in result.data])
    result.active_workers = int(sum(backend.active[:]))
    if cfg.checkpoint_dir:
        try:
            save_run(cfg, result, ps, backend.generation, receiver_series=None)
        except OSError as exc:
            result.error = (result.error + "; " if result.error else "") + f"checkpoint: {exc}"
    # The weights the run ended with, judged like every evaluation (workers are gone now).
    result.final_eval_return = Evaluator(cfg).final(ps.params)
    finish_returns(result)
    if failure is not None:
        raise RunFailed(result.error, result) from failure
    return result


def _close_queues(child: Child) -> None:
    for q in (child.events, child.requests):
        if q is not None:
            q.cancel_join_thread()
            q.close()


def _drain_queue(child: Child, loop: TrainingLoop, policies: RunPolicies) -> list[dict[str, Any]]:
    """Hand every event waiting in one child's queue to the loop; returns the "final"
    sender stats.

    A queue whose writer was killed mid-message may hold a torn one: it is dropped with
    the rest of that queue, which is discarded with its process anyway.
    """
    finals: list[dict[str, Any]] = []
    while True:
        try:
            event = child.events.get_nowait()
        except queue_mod.Empty:
            return finals
        except (EOFError, OSError, ValueError, TypeError, AttributeError, ImportError,
                pickle.UnpicklingError):
            return finals
        kind = event[0]
        if kind == "progress":
            _, pid, steps, episodes, tx, learner = event
            loop.progress(pid, steps, episodes, tx, learner)
        elif kind == "final":
            finals.extend(event[2])
        elif kind == "eval":
            _, steps, elapsed, scores, version, _wall = event
            loop.evaluation(steps, elapsed, scores, version)
        elif kind == "curvature":
            _, _, lmax, lmin, wall_s, cpu_s = event
            policies.record_curvature(lmax, lmin, wall_s, time.time(), cpu_s)
        elif kind != "ready":  # "ready": a restarted process is back; go is already set
            raise ValueError(f"unknown worker event {kind!r}")


def _drain_until_exit(children: list[Child], loop: TrainingLoop,
                      policies: RunPolicies) -> list[dict[str, Any]]:
    """Read the children's events until every process has exited (or JOIN_TIMEOUT passes).

    A process cannot exit while its queue feeder still holds data, so draining comes
    before joining.
    """
    finals: list[dict[str, Any]] = []
    live = [c for c in children if c.proc is not None]
    deadline = time.monotonic() + JOIN_TIMEOUT
    while time.monotonic() < deadline:
        for child in live:
            finals.extend(_drain_queue(child, loop, policies))
        if not any(c.proc.is_alive() for c in live):
            for child in live:  # what the last ones wrote just before exiting
                finals.extend(_drain_queue(child, loop, policies))
            break
        time.sleep(0.05)
    for child in live:
        child.proc.join(max(0.0, deadline - time.monotonic()))
    return finals


def _stop_receiver(receiver: Receiver) -> BaseException | None:
    """Stop the receiver thread; the error it died of, if any, is returned, not raised."""
    try:
        receiver.stop()
    except Exception as exc:  # reported after everything else is cleaned up
        return exc
    return None


def _wait_ready(children: list[Child], stopper: _Stop | None = None,
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
