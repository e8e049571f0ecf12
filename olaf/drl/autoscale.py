"""``--elastic auto``: a worker pool that sizes itself to the bottleneck toward the PS.

A general training platform scales by throughput alone: grow 1 → 4 → 16 while it rises,
hold while it stays within ±15 %, shrink when capacity idles. This stack also knows what
the network does with each worker's work, so the rule reads three signals measured over a
window of run time (simulated time on the virtual clock):

* ``rho``: the offered UPDATE rate over what the egress link toward the PS carries
  (DESIGN §7). Below 1 the link has room for more workers.
* ``waste``: the share of the workers' update blocks that never helped the PS: skipped by
  P_s, dropped full, dropped by reward, or never answered. Above ``waste_shrink`` the pool
  computes gradients the network throws away.
* ``applied_per_s``: blocks the PS applied per second, the throughput the steady phase
  holds.

and one about learning, ``progressing`` (the evaluation or the training return rose since
the previous window), so a warm-up does not grow a pool that does not learn.

The phases:

* **warm-up**: while rho < 1 and learning progresses, multiply the pool by ``growth``
  (1, 4, 16, ...), but never past the size the measured rho says would reach
  ``rho_high`` (rho grows with the workers), nor past the ceiling (``--workers``); the
  first window with rho ≥ 1 (or the pool at its maximum) ends it.
* **steady**: hold while rho stays within [``rho_low``, ``rho_high``] and the applied
  blocks/s within ``throughput_band`` of the reference taken when the phase began;
  shrink to the share of the pool that was not wasted when the waste exceeds
  ``waste_shrink``, and to the pool that would offer rho 1 when rho exceeds
  ``rho_high`` (a link that carries less than the pool offers queues and drops the rest,
  whichever mode the switch runs); grow back (×2, capped as in the warm-up) when the
  waste is below ``waste_grow`` and rho below ``rho_low``, but not within
  ``cooldown_windows`` of a shrink, so that a small pool on a noisy rho does not flip
  every window. A throughput that leaves the band without either is taken as the new
  reference.

Every decision has a reason in words; the loop writes it to timeline.csv. The policy is
pure (no clock, no processes): ``tests/test_autoscale.py`` drives it with synthetic
signals through each phase.
"""

from __future__ import annotations

import dataclasses
import math

WARMUP, STEADY = "warm-up", "steady"
MIN_WINDOW_S = 0.25
"""A window shorter than the senders' report period (olaf.drl.children.PROGRESS_PERIOD,
the virtual clock's TX_PERIOD_NS) would see no new sends, and read rho 0."""
GROW, HOLD, SHRINK = "grow", "hold", "shrink"


@dataclasses.dataclass(frozen=True)
class AutoscaleConfig:
    """The policy's thresholds (``--set autoscale.NAME=VALUE``); defaults in docs/platform.md."""

    start_workers: int = 1
    """The pool a run starts with (its ceiling is the run's ``--workers``)."""
    growth: int = 4
    """Warm-up factor per window: 1, 4, 16, ..."""
    min_workers: int = 1
    rho_low: float = 0.8
    rho_high: float = 1.25
    """The band around rho = 1 the steady phase holds in."""
    throughput_band: float = 0.15
    waste_shrink: float = 0.40
    waste_grow: float = 0.20
    window_s: float = 1.0
    """Run seconds between decisions (simulated seconds on the virtual clock), at least
    ``MIN_WINDOW_S``."""
    cooldown_windows: int = 2
    """Windows after a shrink in which the steady phase does not grow back."""

    def __post_init__(self) -> None:
        if not 1 <= self.min_workers <= self.start_workers:
            raise ValueError("autoscale needs 1 <= min_workers <= start_workers, got "
                             f"{self.min_workers}, {self.start_workers}")
        if self.growth < 2:
            raise ValueError(f"autoscale.growth must be >= 2, got {self.growth}")
        if not 0 < self.rho_low <= 1 <= self.rho_high:
            raise ValueError(f"autoscale needs 0 < rho_low <= 1 <= rho_high, got {self.rho_low}, "
                             f"{self.rho_high}")
        if not 0 <= self.waste_grow < self.waste_shrink <= 1:
            raise ValueError("autoscale needs 0 <= waste_grow < waste_shrink <= 1, got "
                             f"{self.waste_grow}, {self.waste_shrink}")
        if not 0 < self.throughput_band < 1:
            raise ValueError("autoscale.throughput_band must be in (0, 1)")
        if self.cooldown_windows < 0:
            raise ValueError(f"autoscale.cooldown_windows must be >= 0, got {self.cooldown_windows}")
        if self.window_s < MIN_WINDOW_S:
            raise ValueError(f"autoscale.window_s must be >= {MIN_WINDOW_S} (the worker "
                             f"processes report their senders every {MIN_WINDOW_S} s), got "
                             f"{self.window_s}")


@dataclasses.dataclass(frozen=True)
class Signals:
    """What the last window measured."""

    rho: float
    waste: float
    applied_per_s: float
    progressing: bool


@dataclasses.dataclass(frozen=True)
class Decision:
    workers: int
    action: str
    phase: str
    reason: str


