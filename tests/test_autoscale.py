"""The automatic elastic policy (olaf/drl/autoscale.py) driven by synthetic signals
through each of its phases."""

from __future__ import annotations

import pytest

from olaf.drl.autoscale import GROW, HOLD, SHRINK, STEADY, WARMUP, AutoscaleConfig, Autoscaler, Signals


def sig(rho: float, waste: float = 0.0, applied: float = 1000.0, progressing: bool = True) -> Signals:
    return Signals(rho=rho, waste=waste, applied_per_s=applied, progressing=progressing)


def test_warm_up_grows_exponentially_while_the_link_has_room_and_learning_progresses() -> None:
    a = Autoscaler(AutoscaleConfig(max_workers=128))
    d = a.decide(1, sig(0.01))
    assert (d.workers, d.action, d.phase) == (4, GROW, WARMUP)
    assert a.decide(4, sig(0.04)).workers == 16
    assert a.decide(16, sig(0.16)).workers == 64
    # no progress: the warm-up waits instead of growing a pool that does not learn
    d = a.decide(64, sig(0.64, progressing=False))
    assert (d.workers, d.action) == (64, HOLD) and "waits" in d.reason


def test_warm_up_never_overshoots_the_rho_band_nor_max_workers() -> None:
    a = Autoscaler(AutoscaleConfig(max_workers=128))
    d = a.decide(16, sig(0.5))  # x4 would be rho 2: capped where rho would reach 1.25
    assert d.workers == 40 and d.action == GROW
    b = Autoscaler(AutoscaleConfig(max_workers=20))
    assert b.decide(16, sig(0.1)).workers == 20


def test_rho_at_one_ends_the_warm_up_and_the_steady_phase_holds_within_the_band() -> None:
    a = Autoscaler(AutoscaleConfig())
    d = a.decide(32, sig(1.05, applied=4000))
    assert (d.workers, d.action, d.phase) == (32, HOLD, STEADY) and "warm-up ends" in d.reason
    d = a.decide(32, sig(1.1, applied=4400))  # +10 %: within ±15 %
    assert (d.workers, d.action) == (32, HOLD) and "+10%" in d.reason
    d = a.decide(32, sig(1.1, applied=5000))  # +25 %: a new reference, still a hold
    assert d.action == HOLD and "new reference" in d.reason and a.reference == 5000


def test_waste_above_the_threshold_shrinks_to_the_useful_share_and_low_waste_grows_back() -> None:
    a = Autoscaler(AutoscaleConfig(max_workers=128))
    a.decide(128, sig(4.0))  # rho 4: steady at once
    d = a.decide(128, sig(4.0, waste=0.75))  # a FIFO at rho 4 drops three quarters
    assert (d.workers, d.action) == (32, SHRINK) and "75%" in d.reason
    d = a.decide(32, sig(1.0, waste=0.30))  # under 40 %: no shrink
    assert d.action == HOLD
    d = a.decide(32, sig(0.5, waste=0.05))  # little waste and room on the link: grow back
    assert (d.workers, d.action) == (64, GROW) and "grow back" in d.reason
    assert a.decide(64, sig(0.5, waste=0.95)).workers >= AutoscaleConfig().min_workers


def test_settings_are_checked() -> None:
    for bad in ({"growth": 1}, {"min_workers": 0}, {"start_workers": 200}, {"rho_low": 1.5},
                {"waste_grow": 0.5, "waste_shrink": 0.4}, {"window_s": 0}):
        with pytest.raises(ValueError):
            AutoscaleConfig(**bad)
