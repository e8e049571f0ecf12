"""The two optional policies of ``olaf run``, as the runner calls them.

* ``aggregation="staleness-aware"``: DATA blocks go through a
  ``StalenessAwareAggregator`` (olaf.drl.staleness) instead of straight into
  ``ParameterServer.apply_block``; the main loop releases expired holds.
* ``scaling="boost"``: every ``boost_period`` the first worker process estimates the
  extreme Hessian eigenvalues of the policy loss on its recent trajectories with the
  newest weights (``CurvatureProbe``) and reports them; ``record_curvature`` scores the
  round (``BoostScheduler``, ``k`` from the PS's training iterations) and writes the
  number of active logical workers into a shared flag array the worker processes read
  before each rollout.
* ``scaling="decay"``: the same flags follow ``I_max * d**k`` alone, ``k`` counted the
  same way, with no detector: the baseline that isolates the detector's effect.

Both are off by default; with both off this object only applies blocks and accounts
worker-seconds (every worker active all the time), so the summaries of every run
carry the same keys.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from olaf.drl.boosting import BoostScheduler, WorkerSeconds, active_workers
from olaf.drl.config import RunConfig
from olaf.drl.server import ParameterServer
from olaf.drl.staleness import StalenessAwareAggregator, distribution

if TYPE_CHECKING:
    from worker_transport.receiver import DataBatch


class RunPolicies:
    """Aggregation and worker scaling of one run; see the module doc."""

    def __init__(self, cfg: RunConfig, ps: ParameterServer, active: Any | None = None) -> None:
        """``active``: a shared byte array of ``cfg.workers`` flags (1 = active), needed
        for boost and decay scaling."""
        self.cfg = cfg
        self.ps = ps
        self.active = active
        self.aggregator = (StalenessAwareAggregator(ps.num_blocks, cfg.values, cfg.staleness)
                           if cfg.aggregation == "staleness-aware" else None)
        self.scheduler: BoostScheduler | None = None
        if cfg.scaling != "fixed" and active is None:
            raise ValueError(f"{cfg.scaling} scaling needs the shared active-worker flags")
        self.decay_k = 0
        self.meter: WorkerSeconds | None = None
        self._end: float | None = None
        self.foreign_blocks = 0
        """DATA blocks with a block_id this model does not have (another run's, or a
        misconfigured switch): counted and skipped, so they never stop the PS."""

    def start(self, now: float) -> None:
        """Training starts: every worker is active, worker-seconds count from here."""
        if self.cfg.scaling == "boost":
            self.scheduler = BoostScheduler(self.cfg.workers, self.cfg.boost, seed=self.cfg.seed,
                                            start=now)
            self.meter = self.scheduler.meter
            self._set_active(self.cfg.workers)
        elif self.cfg.scaling == "auto":  # the pool starts small; the loop's autoscaler grows it
            self.set_workers(self.cfg.autoscale.start_workers, now)
        else:
            self.meter = WorkerSeconds(self.cfg.workers, now)
            self._set_active(self.cfg.workers)

    def set_workers(self, n: int, now: float) -> None:
        """``scaling="auto"``: ids 0..n-1 active from ``now``; worker-seconds follow."""
        if self.meter is None:
            self.meter = WorkerSeconds(n, now)
        else:
            self.meter.set(n, now)
        self._set_active(n)

    # -- the PS apply path (receiver thread) -----------------------------------------
    def apply(self, batch: DataBatch, current_version: int) -> None:
        """Apply one read's DATA blocks, directly or through the aggregator."""
        h, values = batch.headers, batch.values
        for i, (b, a, m) in enumerate(zip(h["block_id"].tolist(), h["agg_count"].tolist(),
                                          h["model_version"].tolist(), strict=True)):
            if b >= self.ps.num_blocks:
                self.foreign_blocks += 1
            elif self.aggregator is None:
                self.ps.apply_block(b, values[i], agg_count=a)
            else:
                for release in self.aggregator.offer(b, values[i], a, m, current_version):
                    self.ps.apply_block(release.block_id, release.gradient, release.lr_scale)

    # -- the main loop ------------------------------------------------------------------
    def tick(self, now: float | None = None) -> None:
        """Release the holds that expired; with decay scaling, follow ``d**k``."""
        if self.cfg.scaling == "decay" and self.meter is not None and self._end is None:
            b = self.cfg.boost
            k = self.ps.iterations // b.round_iterations
            if k != self.decay_k:
                self.decay_k = k
                workers = active_workers(b.decay**k, b.min_workers, self.cfg.workers)
                self.meter.set(workers, time.time() if now is None else now)
                self._set_active(workers)
        if self.aggregator is not None:
            for release in self.aggregator.poll(self.ps.model_version):
                self.ps.apply_block(release.block_id, release.gradient, release.lr_scale)

    def record_curvature(self, lambda_max: float, lambda_min: float, detector_s: float,
                         now: float, detector_cpu_s: float = 0.0) -> int:
        """One scheduler round from the probe's eigenvalues; returns the active workers."""
        if self.scheduler is None:
            raise RuntimeError("curvature reported without boost scaling")
        if self._end is not None:
            return self.scheduler.active
        row = self.scheduler.record(lambda_max, lambda_min, detector_s, now,
                                    detector_cpu_s=detector_cpu_s, iteration=self.ps.iterations)
        self._set_active(row.workers)
        return row.workers

    def finish(self, now: float) -> None:
        """Training ends: worker-seconds stop counting."""
        self._end = now

    def _set_active(self, n: int) -> None:
        # Ids 0..n-1: worker w lives in process w % P, so the active ones stay spread over
        # the processes.
        if self.active is not None:
            for w in range(self.cfg.workers):
                self.active[w] = 1 if w < n else 0

    # -- reporting ------------------------------------------------------------------------
    def stats(self, staleness_at_arrival: Sequence[int]) -> dict[str, Any]:
        """Flat summary keys (both policies, on or off) plus nested details."""
        arrival = distribution(Counter(int(d) for d in staleness_at_arrival))
        out: dict[str, Any] = {
            "aggregation": self.cfg.aggregation,
            "scaling": self.cfg.scaling,
            "foreign_blocks": self.foreign_blocks,
            "staleness_p50": arrival["p50"],
            "staleness_p90": arrival["p90"],
            "staleness_p99": arrival["p99"],
            "staleness_max": arrival["max"],
            "staleness_histogram": arrival["histogram"],
        }
        if self.aggregator is not None:
            agg = self.aggregator.stats()
            out.update({
                "held_blocks": agg["held_blocks"],
                "held_share": agg["held_share"],
                "pending_at_end": agg["pending_blocks"],
                "releases": agg["releases"],
                "ps_rounds": agg["rounds"],
                "staleness_threshold": agg["threshold"],
                "delta_max": agg["delta_max"],
                "mean_lr_scale": agg["mean_lr_scale"],
                "mean_hold_ms": agg["mean_wait_ms"],
                "applied_staleness": agg["applied_staleness"],
            })
        end = self._end
        if self.meter is not None and end is not None:
            t0 = self.meter.timeline[0][0]
            total = self.meter.total(end)
            out.update({
                "worker_seconds": total,
                "mean_active_workers": total / (end - t0) if end > t0 else math.nan,
                "final_active_workers": self.meter.active,
                "workers_over_time": [(round(t - t0, 3), w) for t, w in self.meter.timeline],
            })
        if self.scheduler is not None and end is not None:
            boost = self.scheduler.stats(end)
            out.update({
                "boost_rounds": boost["rounds"],
                "boost_restarts": boost["restarts"],
                "detector_overhead_share": boost["detector_overhead_share"],
                "detector_mean_ms": boost["detector_mean_ms"],
                "detector_mean_cpu_ms": boost["detector_mean_cpu_ms"],
                "boost_trace": [(round(r.time - self.meter.timeline[0][0], 3), r.ratio, r.score,
                                 r.workers) for r in self.scheduler.rounds],
            })
        return out
