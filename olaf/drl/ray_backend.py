"""``olaf run --backend ray``: the parameter server and the worker processes as Ray actors
on the nodes of an existing Ray cluster, the gradients still through an OLAF switch as UDP.

What runs where (docs/ray.md):

* the **switch**: ``--switch HOST:PORT`` names one that already runs (``olaf switch
  --listen``, bmv2, Tofino, the FPGA); without it a software switch (``UdpSwitch``, the
  reference OlafQueue) runs as a Ray actor on the head node, bound to the head's node
  address and ``--switch-port``;
* the **parameter server** (``ParameterServerHost``): one actor, placed where Ray finds
  room; it PULLs DATA from the switch over UDP at ``pull_rate`` and applies each block
  with Adam, exactly as the local backend's PS does (``ParameterServer``, ``RunPolicies``);
* the **worker processes** (``WorkerHost``): ``cfg.worker_processes`` actors spread over
  the nodes (``SPREAD``), each hosting its logical workers round-robin as the local
  backend's worker processes do; every gradient leaves as UPDATE datagrams from the
  worker's own UDP socket toward the switch, which ACKs them;
* the **evaluator** (``EvaluatorHost``): greedy evaluation on environments of its own;
* this process, the **driver**: starts and stops the actors, polls progress, feeds the
  reward-threshold controller, samples the metrics and decides when to stop.

Weights go back over a Ray object channel, not as MODEL messages: the PS publishes
``(weights, version)`` every ``broadcast_period`` and each worker process keeps one
non-blocking fetch of "anything newer than what I hold" in flight (``WeightChannel``).
Why not MODEL: the software switch's UDP mode answers only the sender of a message and
forwards nothing, MODEL carries fixed-point weights (quantised), and a UDP broadcast to
workers whose addresses Ray chooses would need its own loss handling and an open port on
every worker node. Ray moves the exact float32 vector reliably, over the connections
the cluster already has; what OLAF aggregates, the gradients, still crosses the switch.

Ray is an optional extra (``pip install -e '.[ray]'``) imported only here, and only
when this backend runs.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import math
import os
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from olaf.drl.config import RunConfig
from worker_transport.protocol import OLAF_PORT

PS_CPUS = 0.5
"""CPUs the parameter server actor reserves (a scheduling share, not a limit)."""
WORKER_CPUS = 0.5
"""CPUs each worker-process actor reserves; ``SPREAD`` places them on as many nodes as it can."""
SWITCH_CPUS = 0.25
"""CPUs the software switch actor reserves on the head node."""
EVALUATOR_CPUS = 0.25
"""CPUs the evaluator actor reserves."""
READY_TIMEOUT = 300.0
"""Seconds the actors get to be placed, import torch and build their workers."""
PROGRESS_PERIOD = 0.25
"""Seconds between the driver's progress polls of the worker actors."""
CALL_TIMEOUT = 60.0
"""Seconds the driver waits for one answer of an actor during the run."""
STOP_TIMEOUT = 30.0
"""Seconds the worker actors get to finish their rollout and report after being stopped."""
WORKER_NICENESS = 5
"""As in the local backend: workers yield the CPU to a switch or PS on the same node."""
RAY_EXTRA_HINT = "install the extra: pip install -e '.[ray]'"
UNSUPPORTED = {
    "resume": "--resume", "checkpoint_dir": "--checkpoint-dir",
    "checkpoint_every": "--checkpoint-every", "max_workers": "--max-workers",
}
"""``olaf run`` options the local backend has and this one does not (yet)."""


class RayBackendError(RuntimeError):
    """Something about the cluster the user can fix, said in one line."""


@dataclass(frozen=True)
class RayOptions:
    """Where the run goes: the cluster and the switch."""

    address: str = "auto"
    """Ray cluster address (``ray.init(address=...)``): ``auto`` finds the local one."""
    switch: tuple[str, int] | None = None
    """A running switch's UDP address; None starts a software switch on the head node."""
    switch_port: int = OLAF_PORT
    """UDP port of the software switch this run starts (0: any free port)."""


# -- pieces shared by the actors -------------------------------------------------------------
def _initial_model(cfg: RunConfig) -> Any:
    """The run's model at its first weights, built as every process of the run builds it."""
    from olaf.algorithm import initial_model
    from olaf.drl.learners import make_algorithm

    return initial_model(make_algorithm(cfg), cfg.env_id, cfg.seed)


