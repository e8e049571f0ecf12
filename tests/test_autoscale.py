"""The automatic elastic policy (olaf/drl/autoscale.py) driven by synthetic signals
through each of its phases."""

from __future__ import annotations

import pytest

from olaf.drl.autoscale import GROW, HOLD, SHRINK, STEADY, WARMUP, AutoscaleConfig, Autoscaler, Signals


def sig(rho: float, waste: float = 0.0, applied: float = 1000.0, progressing: bool = True) -> Signals:
    return Signals(rho=rho, waste=waste, applied_per_s=applied, progressing=progressing)


def test_warm_up_grows_exponentially_while_the_link_has_room_and_learning_progresses() -> None:
    a = Autoscaler(AutoscaleConfig(), 128)
    d = a.decide(1, sig(0.01))
    assert (d.workers, d.action, d.phase) == (4, GROW, WARMUP)
    assert a.decide(4, sig(0.04)).workers == 16
    assert a.decide(16, sig(0.16)).workers == 64
    # no progress: the warm-up waits instead of growing a pool that does not learn
    d = a.decide(64, sig(0.64, progressing=False))
    assert (d.workers, d.action) == (64, HOLD) and "waits" in d.reason


def test_warm_up_never_overshoots_the_rho_band_nor_max_workers() -> None:
    a = Autoscaler(AutoscaleConfig(), 128)
    d = a.decide(16, sig(0.5))  # x4 would be rho 2: capped where rho would reach 1.25
    assert d.workers == 40 and d.action == GROW
    b = Autoscaler(AutoscaleConfig(), 20)
    assert b.decide(16, sig(0.1)).workers == 20


def test_rho_at_one_ends_the_warm_up_and_the_steady_phase_holds_within_the_band() -> None:
    a = Autoscaler(AutoscaleConfig(), 128)
    d = a.decide(32, sig(1.05, applied=4000))
    assert (d.workers, d.action, d.phase) == (32, HOLD, STEADY) and "warm-up ends" in d.reason
    d = a.decide(32, sig(1.1, applied=4400))  # +10 %: within ±15 %
    assert (d.workers, d.action) == (32, HOLD) and "+10%" in d.reason
    d = a.decide(32, sig(1.1, applied=5000))  # +25 %: a new reference, still a hold
    assert d.action == HOLD and "new reference" in d.reason and a.reference == 5000


def test_waste_above_the_threshold_shrinks_to_the_useful_share_and_low_waste_grows_back() -> None:
    a = Autoscaler(AutoscaleConfig(cooldown_windows=0), 128)
    a.decide(128, sig(1.0))  # rho 1: steady at once
    d = a.decide(128, sig(1.2, waste=0.75))  # most of what the pool sends is thrown away
    assert (d.workers, d.action) == (32, SHRINK) and "75%" in d.reason
    d = a.decide(32, sig(1.0, waste=0.30))  # under 40 %: no shrink
    assert d.action == HOLD
    d = a.decide(32, sig(0.5, waste=0.05))  # little waste and room on the link: grow back
    assert (d.workers, d.action) == (64, GROW) and "grow back" in d.reason
    assert a.decide(64, sig(0.5, waste=0.95)).workers >= AutoscaleConfig().min_workers


def test_rho_above_the_band_shrinks_to_the_pool_that_offers_one_then_a_cooldown_holds() -> None:
    a = Autoscaler(AutoscaleConfig(), 128)  # cooldown_windows = 2
    d = a.decide(128, sig(4.0))  # the warm-up ends over the band: shrink at once
    assert (d.workers, d.action, d.phase) == (32, SHRINK, STEADY) and "rho 4.00 > 1.25" in d.reason
    assert a.decide(32, sig(1.2)).action == HOLD  # inside the band
    small = Autoscaler(AutoscaleConfig(), 4)
    small.decide(2, sig(1.0))
    d = small.decide(2, sig(1.3))  # two workers at rho 1.3: one would offer about 0.65
    assert (d.workers, d.action) == (1, SHRINK)
    # one worker leaves the link idle, but for two windows the pool does not grow back ...
    assert [small.decide(1, sig(0.6)).action for _ in range(2)] == [HOLD, HOLD]
    # ... then it does, capped where rho would reach 1.25
    d = small.decide(1, sig(0.6))
    assert (d.workers, d.action) == (2, GROW)
    assert Autoscaler(AutoscaleConfig(min_workers=2, start_workers=2), 8).decide(2, sig(3.0)).workers == 2


