"""The actors of ``olaf run --backend ray`` (olaf.drl.ray_backend drives them): the
software switch, the parameter server, the worker processes and the evaluator, each a
plain class that ``ray.remote`` turns into an actor where Ray places it.

Ray itself is imported only where an actor needs it (``ray`` is an optional extra; the
classes are plain Python until ``ray.remote`` wraps them).
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
import time
from typing import Any

import numpy as np
import torch

from dataplane.queue import OlafQueue, QueueConfig
from dataplane.switch import UdpSwitch
from olaf.drl.config import RunConfig
from olaf.drl.controller import RecentRewards, embedded_setter
from olaf.drl.core import PsApply, RecentDelivery
from olaf.drl.elastic import MAX_WORKER_BITS, ElasticAoM, worker_bits
from olaf.drl.evaluation import Evaluator
from olaf.drl.learners import parameter_server, run_model
from olaf.drl.policies import RunPolicies
from olaf.drl.results import EvalScores
from olaf.drl.worker_turn import Progress, build_worker, take_turn, tx_totals, worker_seed
from worker_transport.protocol import Mode
from worker_transport.receiver import Receiver
from worker_transport.transport import UdpTransport

READY_TIMEOUT = 300.0
"""Seconds the actors get to be placed, import torch and build their workers."""
WORKER_NICENESS = 5
"""As in the local backend: workers yield the CPU to a switch or PS on the same node."""
IDLE_WAIT_S = 0.05
"""A worker process none of whose workers is active looks again after this long."""


def first_pool(cfg: RunConfig) -> int:
    """The workers active when training starts: all, or ``--elastic auto``'s first pool."""
    return cfg.autoscale.start_workers if cfg.scaling == "auto" else cfg.workers


def _nice() -> None:
    torch.set_num_threads(1)
    with contextlib.suppress(OSError):
        os.nice(WORKER_NICENESS)


def _node_ip() -> str:
    import ray  # optional extra: only the Ray backend needs it

    return ray.util.get_node_ip_address()


class SwitchHost:
    """The software switch (``UdpSwitch`` serving in a thread) as an actor on the head node."""

    def __init__(self, cfg: RunConfig, num_blocks: int, port: int) -> None:
        qcfg = QueueConfig(capacity=cfg.capacity, values=cfg.values, max_clusters=cfg.queue_max_clusters,
                           max_blocks=num_blocks, frac_bits=cfg.frac_bits,
                           cluster_quota=cfg.queue_cluster_quota, feedback=cfg.feedback,
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
        torch.set_num_threads(1)
        self.cfg = cfg
        self.ps = parameter_server(cfg, run_model(cfg))
        # --elastic auto: the policies keep the pool's flags here; the driver tells the
        # worker actors which ids run (WorkerHost.set_active).
        self.policies = RunPolicies(cfg, self.ps, bytearray(cfg.workers) if cfg.scaling == "auto" else None)
        self.rewards = RecentRewards(cfg.reward_history)
        self.apply = PsApply(self.ps, self.policies, self.rewards)
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
        cfg = self.cfg
        bits = min(cfg.workers, MAX_WORKER_BITS)
        aom = ElasticAoM(active_bits=worker_bits(list(range(first_pool(cfg))), bits), workers=bits)
        self.receiver = Receiver(UdpTransport(tuple(switch_address)), values=cfg.values,
                                 frac_bits=cfg.frac_bits, pull_rate=cfg.pull_rate,
                                 on_batch=self.apply, aom=aom)
        self.delivery = RecentDelivery(self.apply.data, lambda: self.receiver.aom.series.ages_ms)
        self.t0 = self.apply.t0 = self.receiver.aom.start_us / 1e6
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

    def set_workers(self, n: int, now: float) -> None:
        """``--elastic auto``: ids 0..n-1 active from ``now`` (epoch s), for the worker-seconds
        and the AoM's active set."""
        self.policies.set_workers(n, now)
        aom = self.receiver.aom
        aom.set_active(worker_bits(list(range(n)), aom.workers), int(now * 1e6))

    def status(self) -> dict[str, Any]:
        """What the driver's timeline samples: version, blocks, AoM now, queue feedback."""
        if self._publisher_error is not None:
            raise RuntimeError("the PS stopped publishing") from self._publisher_error
        rx = self.receiver
        if rx is not None and not rx.running:
            raise RuntimeError("the PS's receiver stopped")
        aom_ms = math.nan
        util = None
        staleness = ages = (math.nan, math.nan, math.nan)
        if rx is not None:
            rx.aom.advance()
            tail = rx.aom.series.global_ms
            aom_ms = float(tail[-1]) if len(tail) else math.nan
            util = rx.stats()["queue_util"]
            staleness, ages = self.delivery.take()
        return {"model_version": self.ps.model_version, "blocks_applied": self.ps.blocks_applied,
                "aom_ms": aom_ms, "queue_util": util, "staleness": staleness,
                "update_age_ms": ages}

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
            "data": self.apply.data,
            "policies": self.policies.stats([d[3] for d in self.apply.data]),
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
        import ray  # optional extra: only the Ray backend needs it

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
        self._active = frozenset(w for w in worker_ids if w < first_pool(cfg))
        """The logical workers that take turns (``set_workers``: ``--elastic auto``)."""

    def ready(self) -> dict[str, Any]:
        """Where this process runs, once its workers hold the PS's first weights."""
        self.channel.first(READY_TIMEOUT)
        return {"pid": os.getpid(), "node": _node_ip(),
                "workers": [w.worker_id for w, _ in self.pool]}

    def run(self) -> list[dict[str, Any]]:
        """Roll out and send until ``stop``; returns every sender's statistics."""
        while not self._stop.is_set():
            active = self._active
            if not any(worker.worker_id in active for worker, _ in self.pool):
                self._stop.wait(IDLE_WAIT_S)
                continue
            for worker, sender in self.pool:
                if worker.worker_id not in active:
                    continue
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

        with self._lock:
            steps, episodes, learner = self._progress.take()
        stats = [s.stats() for _, s in self.pool]
        outcomes: dict[str, int] = {}
        for st in stats:
            for name, n in st["outcomes"].items():
                outcomes[name] = outcomes.get(name, 0) + n
        return steps, episodes, {**tx_totals(stats), "outcomes": outcomes}, learner

    def set_workers(self, n: int) -> None:
        """``--elastic auto``: this process's workers with ids below ``n`` take turns from now
        (a turn under way ends first); replaced whole, so ``run`` reads it without a lock."""
        self._active = frozenset(worker.worker_id for worker, _ in self.pool if worker.worker_id < n)

    def stop(self) -> None:
        self._stop.set()

    def close(self) -> None:
        for worker, sender in self.pool:
            worker.close()
            sender.close()


class EvaluatorHost:
    """Evaluation (greedy and stochastic) of published weights (``Evaluator``), apart from
    the workers."""

    def __init__(self, cfg: RunConfig) -> None:
        _nice()
        self.evaluator = Evaluator(cfg)

    def ready(self) -> dict[str, Any]:
        return {"pid": os.getpid(), "node": _node_ip()}

    def evaluate(self, published: tuple[np.ndarray, int] | None, steps: int,
                 elapsed: float) -> tuple[int, float, EvalScores, int]:
        """(steps, elapsed, scores, version) of one evaluation of ``published``."""
        if published is None:
            raise RuntimeError("the PS has published no weights")
        weights, version = published
        return steps, elapsed, self.evaluator.evaluate(weights), version

    def final(self, weights: np.ndarray) -> float:
        """The weights the run ended with, judged on the local backend's final seeds."""
        return self.evaluator.final(weights)