def _nice() -> None:
    import torch

    torch.set_num_threads(1)
    with contextlib.suppress(OSError):
        os.nice(WORKER_NICENESS)


def _node_ip() -> str:
    import ray

    return ray.util.get_node_ip_address()


class SwitchHost:
    """The software switch (``UdpSwitch`` serving in a thread) as an actor on the head node."""

    def __init__(self, cfg: RunConfig, num_blocks: int, port: int) -> None:
        from dataplane.queue import OlafQueue, QueueConfig
        from dataplane.switch import UdpSwitch
        from olaf.drl.controller import embedded_setter
        from worker_transport.protocol import Mode

        qcfg = QueueConfig(capacity=cfg.capacity, values=cfg.values, max_clusters=1,
                           max_blocks=num_blocks, frac_bits=cfg.frac_bits,
                           mode=Mode.OLAF if cfg.mode == "olaf" else Mode.FIFO)
        # The node's address, not 0.0.0.0: the workers' sockets are connected to the
        # switch and accept replies only from the address they sent to.
        self.switch = UdpSwitch(OlafQueue(qcfg), _node_ip(), port)
        self._thread, self._stop = self.switch.start()
        self._setter = embedded_setter(self.switch, cfg.frac_bits)

    def address(self) -> tuple[str, int]:
        return tuple(self.switch.address)

    def snapshot(self) -> dict[str, Any]:
        return self.switch.pipeline.snapshot()

    def set_threshold(self, threshold: float) -> int:
        return self._setter(threshold)

    def close(self) -> dict[str, Any]:
        """Stop serving; the counters as they ended."""
        self._stop.set()
        self._thread.join()
        self.switch.close()
        return self.switch.pipeline.snapshot()


class ParameterServerHost:
    """The PS: PULLs DATA from the switch, applies it with Adam, publishes the weights."""

    def __init__(self, cfg: RunConfig) -> None:
        import torch

        from olaf.algorithm import flat_parameters
        from olaf.drl.controller import RecentRewards
        from olaf.drl.policies import RunPolicies
        from olaf.drl.server import ParameterServer

        torch.set_num_threads(1)
        self.cfg = cfg
        self.ps = ParameterServer(flat_parameters(_initial_model(cfg)), cfg.algo_config, cfg.values)
        self.policies = RunPolicies(cfg, self.ps)
        self.rewards = RecentRewards(cfg.reward_history)
        self.data: list[tuple[float, int, int, int, float]] = []
        self.published = self.ps.snapshot()
        """(weights, version) as last published; replaced whole, so readers need no lock."""
        self.receiver: Any = None
        self.t0 = 0.0
        self._stop = threading.Event()
        self._publisher: threading.Thread | None = None
        self._publisher_error: BaseException | None = None

    def shape(self) -> tuple[int, int]:
        """(parameters, blocks per gradient)."""
        return len(self.ps.params), self.ps.num_blocks

    def start(self, switch_address: tuple[str, int]) -> float:
        """Start pulling from the switch and publishing; returns the run's t0 (epoch s)."""
        from worker_transport.receiver import DataBatch, Receiver
        from worker_transport.transport import UdpTransport

        cfg, ps, data = self.cfg, self.ps, self.data

        def on_batch(batch: DataBatch) -> None:
            h = batch.headers
            version = ps.model_version
            t = batch.received_at / 1e6 - self.t0
            self.policies.apply(h["block_id"].tolist(), batch.values, h["agg_count"].tolist(),
                                h["model_version"].tolist(), version)
            self.rewards.extend(batch.rewards.tolist())
            data.extend((t, b, a, version - m, r) for b, a, m, r in zip(
                h["block_id"].tolist(), h["agg_count"].tolist(), h["model_version"].tolist(),
                batch.rewards.tolist(), strict=True))

        self.receiver = Receiver(UdpTransport(tuple(switch_address)), values=cfg.values,
                                 frac_bits=cfg.frac_bits, pull_rate=cfg.pull_rate,
                                 on_batch=on_batch, workers=min(cfg.workers, 32))
        self.t0 = self.receiver.aom.start_us / 1e6
        self.policies.start(self.t0)
        self.receiver.start()
        self._publisher = threading.Thread(target=self._publish, name="olaf-ps-publish",
                                           daemon=True)
        self._publisher.start()
        return self.t0

    def _publish(self) -> None:
        try:
            while not self._stop.wait(self.cfg.broadcast_period):
                self.published = self.ps.snapshot()
                self.policies.tick()
        except BaseException as exc:  # reported by status() and finish()
            self._publisher_error = exc

    def weights(self, newer_than: int = -1) -> tuple[np.ndarray, int] | None:
        """The published weights and version, or None if not newer than ``newer_than``."""
        weights, version = self.published
        return None if version <= newer_than else (weights, version)

    def recent_rewards(self) -> list[float]:
        return self.rewards.snapshot()

    def status(self) -> dict[str, Any]:
        """What the driver's timeline samples: version, blocks, AoM now, queue feedback."""
        if self._publisher_error is not None:
            raise RuntimeError("the PS stopped publishing") from self._publisher_error
        rx = self.receiver
        if rx is not None and not rx.running:
            raise RuntimeError("the PS's receiver stopped")
        aom_ms = math.nan
        util = None
        if rx is not None:
            rx.aom.advance()
            tail = rx.aom.series.global_ms
            aom_ms = float(tail[-1]) if len(tail) else math.nan
            util = rx.stats()["queue_util"]
        return {"model_version": self.ps.model_version, "blocks_applied": self.ps.blocks_applied,
                "aom_ms": aom_ms, "queue_util": util}

    def finish(self) -> dict[str, Any]:
        """Stop pulling and publishing; everything the run's result needs from the PS."""
        self._stop.set()
        if self._publisher is not None:
            self._publisher.join()
        error = None
        rx = self.receiver
        if rx is not None:
            try:
                rx.stop()
            except Exception as exc:  # reported to the driver with the figures
                error = repr(exc)
            rx.transport.close()
        self.policies.finish(time.time())
        out: dict[str, Any] = {
            "error": error or (None if self._publisher_error is None
                               else repr(self._publisher_error)),
            "model_version": self.ps.model_version,
            "blocks_applied": self.ps.blocks_applied,
            "weights": self.ps.params.copy(),
            "data": self.data,
            "policies": self.policies.stats([d[3] for d in self.data]),
            "receiver": rx.stats() if rx is not None else {},
            "aom": {}, "aom_t_ms": np.zeros(0), "aom_global_ms": np.zeros(0),
            "update_age_ms": np.zeros(0),
        }
        if rx is not None:
            series = rx.aom.series
            out.update(aom=rx.aom.summary(), aom_t_ms=series.t_ms, aom_global_ms=series.global_ms,
                       update_age_ms=series.ages_ms)
        return out


