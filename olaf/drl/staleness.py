"""Staleness-aware aggregation at the parameter server (after Stellaris, SC'24).

The plain parameter server applies every DATA block the moment it is pulled. This
policy sits between the receiver and ``ParameterServer.apply_block`` instead:

* **Staleness.** A DATA block's staleness is ``delta = current_version - model_version``.
  The switch keeps the *minimum* model version of the updates it merges into a slot,
  so ``delta`` is the worst case over the block's contributors.
* **Pending sets and the dynamic threshold.** DATA blocks wait per parameter block in
  a pending set. After each offer the set is aggregated (released) when its mean
  staleness is below ``beta_k = delta_max * d**k``; otherwise it is held so that
  fresher blocks can join it and pull the mean down. ``delta_max`` is the largest
  staleness seen during the first round (floored at ``min_delta_max``: a first round
  of only fresh blocks would otherwise make the threshold 0 for good), ``d`` the decay
  (0.96) and ``k`` the PS round.
* **Rounds.** Round 0 releases every block at once and only measures ``delta_max``.
  A round ends when every parameter block has been released at least once since it
  began (one full-model update), so ``k`` counts full-model updates, not blocks.
* **Bounded hold.** A held set is released anyway when its oldest block has waited
  ``max_hold`` seconds (``poll``) or when it reaches ``max_pending`` blocks, so the
  policy delays blocks but never stalls training; ``flush`` releases everything.
* **Staleness-scaled learning rate.** ``alpha = alpha0 / sqrt(delta)`` is a *step size*:
  a release carries the plain mean ``g = (1/H) * sum_j g_j`` of the H worker gradients
  in the set and ``lr_scale = (1/H) * sum_j alpha_j / alpha0``, and the server's Adam
  step for that block uses ``alpha0 * lr_scale`` (``ParameterServer.apply_block``).
  Weighting the gradient instead would cancel: Adam divides by the root of its own
  second moment, so a gradient scaled by a constant moves the weights the same. A DATA
  block already holds the mean of ``agg_count`` gradients that share its worst-case
  ``delta``, so it counts ``agg_count`` times; ``delta_j`` is taken at release time,
  because that is how stale the gradient is when it lands.

The aggregator is thread-safe: the receiver thread offers blocks while the runner's
main loop polls for expired holds.
"""

from __future__ import annotations

import math
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

REASONS = ("warmup", "threshold", "full", "hold", "flush")
"""Why a pending set was released: round 0 (no threshold yet), mean staleness below
``beta_k``, ``max_pending`` reached, ``max_hold`` expired, end of run."""


