"""A logical worker's turn inside a worker process, the same in both backends.

The local backend's worker processes (``olaf.drl.children``) and the Ray backend's
``WorkerHost`` (``olaf.drl.ray_backend``) host several logical workers each and run them
round-robin: every worker has its own ``Sender`` and socket toward the switch, takes the
newest weights its process has, rolls out, and sends the gradient as UPDATEs. What the
turns did is reported to the driver in batches (``Progress``). Only where the newest
weights come from differs: a shared-memory ``WeightBoard`` or a Ray object channel.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from olaf.algorithm import Gradient, Worker
from olaf.drl.bottleneck import cluster_of
from olaf.drl.config import RunConfig
from olaf.drl.learners import make_worker
from worker_transport.aom import wall_clock_us
from worker_transport.policy import AlwaysSend, OlafPolicy, OlafRev2Policy
from worker_transport.sender import Sender
from worker_transport.transport import Transport, UdpTransport

GENERATION_STRIDE = 1 << 20
"""Seed distance between generations of worker processes (``worker_seed``)."""

NewestWeights = Callable[[int], tuple[np.ndarray, int] | None]
"""The newest weights the process holds if newer than the given version, else None."""


def worker_seed(seed: int, worker_id: int, generation: int) -> int:
    """Seed of logical worker ``worker_id`` in a worker process of ``generation``.

    Generation 0 is the first start of a run (the seeds of a run without restarts); a
    restarted process and every process of a resumed run get a new generation, so they
    do not replay the episodes their predecessors already played.
    """
    return seed * 1000 + worker_id + GENERATION_STRIDE * generation


def build_worker(cfg: RunConfig, worker_id: int, seed: int, switch_address: tuple[str, int] | None,
                 newest: NewestWeights, *, transport: Transport | None = None,
                 clock: Callable[[], int] = wall_clock_us) -> tuple[Worker, Sender]:
    """Logical worker ``worker_id`` of the run and the ``Sender`` of its own socket
    (``transport``: another way to the switch than a UDP socket to ``switch_address``, on
    the Sender's ``clock``, as the virtual clock's simulated links)."""
    # The worker's revision goes with the switch's (RunConfig.feedback): revision 3's P_s
    # reads queue_util as its cluster's lost room, revision 2's as the global occupancy.
    rule = OlafPolicy if cfg.feedback == 3 else OlafRev2Policy
    policy = rule(feedback_ttl_ms=cfg.feedback_ttl_ms) if cfg.workers_use_p_s else AlwaysSend()
    # Ray hands the address over as a list.
    sender = Sender(transport or UdpTransport(tuple(switch_address)),
                    cluster_id=cluster_of(worker_id, cfg.clusters), worker_id=worker_id,
                    values=cfg.values, frac_bits=cfg.frac_bits, policy=policy, seed=seed,
                    ack_thread=False, shuffle_blocks=cfg.shuffle_blocks, clock=clock)
    worker = make_worker(cfg, worker_id, seed)
    # IMPACT, and staleness-aware aggregation when its config asks, compute the loss on
    # the newest weights, which may have come in while the worker acted.
    if worker.algorithm.refresh_before_loss or (
            cfg.aggregation == "staleness-aware" and cfg.staleness.refresh_before_loss):
        worker.refresh = newest
    return worker, sender


def take_turn(worker: Worker, sender: Sender, newest: NewestWeights) -> Gradient:
    """Newer weights if the process has them, one rollout, its gradient to the switch."""
    fresh = newest(worker.model_version)
    if fresh is not None:
        worker.load_weights(*fresh)
    grad = worker.rollout()
    sender.send_gradient(grad.flat, reward=grad.reward, model_version=grad.model_version)
    return grad


class Progress:
    """What a worker process's turns did since its last progress report."""

    def __init__(self) -> None:
        self._steps = 0
        self._episodes: list[tuple[float, int, float, int]] = []
        self._learner: dict[str, float] = {}
        self._turns = 0

    def add(self, worker_id: int, grad: Gradient, now: float) -> None:
        """One turn's gradient; ``now`` (wall s) stamps the episodes it finished."""
        self._steps += grad.steps
        self._episodes.extend((now, worker_id, e.ret, e.length) for e in grad.episodes)
        for k, v in grad.stats.items():
            self._learner[k] = self._learner.get(k, 0.0) + float(v)
        self._turns += 1

    def take(self) -> tuple[int, list[tuple[float, int, float, int]], dict[str, float]]:
        """Env steps, (end wall s, worker id, return, length) of each finished episode and
        the mean of each ``Gradient.stats`` (empty if no turn) so far; then start over."""
        learner = {k: v / self._turns for k, v in self._learner.items()} if self._turns else {}
        out = self._steps, self._episodes, learner
        self._steps, self._episodes, self._learner, self._turns = 0, [], {}, 0
        return out


TX_FIELDS = ("sent", "skipped", "probes", "p_s_sum", "ceiling_sum", "ceilings", "due_blocks",
             "answered_due_blocks")
"""The keys of ``tx_totals``, in the order the testbed's worker hosts print them."""


def tx_totals(stats: list[dict[str, Any]]) -> dict[str, float]:
    """What a worker process reports of its senders: sums of updates, probes and P_s, of
    the loss ceilings L (``ceilings`` senders have one: revision 3) and of the blocks of
    the updates whose answers were due, and of those answered (DESIGN.md §4)."""
    ceilings = [st["loss_ceiling"] for st in stats if st.get("loss_ceiling") is not None]
    return {"sent": sum(st["sent_updates"] for st in stats),
            "skipped": sum(st["skipped_updates"] for st in stats),
            "probes": sum(st["probe_updates"] for st in stats),
            "p_s_sum": sum(st["p_s_sum"] for st in stats),
            "ceiling_sum": float(sum(ceilings)), "ceilings": len(ceilings),
            "due_blocks": sum(st.get("due_blocks", 0) for st in stats),
            "answered_due_blocks": sum(st.get("answered_due_blocks", 0) for st in stats)}