class WeightChannel:
    """A worker process's view of the PS's published weights, never blocking a rollout.

    One ``ParameterServerHost.weights(newer_than)`` call is in flight at a time; ``read``
    takes its answer if it has come and sends the next one, so weights follow the PS
    about one rollout (plus a round trip) behind, as the local backend's shared-memory
    board does, without a rollout ever waiting on the network.
    """

    def __init__(self, ps: Any) -> None:
        self.ps = ps
        self.newest: tuple[np.ndarray, int] | None = None
        self._pending = ps.weights.remote(-1)

    @property
    def version(self) -> int:
        return -1 if self.newest is None else self.newest[1]

    def _take(self, timeout: float) -> None:
        import ray

        done, _ = ray.wait([self._pending], timeout=timeout)
        if done:
            got = ray.get(done[0])
            if got is not None and got[1] > self.version:
                self.newest = got
            self._pending = self.ps.weights.remote(self.version)

    def first(self, timeout: float) -> None:
        """Wait for the first weights (RuntimeError if none come within ``timeout``)."""
        deadline = time.monotonic() + timeout
        while self.newest is None:
            if time.monotonic() > deadline:
                raise RuntimeError(f"no weights from the PS within {timeout:g} s")
            self._take(0.5)

    def read(self, newer_than: int) -> tuple[np.ndarray, int] | None:
        """The newest weights at hand if newer than ``newer_than``, else None."""
        self._take(0.0)
        if self.newest is None or self.newest[1] <= newer_than:
            return None
        return self.newest