class Autoscaler:
    """The policy's state: its phase and the steady phase's reference throughput."""

    def __init__(self, config: AutoscaleConfig, max_workers: int) -> None:
        if max_workers < config.start_workers:
            raise ValueError(f"autoscale: the ceiling of {max_workers} workers is below "
                             f"start_workers {config.start_workers}")
        self.config, self.max_workers = config, max_workers
        self.phase = WARMUP
        self.reference: float | None = None
        self.cooldown = 0
        """Windows left in which the steady phase may not grow back."""

    def decide(self, workers: int, s: Signals) -> Decision:
        """The pool for the next window, given ``workers`` now and the last window's signals."""
        c = self.config
        if self.phase == WARMUP:
            if s.rho >= 1 or workers >= self.max_workers:
                self.phase, self.reference = STEADY, s.applied_per_s
                why = (f"rho {s.rho:.2f} >= 1" if s.rho >= 1
                       else f"at the ceiling of {self.max_workers} workers")
                return self._steady(workers, s, prefix=f"warm-up ends ({why}); ")
            if not s.progressing:
                return Decision(workers, HOLD, WARMUP, f"warm-up waits: rho {s.rho:.2f}, no "
                                "learning progress in the last window")
            target = self._capped(workers, workers * c.growth, s.rho)
            if target > workers:
                return Decision(target, GROW, WARMUP, f"warm-up: rho {s.rho:.2f} < 1 and "
                                f"learning, x{c.growth} (capped at rho {c.rho_high:g})")
            self.phase, self.reference = STEADY, s.applied_per_s
            return Decision(workers, HOLD, STEADY, f"warm-up ends: {workers} workers would "
                            f"already offer rho {c.rho_high:g}")
        return self._steady(workers, s)

    def _steady(self, workers: int, s: Signals, prefix: str = "") -> Decision:
        c = self.config
        cooling, self.cooldown = self.cooldown > 0, max(0, self.cooldown - 1)
        if s.waste > c.waste_shrink:
            target = max(c.min_workers, math.ceil(workers * (1 - s.waste)))
            if target < workers:
                return self._shrink(target, f"{prefix}shrink: {s.waste:.0%} of the updates "
                                    f"wasted (> {c.waste_shrink:.0%})")
        if s.rho > c.rho_high:
            target = max(c.min_workers, math.floor(workers / s.rho))
            if target < workers:
                return self._shrink(target, f"{prefix}shrink: rho {s.rho:.2f} > {c.rho_high:g}, "
                                    f"{target} worker{'s' if target != 1 else ''} would offer about 1")
        if s.waste < c.waste_grow and s.rho < c.rho_low and not cooling:
            target = self._capped(workers, workers * 2, s.rho)
            if target > workers:
                self.reference = None
                return Decision(target, GROW, STEADY, f"{prefix}grow back: {s.waste:.0%} wasted, "
                                f"rho {s.rho:.2f} < {c.rho_low:g}")
        if self.reference is None or self.reference <= 0:
            self.reference = s.applied_per_s
            return Decision(workers, HOLD, STEADY, f"{prefix}hold: reference throughput "
                            f"{s.applied_per_s:,.0f} blocks/s")
        change = s.applied_per_s / self.reference - 1
        if abs(change) > c.throughput_band:
            self.reference = s.applied_per_s
            return Decision(workers, HOLD, STEADY, f"{prefix}hold: throughput {change:+.0%} "
                            f"outside ±{c.throughput_band:.0%}, new reference")
        return Decision(workers, HOLD, STEADY, f"{prefix}hold: rho {s.rho:.2f}, throughput "
                        f"{change:+.0%}, {s.waste:.0%} wasted")

    def _shrink(self, target: int, reason: str) -> Decision:
        self.reference = None  # the next window sets it at the new size
        self.cooldown = self.config.cooldown_windows
        return Decision(target, SHRINK, STEADY, reason)

    def _capped(self, workers: int, wanted: int, rho: float) -> int:
        """``wanted``, but no more than the run's ``max_workers`` nor the pool the measured rho says
        would offer ``rho_high`` (offered load is proportional to the workers)."""
        c = self.config
        by_rho = math.floor(workers * c.rho_high / rho) if rho > 0 else wanted
        return max(workers, min(wanted, self.max_workers, by_rho))


@dataclasses.dataclass(frozen=True)
class Counters:
    """Running totals at one decision, from which a window's ``Signals`` follow."""

    t: float
    """Run seconds."""
    sent: int
    skipped: int
    """Updates (whole gradients) the workers sent, and skipped by P_s."""
    outcomes: dict[str, int]
    """The switch's UPDATE blocks per outcome (DESIGN §3)."""
    applied: int
    """Blocks the PS applied."""
    score: float
    """The latest evaluation's return, else the training mean (NaN: neither yet)."""


WASTED_OUTCOMES = ("DROPPED_FULL", "DROPPED_REWARD", "DROPPED_INVALID")


def signals(before: Counters, now: Counters, blocks_per_update: int, block_bytes: int,
            egress_rate: float) -> Signals:
    """The window from ``before`` to ``now``: rho of what the pool generated (sent or
    skipped) over the egress link's bytes/s; the wasted share of its blocks (skipped,
    dropped full, by reward or as invalid, or never answered: sent but without an
    outcome at the switch); the PS's applied blocks/s; whether the score rose."""
    dt = now.t - before.t
    generated = (now.sent + now.skipped - before.sent - before.skipped) * blocks_per_update
    sent = (now.sent - before.sent) * blocks_per_update
    seen = sum(now.outcomes.values()) - sum(before.outcomes.values())
    dropped = sum(now.outcomes.get(o, 0) - before.outcomes.get(o, 0) for o in WASTED_OUTCOMES)
    wasted = (now.skipped - before.skipped) * blocks_per_update + dropped + max(0, sent - seen)
    return Signals(
        rho=generated * block_bytes / dt / egress_rate if dt > 0 and egress_rate > 0 else 0.0,
        waste=min(1.0, wasted / generated) if generated > 0 else 0.0,
        applied_per_s=(now.applied - before.applied) / dt if dt > 0 else 0.0,
        progressing=not math.isfinite(before.score) or now.score > before.score)