@dataclass(frozen=True)
class StalenessConfig:
    """Parameters of the staleness-aware policy."""

    decay: float = 0.96
    """``d`` in ``beta_k = delta_max * d**k``."""
    max_hold: float = 0.05
    """Seconds a pending set may wait for fresher blocks before it is released anyway."""
    max_pending: int = 8
    """DATA blocks of one parameter block that may be pending; the next offer releases."""
    scale_learning_rate: bool = True
    """Scale the block's Adam step by ``1/sqrt(delta)`` (the ``alpha0/sqrt(delta)`` rule)."""
    min_delta_max: float = 1.0
    """Floor of ``delta_max``, in model versions."""
    refresh_before_loss: bool = True
    """Workers take the newest published weights between acting and computing the loss,
    so the gradient is taken at (and stamped with) a fresher version; the truncated
    importance weight below corrects for acting with the older one."""
    rho: float = 1.0
    """Truncation ``rho`` of the importance weight in the workers' policy loss
    (olaf.drl.truncation)."""

    def __post_init__(self) -> None:
        checks = [
            (0.0 < self.decay <= 1.0, "decay must be in (0, 1]"),
            (self.max_hold >= 0.0 and math.isfinite(self.max_hold), "max_hold must be >= 0 s"),
            (self.max_pending >= 1, "max_pending must be >= 1"),
            (self.min_delta_max > 0.0, "min_delta_max must be > 0"),
            (self.rho > 0.0, "rho must be > 0"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)


def dynamic_threshold(delta_max: float, decay: float, k: int) -> float:
    """``beta_k = delta_max * decay**k``."""
    if k < 0:
        raise ValueError(f"round k must be >= 0, got {k}")
    return float(delta_max) * float(decay) ** k


def staleness_scale(delta: int | np.ndarray) -> np.ndarray:
    """``alpha / alpha0``: ``1/sqrt(delta)`` for ``delta > 0``, 1 for a fresh gradient."""
    d = np.asarray(delta, np.float64)
    if (d < 0).any():
        raise ValueError("staleness must be >= 0")
    return 1.0 / np.sqrt(np.maximum(d, 1.0))


def staleness_weighted_mean(
    gradients: np.ndarray, agg_counts: np.ndarray, deltas: np.ndarray, *, scale: bool = True
) -> np.ndarray:
    """``(1/H) * sum_j (alpha_j/alpha0) * g_j`` over the worker gradients of some DATA blocks.

    ``gradients`` is ``(n, V)``, each row the mean of ``agg_counts[j]`` worker gradients
    that share staleness ``deltas[j]``; ``H = sum(agg_counts)``. With ``scale=False``
    every weight is 1 (the plain mean).
    """
    g = np.asarray(gradients, np.float64)
    a = np.asarray(agg_counts, np.float64)
    if g.ndim != 2 or a.shape != (len(g),) or np.shape(deltas) != (len(g),):
        raise ValueError("need (n, V) gradients and n agg_counts and n deltas")
    if len(g) == 0 or (a < 1).any():
        raise ValueError("need at least one block, each with agg_count >= 1")
    w = a * (staleness_scale(deltas) if scale else 1.0)
    return (w @ g / a.sum()).astype(np.float32)


@dataclass(frozen=True)
class Release:
    """One aggregated pending set, ready for ``ParameterServer.apply_block``."""

    block_id: int
    gradient: np.ndarray
    """float32, V values: the mean of the set's worker gradients."""
    lr_scale: float
    """``alpha / alpha0`` of this update: the mean of ``1/sqrt(delta_j)`` over the set's
    worker gradients (1 with learning-rate scaling off)."""
    blocks: int
    """DATA blocks aggregated."""
    updates: int
    """Worker gradients in them (H = sum of agg_count)."""
    staleness: tuple[int, ...]
    """Each block's staleness at release."""
    waited: float
    """Seconds the oldest block of the set was held."""
    reason: str
    round: int
    """PS round the release belongs to."""


@dataclass
class _Pending:
    gradients: list[np.ndarray] = field(default_factory=list)
    agg_counts: list[int] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    first_at: float = 0.0


class StalenessAwareAggregator:
    """Pending sets per parameter block, the ``beta_k`` schedule and the weighted release."""

    def __init__(
        self,
        num_blocks: int,
        values: int,
        config: StalenessConfig | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if num_blocks < 1 or values < 1:
            raise ValueError("num_blocks and values must be >= 1")
        self.num_blocks = num_blocks
        self.values = values
        self.config = config or StalenessConfig()
        self.clock = clock
        self._lock = threading.Lock()
        self._pending: dict[int, _Pending] = {}
        self._released_in_round = np.zeros(num_blocks, bool)
        self.round = 0
        """k: completed PS rounds (full-model updates)."""
        self.delta_max: float | None = None
        """Largest staleness of round 0 (floored), fixed when round 0 ends."""
        self._first_round_max = 0
        self.arrival_staleness: Counter[int] = Counter()
        """Staleness of every offered DATA block, at arrival."""
        self.applied_staleness: Counter[int] = Counter()
        """Staleness of every aggregated DATA block, at release."""
        self.held_blocks = 0
        """DATA blocks that were not released on arrival (they waited for fresher ones)."""
        self.releases: Counter[str] = Counter()
        self.offered = 0
        self._scale_sum = 0.0
        self._scale_count = 0
        self._wait_sum = 0.0

    # -- the threshold -------------------------------------------------------------
    @property
    def threshold(self) -> float | None:
        """``beta_k``, or None during round 0."""
        if self.delta_max is None:
            return None
        return dynamic_threshold(self.delta_max, self.config.decay, self.round)

    # -- input ---------------------------------------------------------------------
    def offer(
        self,
        block_id: int,
        gradient: np.ndarray,
        agg_count: int,
        model_version: int,
        current_version: int,
        now: float | None = None,
    ) -> list[Release]:
        """Add one DATA block; return the sets released by it (and by expired holds).

        ``gradient`` is the block's V values already averaged over ``agg_count``. Bad
        input (block out of range, wrong length, non-finite values, ``agg_count < 1``, a
        model version newer than ``current_version``) raises ``ValueError`` and changes
        nothing.
        """
        if not 0 <= block_id < self.num_blocks:
            raise ValueError(f"block_id {block_id} out of range 0..{self.num_blocks - 1}")
        g = np.asarray(gradient, np.float32).reshape(-1)
        if g.shape != (self.values,):
            raise ValueError(f"block {block_id}: expected {self.values} values, got {g.size}")
        if not np.isfinite(g).all():
            raise ValueError(f"block {block_id}: non-finite gradient")
        if agg_count < 1:
            raise ValueError(f"block {block_id}: agg_count must be >= 1, got {agg_count}")
        delta = current_version - model_version
        if delta < 0:
            raise ValueError(f"block {block_id}: model_version {model_version} is newer than "
                             f"the server's {current_version}")
        now = self.clock() if now is None else now
        with self._lock:
            self.offered += 1
            self.arrival_staleness[delta] += 1
            out = self._expire(current_version, now, skip=block_id)
            pending = self._pending.get(block_id)
            if pending is None:
                pending = self._pending[block_id] = _Pending(first_at=now)
            pending.gradients.append(g.copy())
            pending.agg_counts.append(int(agg_count))
            pending.versions.append(int(model_version))
            if self.delta_max is None:
                self._first_round_max = max(self._first_round_max, delta)
                out.append(self._release(block_id, current_version, now, "warmup"))
            else:
                deltas = current_version - np.asarray(pending.versions)
                beta = dynamic_threshold(self.delta_max, self.config.decay, self.round)
                if float(deltas.mean()) < beta:
                    out.append(self._release(block_id, current_version, now, "threshold"))
                elif len(pending.versions) >= self.config.max_pending:
                    out.append(self._release(block_id, current_version, now, "full"))
                else:
                    self.held_blocks += 1
            return out

    def poll(self, current_version: int, now: float | None = None) -> list[Release]:
        """Release every pending set whose oldest block has waited ``max_hold``."""
        now = self.clock() if now is None else now
        with self._lock:
            return self._expire(current_version, now)

    def flush(self, current_version: int, now: float | None = None) -> list[Release]:
        """Release every pending set now (end of run)."""
        now = self.clock() if now is None else now
        with self._lock:
            return [self._release(b, current_version, now, "flush") for b in sorted(self._pending)]

    @property
    def pending_blocks(self) -> int:
        with self._lock:
            return sum(len(p.versions) for p in self._pending.values())

    # -- internals (lock held) -----------------------------------------------------
    def _expire(self, current_version: int, now: float, skip: int = -1) -> list[Release]:
        due = [b for b, p in self._pending.items()
               if b != skip and now - p.first_at >= self.config.max_hold]
        return [self._release(b, current_version, now, "hold") for b in sorted(due)]

    def _release(self, block_id: int, current_version: int, now: float, reason: str) -> Release:
        pending = self._pending.pop(block_id)
        deltas = np.maximum(current_version - np.asarray(pending.versions, np.int64), 0)
        counts = np.asarray(pending.agg_counts)
        gradient = staleness_weighted_mean(np.stack(pending.gradients), counts, deltas,
                                           scale=False)
        for d in deltas.tolist():
            self.applied_staleness[d] += 1
        scales = staleness_scale(deltas) if self.config.scale_learning_rate else np.ones(len(deltas))
        self._scale_sum += float(np.dot(scales, pending.agg_counts))
        self._scale_count += int(sum(pending.agg_counts))
        waited = now - pending.first_at
        self._wait_sum += waited * len(deltas)
        self.releases[reason] += 1
        lr_scale = float(np.dot(scales, counts) / counts.sum())
        release = Release(block_id, gradient, lr_scale, len(deltas), int(sum(pending.agg_counts)),
                          tuple(deltas.tolist()), waited, reason, self.round)
        self._released_in_round[block_id] = True
        if self._released_in_round.all():
            if self.delta_max is None:
                self.delta_max = max(float(self._first_round_max), self.config.min_delta_max)
            self.round += 1
            self._released_in_round[:] = False
        return release

    # -- reporting -----------------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        """JSON-ready counters: staleness distributions, held blocks, releases, schedule."""
        with self._lock:
            return {
                "offered_blocks": self.offered,
                "held_blocks": self.held_blocks,
                "held_share": self.held_blocks / self.offered if self.offered else math.nan,
                "pending_blocks": sum(len(p.versions) for p in self._pending.values()),
                "releases": {r: self.releases.get(r, 0) for r in REASONS},
                "rounds": self.round,
                "delta_max": self.delta_max,
                "threshold": self.threshold,
                "mean_lr_scale": (self._scale_sum / self._scale_count
                                  if self._scale_count else math.nan),
                "mean_wait_ms": (1e3 * self._wait_sum / sum(self.applied_staleness.values())
                                 if self.applied_staleness else math.nan),
                "arrival_staleness": distribution(self.arrival_staleness),
                "applied_staleness": distribution(self.applied_staleness),
            }


def distribution(counts: Counter[int]) -> dict[str, Any]:
    """Mean, percentiles and the histogram of a staleness counter."""
    n = sum(counts.values())
    if n == 0:
        return {"count": 0, "mean": math.nan, "p50": math.nan, "p90": math.nan,
                "p99": math.nan, "max": math.nan, "histogram": {}}
    keys = sorted(counts)
    cum = np.cumsum([counts[k] for k in keys])

    def pct(q: float) -> int:
        return int(keys[int(np.searchsorted(cum, q * n, side="left"))])

    return {
        "count": n,
        "mean": sum(k * c for k, c in counts.items()) / n,
        "p50": pct(0.5),
        "p90": pct(0.9),
        "p99": pct(0.99),
        "max": keys[-1],
        "histogram": {str(k): counts[k] for k in keys},
    }