class WorkerHost:
    """One worker process: several logical workers, each with its own ``Sender`` and socket."""

    def __init__(self, cfg: RunConfig, worker_ids: list[int], switch_address: tuple[str, int],
                 ps: Any) -> None:
        from olaf.drl.runner import worker_seed
        from olaf.drl.worker_turn import Progress, build_worker

        _nice()
        self.cfg = cfg
        self.channel = WeightChannel(ps)
        # Generation 0: this backend restarts no worker process.
        self.pool = [build_worker(cfg, w, worker_seed(cfg.seed, w, 0), switch_address,
                                  self.channel.read) for w in worker_ids]
        self._lock = threading.Lock()
        """Held around ``_progress``: ``progress`` is called while ``run`` goes on."""
        self._stop = threading.Event()
        self._progress = Progress()

    def ready(self) -> dict[str, Any]:
        """Where this process runs, once its workers hold the PS's first weights."""
        self.channel.first(READY_TIMEOUT)
        return {"pid": os.getpid(), "node": _node_ip(),
                "workers": [w.worker_id for w, _ in self.pool]}

    def run(self) -> list[dict[str, Any]]:
        """Roll out and send until ``stop``; returns every sender's statistics."""
        from olaf.drl.worker_turn import take_turn

        while not self._stop.is_set():
            for worker, sender in self.pool:
                grad = take_turn(worker, sender, self.channel.read)
                with self._lock:
                    self._progress.add(worker.worker_id, grad, time.time())
                if self._stop.is_set():
                    break
        for _, sender in self.pool:
            sender.poll(0.05)  # the last ACKs, so the outcome counts are complete
        return [s.stats() for _, s in self.pool]

    def progress(self) -> tuple[int, list[tuple[float, int, float, int]], dict[str, Any],
                                dict[str, float]]:
        """Env steps and episodes since the last call, sender totals, mean learner stats."""
        from olaf.drl.worker_turn import tx_totals

        with self._lock:
            steps, episodes, learner = self._progress.take()
        stats = [s.stats() for _, s in self.pool]
        outcomes: dict[str, int] = {}
        for st in stats:
            for name, n in st["outcomes"].items():
                outcomes[name] = outcomes.get(name, 0) + n
        return steps, episodes, {**tx_totals(stats), "outcomes": outcomes}, learner

    def stop(self) -> None:
        self._stop.set()

    def close(self) -> None:
        for worker, sender in self.pool:
            worker.close()
            sender.close()


class EvaluatorHost:
    """Greedy evaluation of published weights, on environments seeded apart from the workers'."""

    def __init__(self, cfg: RunConfig) -> None:
        _nice()
        self.cfg = cfg
        self.model = _initial_model(cfg)
        self.count = 0

    def ready(self) -> dict[str, Any]:
        return {"pid": os.getpid(), "node": _node_ip()}

    def evaluate(self, published: tuple[np.ndarray, int] | None, steps: int,
                 elapsed: float) -> tuple[int, float, float, float, int]:
        """(steps, elapsed, mean, std, version) of one evaluation of ``published``."""
        from olaf.algorithm import load_flat_parameters
        from olaf.drl.evaluation import EVAL_SEED_OFFSET, evaluate_greedy

        if published is None:
            raise RuntimeError("the PS has published no weights")
        weights, version = published
        load_flat_parameters(self.model, weights)
        cfg = self.cfg
        seed = EVAL_SEED_OFFSET + 10_007 * cfg.seed + self.count * cfg.eval_episodes
        self.count += 1
        returns = evaluate_greedy(self.model, cfg.env_id, cfg.eval_episodes, seed)
        return steps, elapsed, float(returns.mean()), float(returns.std()), version

    def final(self, weights: np.ndarray) -> float:
        """The weights the run ended with, judged on the local backend's final seeds."""
        from olaf.algorithm import load_flat_parameters
        from olaf.drl.evaluation import EVAL_SEED_OFFSET, evaluate_greedy

        load_flat_parameters(self.model, weights)
        cfg = self.cfg
        return float(evaluate_greedy(self.model, cfg.env_id, cfg.eval_episodes,
                                     EVAL_SEED_OFFSET - 1 - cfg.seed).mean())


# -- the driver ------------------------------------------------------------------------------
def import_ray() -> Any:
    """The ``ray`` module, or RayBackendError saying how to get it."""
    try:
        import ray
    except ImportError as exc:
        raise RayBackendError(f"--backend ray needs Ray, which is not importable ({exc}); "
                              f"{RAY_EXTRA_HINT}") from None
    return ray


def check_config(cfg: RunConfig) -> None:
    """ValueError for what this backend cannot run (nothing is started)."""
    if cfg.scaling != "fixed":
        raise ValueError(f"--scaling {cfg.scaling} is not supported with --backend ray "
                         "(its worker flags live in one machine's shared memory)")