def test_settings_are_checked() -> None:
    for bad in ({"growth": 1}, {"min_workers": 0}, {"min_workers": 3, "start_workers": 2},
                {"rho_low": 1.5}, {"waste_grow": 0.5, "waste_shrink": 0.4}, {"window_s": 0.1},
                {"cooldown_windows": -1}):
        with pytest.raises(ValueError):
            AutoscaleConfig(**bad)
    with pytest.raises(ValueError):
        Autoscaler(AutoscaleConfig(start_workers=4), 2)


def test_a_windows_signals_follow_from_the_running_totals() -> None:
    from olaf.drl.autoscale import Counters, signals

    before = Counters(t=10.0, sent=100, skipped=20, outcomes={"ENQUEUED": 3000, "DROPPED_FULL": 500},
                      applied=2000, score=100.0)
    now = Counters(t=12.0, sent=140, skipped=30, outcomes={"ENQUEUED": 3900, "DROPPED_FULL": 800,
                                                           "DROPPED_REWARD": 100}, applied=3000,
                   score=90.0)
    s = signals(before, now, blocks_per_update=40, block_bytes=292, egress_rate=292 * 1000)
    # 50 updates of 40 blocks generated in 2 s, against 1,000 blocks/s of link: rho 1
    assert s.rho == pytest.approx(1.0)
    # 10 skipped (400 blocks), 300 full + 100 by reward, 1,600 sent of which 1,300 had an
    # outcome (300 unanswered): 1,100 of 2,000 blocks wasted
    assert s.waste == pytest.approx(1100 / 2000)
    assert s.applied_per_s == pytest.approx(500)
    assert not s.progressing  # the score fell
    first = Counters(t=0.0, sent=0, skipped=0, outcomes={}, applied=0, score=float("nan"))
    assert signals(first, before, 40, 292, 292e3).progressing


def test_a_resumed_run_goes_on_with_the_pool_its_checkpoint_recorded() -> None:
    import math

    from olaf.drl.checkpoint import config_from_dict, config_to_dict, timeline_row
    from olaf.drl.config import RunConfig
    from olaf.drl.core import TrainingLoop
    from olaf.drl.results import RunResult

    cfg = RunConfig(workers=16, scaling="auto", autoscale=AutoscaleConfig(window_s=2.0))
    assert config_from_dict(RunConfig, config_to_dict(cfg)).autoscale.window_s == 2.0
    result = RunResult(cfg, num_parameters=10, num_blocks=1)
    row = {"elapsed": 5.0, "env_steps": 1000, "episodes": 3, "mean_return": 20.0,
           "aom_ms": math.nan, "occupied": 0, "capacity": 64, "outcomes": {}, "model_version": 3,
           "blocks_applied": 30, "threshold": None, "updates_sent": 10, "updates_skipped": 0,
           "active_workers": 6, "scale_action": "grow", "scale_reason": "warm-up"}
    result.timeline = [timeline_row(row)]

    class Backend:
        changes: list[int] = []

        def set_workers(self, n: int) -> None:
            self.changes.append(n)

        def now(self) -> float:
            raise StopIteration  # stop the loop right after its start

    loop = TrainingLoop(cfg, result, Backend(), 0.0)  # type: ignore[arg-type]
    assert loop.pool == 6 and loop.autoscaler is not None and loop.autoscaler.phase == STEADY
    with pytest.raises(StopIteration):
        loop.run()
    assert Backend.changes == [6]