def _connect(ray: Any, address: str) -> None:
    try:
        # log_to_driver off: the live display owns the terminal; actor errors come back
        # as exceptions of the calls that hit them.
        ray.init(address=address, log_to_driver=False, logging_level=logging.ERROR)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        hint = ("start one with `ray start --head`, or give --address HOST:PORT"
                if address == "auto" else "is the address right and the cluster up?")
        raise RayBackendError(f"no Ray cluster at {address}: {exc} ({hint})") from None


def _get(ray: Any, refs: Any, timeout: float, what: str) -> Any:
    """``ray.get`` that names what did not answer (RuntimeError) instead of a Ray traceback."""
    try:
        return ray.get(refs, timeout=timeout)
    except ray.exceptions.GetTimeoutError:
        raise RayBackendError(
            f"{what} did not answer within {timeout:g} s; the cluster has "
            f"{ray.available_resources().get('CPU', 0):g} of "
            f"{ray.cluster_resources().get('CPU', 0):g} CPUs free (the PS asks for {PS_CPUS:g}, "
            f"each worker process {WORKER_CPUS:g}, the switch {SWITCH_CPUS:g} on the head node, "
            f"the evaluator {EVALUATOR_CPUS:g})") from None
    except ray.exceptions.RayError as exc:
        cause = exc.cause if isinstance(getattr(exc, "cause", None), BaseException) else exc
        raise RuntimeError(f"{what} failed: {_first_line(cause)}") from exc


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[-1] if text else ''}"


@dataclass
class _Actors:
    ps: Any = None
    switch: Any = None
    workers: list[Any] | None = None
    evaluator: Any = None

    def all(self) -> list[Any]:
        return [a for a in (self.ps, self.switch, self.evaluator, *(self.workers or [])) if a]


def run_on_ray(cfg: RunConfig, options: RayOptions,
               progress: Callable[[Any], None] | None = None,
               tensorboard: Path | None = None) -> Any:
    """One run on a Ray cluster (see the module doc); returns a ``RunResult`` like the
    local backend's (same summary keys), with ``placement`` added: where each worker
    process and the evaluator ran."""
    from olaf.drl.runner import RunResult

    check_config(cfg)
    ray = import_ray()
    owns = not ray.is_initialized()
    if owns:
        _connect(ray, options.address)
    result = RunResult(cfg)
    actors = _Actors()
    tb = None
    if tensorboard is not None:
        from olaf.drl.tensorboard import TensorBoardLog

        tb = TensorBoardLog(tensorboard)
    try:
        _run(ray, cfg, options, result, actors, progress, tb)
    finally:
        for actor in actors.all():
            with contextlib.suppress(Exception):
                ray.kill(actor)
        if tb is not None:
            tb.close()
        if owns:
            ray.shutdown()
    return result


def _run(ray: Any, cfg: RunConfig, options: RayOptions, result: Any, actors: _Actors,
         progress: Callable[[Any], None] | None, tb: Any) -> None:
    from olaf.drl.runner import rolling_returns

    remote = {cls: ray.remote(cls) for cls in (SwitchHost, ParameterServerHost, WorkerHost,
                                               EvaluatorHost)}
    # Threaded: the workers' weight fetches and the driver's polls must not queue behind
    # each other.
    actors.ps = remote[ParameterServerHost].options(num_cpus=PS_CPUS,
                                                    max_concurrency=8).remote(cfg)
    result.num_parameters, result.num_blocks = _get(
        ray, actors.ps.shape.remote(), READY_TIMEOUT, "the parameter server actor")
    if options.switch is None:
        # The head node: the one address a user knows before the run, to open in a firewall.
        actors.switch = remote[SwitchHost].options(
            num_cpus=SWITCH_CPUS, resources={"node:__internal_head__": 0.001}
        ).remote(cfg, result.num_blocks, options.switch_port)
        switch_address = tuple(_get(ray, actors.switch.address.remote(), READY_TIMEOUT,
                                    "the software switch actor on the head node"))
    else:
        switch_address = options.switch
    result.switch_address = switch_address
    nproc = cfg.worker_processes
    actors.workers = [
        remote[WorkerHost].options(num_cpus=WORKER_CPUS, max_concurrency=2,
                                   scheduling_strategy="SPREAD").remote(
            cfg, list(range(p, cfg.workers, nproc)), switch_address, actors.ps)
        for p in range(nproc)]
    actors.evaluator = remote[EvaluatorHost].options(num_cpus=EVALUATOR_CPUS).remote(cfg)
    placed = _get(ray, [w.ready.remote() for w in actors.workers] + [actors.evaluator.ready.remote()],
                  READY_TIMEOUT, "the worker and evaluator actors")
    result.worker_pids = [p["pid"] for p in placed]
    result.placement = placed
    # The clock starts when every worker is built, as in the local backend.
    t0 = _get(ray, actors.ps.start.remote(switch_address), CALL_TIMEOUT, "the parameter server")
    runs = [w.run.remote() for w in actors.workers]
    loop = _DriverLoop(ray, cfg, result, actors, t0, progress, tb)
    try:
        loop.run(runs)
    except BaseException:
        # The error that ended the loop is the one to report, not a follow-up of the stop.
        with contextlib.suppress(Exception):
            loop.stop(runs)
        raise
    loop.stop(runs)
    _, _, rolling = rolling_returns(result.episodes, cfg.target_window)
    if len(rolling):
        result.initial_return = float(rolling[0])
        result.final_return = float(rolling[-1])


class _DriverLoop:
    """The driver's side of a run: progress, evaluation, controller, samples, stop."""

    def __init__(self, ray: Any, cfg: RunConfig, result: Any, actors: _Actors, t0: float,
                 progress: Callable[[Any], None] | None, tb: Any) -> None:
        from control_plane.threshold import ThresholdLoop

        self.ray, self.cfg, self.result, self.actors, self.t0 = ray, cfg, result, actors, t0
        self.progress, self.tb = progress, tb
        self.steps = 0
        self.recent: deque[float] = deque(maxlen=cfg.target_window)
        self.tx: dict[int, dict[str, Any]] = {}
        self.learner: dict[int, dict[str, float]] = {}
        self.last_draws, self.last_p_sum = 0.0, 0.0
        self.pending_eval: Any = None
        self.controller = None
        if actors.switch is not None:
            switch = actors.switch
            # A switch given by address keeps its own threshold (set it over P4Runtime).
            self.controller = ThresholdLoop(
                lambda th: ray.get(switch.set_threshold.remote(th), timeout=CALL_TIMEOUT),
                floor=cfg.threshold_floor, interval=cfg.controller_interval,
                fraction=cfg.threshold_fraction)

    def _poll_progress(self) -> None:
        reports = _get(self.ray, [w.progress.remote() for w in self.actors.workers], CALL_TIMEOUT,
                       "a worker actor's progress")
        for i, (steps, episodes, tx, learner) in enumerate(reports):
            self.steps += steps
            for t, worker, ret, length in episodes:
                self.result.episodes.append((t - self.t0, self.steps, worker, ret, length))
                self.recent.append(ret)
                if self.tb is not None:
                    self.tb.episode(ret, self.steps)
            self.tx[i] = tx
            if learner:
                self.learner[i] = learner
        self.result.env_steps = self.steps

    def _acked_outcomes(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for tx in self.tx.values():
            for name, n in tx["outcomes"].items():
                out[name] = out.get(name, 0) + n
        return out

    def run(self, runs: list[Any]) -> None:
        from olaf.drl.runner import SAMPLE_PERIOD

        ray, cfg, result, actors = self.ray, self.cfg, self.result, self.actors
        next_progress = next_control = next_sample = time.time()
        next_eval = 0
        while True:
            now = time.time()
            elapsed = now - self.t0
            if now >= next_progress:
                self._poll_progress()
                next_progress = now + PROGRESS_PERIOD
            ended, _ = ray.wait(runs, num_returns=len(runs), timeout=0)
            if ended:
                i = runs.index(ended[0])
                _get(ray, ended[0], CALL_TIMEOUT, f"worker actor {i}")
                raise RuntimeError(f"worker actor {i} stopped before it was told to")
            if self.pending_eval is not None:
                done, _ = ray.wait([self.pending_eval], timeout=0)
                if done:
                    self._record_eval(_get(ray, done[0], CALL_TIMEOUT, "the evaluator"))
                    self.pending_eval = None
            if self.pending_eval is None and self.steps >= next_eval:
                # One at a time, on the weights published now: a slow evaluator skips points.
                self.pending_eval = actors.evaluator.evaluate.remote(
                    actors.ps.weights.remote(-1), self.steps, elapsed)
                next_eval = self.steps + cfg.eval_every
            if self.controller is not None and now >= next_control:
                self.controller.feed(_get(ray, actors.ps.recent_rewards.remote(), CALL_TIMEOUT,
                                          "the parameter server"))
                self.controller.step()
                next_control = now + cfg.controller_interval
            if now >= next_sample or elapsed >= cfg.duration:
                self._sample(elapsed)
                next_sample = now + SAMPLE_PERIOD
            if result.time_to_target is not None and cfg.stop_at_target:
                result.stopped_by = "target"
                return
            if self.steps >= cfg.total_steps:
                result.stopped_by = "steps"
                return
            if elapsed >= cfg.duration:
                result.stopped_by = "duration"
                return
            time.sleep(min(cfg.broadcast_period, 0.02))

    def _record_eval(self, got: tuple[int, float, float, float, int]) -> None:
        steps, elapsed, mean, std, version = got
        result = self.result
        result.evaluations.append((elapsed, steps, mean, std, version))
        if self.tb is not None:
            self.tb.evaluation(mean, std, steps)
        target = self.cfg.target_reward
        if target is not None and mean >= target and result.time_to_target is None:
            result.time_to_target, result.steps_to_target = elapsed, steps
            result.return_at_target = mean

    def _sample(self, elapsed: float) -> None:
        from olaf.drl.runner import Snapshot

        ray, cfg, actors = self.ray, self.cfg, self.actors
        status = _get(ray, actors.ps.status.remote(), CALL_TIMEOUT, "the parameter server")
        if actors.switch is not None:
            switch = _get(ray, actors.switch.snapshot.remote(), CALL_TIMEOUT, "the switch actor")
            outcomes, occupied = dict(switch["outcomes"]), int(switch["occupied"])
        else:
            # A switch given by address is seen through its answers: the ACK outcomes the
            # workers counted and the queue utilisation the PS's last DATA/EMPTY carried.
            outcomes = self._acked_outcomes()
            util = status["queue_util"]
            occupied = 0 if util is None else round(util * cfg.capacity / 255)
        tx = {k: sum(t[k] for t in self.tx.values()) for k in ("sent", "skipped", "probes",
                                                              "p_s_sum")}
        draws = tx["sent"] + tx["skipped"]
        p_s_mean = ((tx["p_s_sum"] - self.last_p_sum) / (draws - self.last_draws)
                    if draws > self.last_draws else math.nan)
        self.last_draws, self.last_p_sum = draws, tx["p_s_sum"]
        keys = sorted({k for stats in self.learner.values() for k in stats})
        learner = {k: float(np.mean([s[k] for s in self.learner.values() if k in s]))
                   for k in keys}
        self.learner = {}
        history = self.controller.history if self.controller is not None else []
        snap = Snapshot(
            elapsed=elapsed, env_steps=self.steps, episodes=len(self.result.episodes),
            mean_return=float(np.mean(self.recent)) if self.recent else math.nan,
            aom_ms=status["aom_ms"], occupied=occupied, capacity=cfg.capacity,
            outcomes=outcomes, model_version=status["model_version"],
            blocks_applied=status["blocks_applied"],
            threshold=history[-1].threshold if history else None,
            updates_sent=int(tx["sent"]), updates_skipped=int(tx["skipped"]),
            updates_probes=int(tx["probes"]), p_s_mean=p_s_mean,
            eval_return=(self.result.evaluations[-1][2] if self.result.evaluations
                         else math.nan),
            learner=learner, active_workers=cfg.workers)
        self.result.timeline.append(snap)
        if self.tb is not None:
            self.tb.snapshot(snap)
        if self.progress is not None:
            self.progress(snap)

    def stop(self, runs: list[Any]) -> None:
        """Stop the workers, then the PS, then the switch; collect what each measured."""
        ray, result, actors = self.ray, self.result, self.actors
        for w in actors.workers:
            w.stop.remote()
        finals: list[dict[str, Any]] = []
        errors: list[str] = []
        for i, ref in enumerate(runs):
            try:
                finals.extend(ray.get(ref, timeout=STOP_TIMEOUT))
            except Exception as exc:  # a dead worker actor: report the others' figures
                errors.append(f"worker actor {i}: {_first_line(exc)}")
        with contextlib.suppress(Exception):
            self._poll_progress()  # what the workers did between the last poll and the stop
        for w in actors.workers:
            with contextlib.suppress(Exception):
                ray.get(w.close.remote(), timeout=STOP_TIMEOUT)
        if self.pending_eval is not None:
            # As the local backend drains its evaluator's last report: an evaluation asked
            # for during the run counts even if it ends after the stop.
            with contextlib.suppress(Exception):
                self._record_eval(ray.get(self.pending_eval, timeout=READY_TIMEOUT))
        result.senders = finals
        result.active_workers = self.cfg.workers
        ps = _get(ray, actors.ps.finish.remote(), CALL_TIMEOUT, "the parameter server")
        result.wall_time = time.time() - self.t0
        result.model_version, result.blocks_applied = ps["model_version"], ps["blocks_applied"]
        result.data = ps["data"]
        result.receiver, result.policies, result.aom = ps["receiver"], ps["policies"], ps["aom"]
        result.aom_t_ms, result.aom_global_ms = ps["aom_t_ms"], ps["aom_global_ms"]
        result.update_age_ms = ps["update_age_ms"]
        if actors.switch is not None:
            result.switch = _get(ray, actors.switch.close.remote(), CALL_TIMEOUT, "the switch actor")
        else:
            result.switch = {"outcomes": self._acked_outcomes(),
                             "source": "ACK outcomes counted by the workers"}
        result.final_eval_return = _get(ray, actors.evaluator.final.remote(ps["weights"]),
                                        READY_TIMEOUT, "the final evaluation")
        if ps["error"] is not None:
            errors.append(f"parameter server: {ps['error']}")
        if errors:
            raise RuntimeError("; ".join(errors))


# -- ``olaf run --backend ray`` ------------------------------------------------------------------
def run_command(args: argparse.Namespace) -> int:
    """``olaf run`` when ``--backend ray`` (or one of its options) is given; exit code."""
    from rich.console import Console

    from olaf.drl.cli_args import check_env, config_from_args, resolve_target, usage_error
    from olaf.drl.display import Progress, summary_table
    from olaf.drl.report import write_metrics, write_plots

    if args.backend != "ray":
        usage_error("olaf run: error: --address, --switch and --switch-port are options of "
                    "--backend ray")
    if args.switch is not None and args.switch_port is not None:
        usage_error("olaf run: error: --switch-port is the port of the switch this run starts; "
                    "--switch names a running one")
    given = [flag for name, flag in UNSUPPORTED.items() if getattr(args, name, None)]
    if given:
        usage_error(f"olaf run: error: not supported with --backend ray: {', '.join(given)}")
    cfg = check_env(config_from_args(args, mode=args.mode, seed=args.seed,
                                     target=resolve_target(args), always_send=args.always_send))
    try:
        check_config(cfg)
        import_ray()
    except (ValueError, RayBackendError) as exc:
        usage_error(f"olaf run: error: {exc}")
    options = RayOptions(address=args.address or "auto", switch=args.switch,
                         switch_port=OLAF_PORT if args.switch_port is None else args.switch_port)
    out = args.out or Path("runs") / time.strftime("run-%Y%m%d-%H%M%S")
    console = Console() if Console().is_terminal else Console(width=120)
    where = (f"switch {options.switch[0]}:{options.switch[1]}" if options.switch
             else "software switch on the head node")
    title = (f"olaf run on Ray ({options.address}): {cfg.algo} on {cfg.env_id}, {cfg.workers} "
             f"workers in {cfg.worker_processes} actors, {where}, pull {cfg.pull_rate:g}/s, "
             f"target {cfg.target_reward}")
    try:
        with Progress(title, cfg.duration, console, total_steps=cfg.total_steps) as progress:
            result = run_on_ray(cfg, options, progress, tensorboard=args.tensorboard)
    except RayBackendError as exc:
        print(f"olaf run: error: {exc}", file=sys.stderr)
        return 2
    except RuntimeError as exc:
        print(f"olaf run: error: {exc}", file=sys.stderr)
        return 1
    console.print(summary_table(result.summary()))
    files = write_metrics(result, out) + write_plots(result, out)
    _write_placement(result, out)
    console.print(f"wrote {len(files) + 1} files to {out}/: "
                  + ", ".join([p.name for p in files] + ["placement.json"]))
    return 0


def _write_placement(result: Any, out: Path) -> None:
    """Which node each actor ran on, and the switch address: the run's Ray-specific facts."""
    import json

    out.mkdir(parents=True, exist_ok=True)
    (out / "placement.json").write_text(json.dumps({
        "switch_address": list(result.switch_address),
        "worker_processes": getattr(result, "placement", []),
    }, indent=2) + "\n")
