"""Staleness-aware aggregation (olaf.drl.staleness) and IS truncation (olaf.drl.truncation)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from olaf.drl.staleness import (
    StalenessAwareAggregator,
    StalenessConfig,
    distribution,
    dynamic_threshold,
    staleness_scale,
    staleness_weighted_mean,
)
from olaf.drl.truncation import truncated_importance_weights, truncated_policy_loss

V = 4


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


# -- formulas ---------------------------------------------------------------------------


def test_dynamic_threshold_known_values() -> None:
    assert dynamic_threshold(10, 0.96, 0) == 10
    assert dynamic_threshold(10, 0.96, 1) == pytest.approx(9.6)
    assert dynamic_threshold(10, 0.96, 2) == pytest.approx(9.216)
    assert dynamic_threshold(10, 0.96, 10) == pytest.approx(6.648326360, rel=1e-9)
    assert dynamic_threshold(3, 0.5, 3) == pytest.approx(0.375)
    with pytest.raises(ValueError):
        dynamic_threshold(10, 0.96, -1)


def test_staleness_scale_is_inverse_square_root_and_one_when_fresh() -> None:
    got = staleness_scale(np.array([0, 1, 4, 9, 16, 2]))
    assert got == pytest.approx([1.0, 1.0, 0.5, 1 / 3, 0.25, 1 / math.sqrt(2)])
    with pytest.raises(ValueError):
        staleness_scale(-1)


def test_weighted_mean_counts_each_worker_gradient_with_its_learning_rate() -> None:
    # Block 0: one gradient of 1s at staleness 4 (weight 1/2); block 1: the mean of three
    # gradients of 3s at staleness 0 (weight 1). H = 4: (0.5 * 1 + 3 * 3) / 4 = 2.375.
    g = np.array([[1.0, 1.0], [3.0, 3.0]])
    got = staleness_weighted_mean(g, np.array([1, 3]), np.array([4, 0]))
    assert got == pytest.approx([2.375, 2.375])
    assert got.dtype == np.float32
    plain = staleness_weighted_mean(g, np.array([1, 3]), np.array([4, 0]), scale=False)
    assert plain == pytest.approx([2.5, 2.5])
    with pytest.raises(ValueError):
        staleness_weighted_mean(g, np.array([1, 0]), np.array([0, 0]))
    with pytest.raises(ValueError):
        staleness_weighted_mean(g, np.array([1]), np.array([0]))


def test_distribution_percentiles() -> None:
    from collections import Counter

    d = distribution(Counter({0: 50, 1: 40, 5: 9, 20: 1}))
    assert d["count"] == 100
    assert d["mean"] == pytest.approx((40 + 45 + 20) / 100)
    assert (d["p50"], d["p90"], d["p99"], d["max"]) == (0, 1, 5, 20)
    assert d["histogram"] == {"0": 50, "1": 40, "5": 9, "20": 1}
    assert distribution(Counter())["count"] == 0


# -- the aggregator ---------------------------------------------------------------------


def _agg(num_blocks: int = 2, **kw: object) -> tuple[StalenessAwareAggregator, FakeClock]:
    clock = FakeClock()
    cfg = StalenessConfig(**{"max_hold": 1.0, "max_pending": 4, **kw})
    return StalenessAwareAggregator(num_blocks, V, cfg, clock=clock), clock


def _ones(x: float) -> np.ndarray:
    return np.full(V, x, np.float32)


def _finish_round0(agg: StalenessAwareAggregator, version: int, stale: int) -> None:
    for b in range(agg.num_blocks):
        out = agg.offer(b, _ones(1), 1, version - stale, version)
        assert [r.reason for r in out] == ["warmup"]


def test_round_zero_releases_everything_and_fixes_delta_max() -> None:
    agg, _ = _agg()
    assert agg.threshold is None
    out = agg.offer(0, _ones(2), 1, model_version=7, current_version=10)
    assert len(out) == 1 and out[0].reason == "warmup" and out[0].round == 0
    # delta 3 -> the gradient as it came, with a step of alpha0/sqrt(3).
    assert out[0].gradient == pytest.approx(_ones(2))
    assert out[0].lr_scale == pytest.approx(1 / math.sqrt(3))
    assert agg.round == 0 and agg.delta_max is None
    agg.offer(0, _ones(1), 1, 10, 10)  # block 0 again: the round is not complete yet
    assert agg.round == 0
    agg.offer(1, _ones(1), 1, 5, 10)  # staleness 5: the largest of round 0
    assert agg.round == 1
    assert agg.delta_max == 5
    assert agg.threshold == pytest.approx(5 * 0.96)


def test_fresh_first_round_floors_delta_max() -> None:
    agg, _ = _agg()
    _finish_round0(agg, version=3, stale=0)
    assert agg.delta_max == 1.0
    assert agg.threshold == pytest.approx(0.96)


def test_stale_block_is_held_until_a_fresher_one_pulls_the_mean_below_beta() -> None:
    agg, clock = _agg()
    _finish_round0(agg, version=10, stale=4)  # delta_max 4, k = 1: beta = 3.84
    assert agg.threshold == pytest.approx(3.84)
    assert agg.offer(0, _ones(1), 1, model_version=4, current_version=10) == []  # delta 6
    assert agg.pending_blocks == 1 and agg.held_blocks == 1
    clock.t = 0.5
    out = agg.offer(0, _ones(3), 2, model_version=10, current_version=10)  # fresh, 2 updates
    # mean staleness (6 + 0) / 2 = 3 < 3.84 -> released; H = 3 worker gradients:
    # gradient (1 * 1 + 2 * 3) / 3, step scale (1/sqrt(6) + 2 * 1) / 3
    assert len(out) == 1
    r = out[0]
    assert (r.reason, r.block_id, r.blocks, r.updates, r.staleness) == ("threshold", 0, 2, 3, (6, 0))
    assert r.gradient == pytest.approx(_ones(7 / 3), rel=1e-6)
    assert r.lr_scale == pytest.approx((1 / math.sqrt(6) + 2) / 3, rel=1e-6)
    assert r.waited == pytest.approx(0.5)
    assert agg.pending_blocks == 0


def test_block_below_beta_is_released_at_once() -> None:
    agg, _ = _agg()
    _finish_round0(agg, version=10, stale=4)
    out = agg.offer(1, _ones(1), 1, model_version=7, current_version=10)  # delta 3 < 3.84
    assert [r.reason for r in out] == ["threshold"]
    assert agg.held_blocks == 0


def test_hold_is_bounded_in_time_and_in_size() -> None:
    agg, clock = _agg(max_hold=0.2, max_pending=3)
    _finish_round0(agg, version=10, stale=2)  # beta 1.92
    assert agg.offer(0, _ones(1), 1, 5, 10) == []
    clock.t = 0.1
    assert agg.poll(10) == []
    clock.t = 0.2
    out = agg.poll(12)  # version moved on while it waited: staleness taken at release
    assert [(r.reason, r.staleness) for r in out] == [("hold", (7,))]
    assert out[0].gradient == pytest.approx(_ones(1))
    assert out[0].lr_scale == pytest.approx(1 / math.sqrt(7), rel=1e-6)
    # Size bound: the third stale block releases the set.
    assert agg.offer(1, _ones(1), 1, 0, 12) == []
    assert agg.offer(1, _ones(1), 1, 0, 12) == []
    out = agg.offer(1, _ones(1), 1, 0, 12)
    assert [(r.reason, r.blocks) for r in out] == [("full", 3)]
    # An offer for one block also expires another block's overdue set.
    assert agg.offer(0, _ones(1), 1, 0, 12) == []
    clock.t = 1.0
    out = agg.offer(1, _ones(1), 1, 0, 12)
    assert [(r.reason, r.block_id) for r in out] == [("hold", 0)]
    assert [(r.reason, r.block_id) for r in agg.flush(12)] == [("flush", 1)]
    assert agg.pending_blocks == 0
    s = agg.stats()
    assert s["releases"] == {"warmup": 2, "threshold": 0, "full": 1, "hold": 2, "flush": 1}
    assert s["held_blocks"] == 5  # every offer after round 0 except the one that filled a set
    assert s["arrival_staleness"]["count"] == 8


def test_threshold_decays_with_rounds_so_later_blocks_must_be_fresher() -> None:
    agg, _ = _agg(num_blocks=1, max_pending=100)
    agg.offer(0, _ones(1), 1, 0, 3)  # round 0: delta_max 3
    released_at = []
    for k in range(1, 40):
        out = agg.offer(0, _ones(1), 1, model_version=98, current_version=100)  # delta 2
        if out:
            released_at.append(k)
    # 2 < 3 * 0.96**k holds while k <= 9 (3 * 0.96**9 = 2.077, 3 * 0.96**10 = 1.994);
    # afterwards nothing passes and only the size bound would release.
    assert released_at == list(range(1, 10))
    assert agg.round == 10
    assert agg.threshold == pytest.approx(3 * 0.96**10)


def test_bad_input_raises_and_changes_nothing() -> None:
    agg, _ = _agg()
    before = agg.stats()
    with pytest.raises(ValueError):
        agg.offer(2, _ones(1), 1, 0, 0)
    with pytest.raises(ValueError):
        agg.offer(0, np.ones(V + 1, np.float32), 1, 0, 0)
    with pytest.raises(ValueError):
        agg.offer(0, _ones(np.nan), 1, 0, 0)
    with pytest.raises(ValueError):
        agg.offer(0, _ones(1), 0, 0, 0)
    with pytest.raises(ValueError):
        agg.offer(0, _ones(1), 1, model_version=5, current_version=4)
    assert agg.stats() == before
    with pytest.raises(ValueError):
        StalenessConfig(decay=0)
    with pytest.raises(ValueError):
        StalenessConfig(max_pending=0)
    with pytest.raises(ValueError):
        StalenessAwareAggregator(0, V)


def test_plain_weighting_when_learning_rate_scaling_is_off() -> None:
    agg, _ = _agg(scale_learning_rate=False)
    out = agg.offer(0, _ones(2), 1, 0, 9)
    assert out[0].gradient == pytest.approx(_ones(2))
    assert out[0].lr_scale == 1.0
    assert agg.stats()["mean_lr_scale"] == 1.0


def test_staleness_scales_the_adam_step_not_the_gradient() -> None:
    """Adam is invariant to a constant gradient scale, so alpha0/sqrt(delta) only acts as a
    step size: the same gradients at staleness 4 move the weights half as far."""
    from olaf.drl.impact import ImpactConfig
    from olaf.drl.server import ParameterServer

    rng = np.random.default_rng(0)
    grads = [rng.normal(size=V).astype(np.float32) for _ in range(3)]
    moves = {}
    for delta in (0, 1, 4, 16):
        ps = ParameterServer(np.zeros(V, np.float32), ImpactConfig(learning_rate=1e-2, epochs=1), V)
        agg, _ = _agg(max_pending=1)
        for g in grads:
            for r in agg.offer(0, g, 1, model_version=100 - delta, current_version=100):
                ps.apply_block(r.block_id, r.gradient, r.lr_scale)
        moves[delta] = np.abs(ps.params).sum()
    assert moves[0] == pytest.approx(moves[1], rel=1e-6)
    assert moves[4] == pytest.approx(moves[0] / 2, rel=1e-5)
    assert moves[16] == pytest.approx(moves[0] / 4, rel=1e-5)
    # The cancellation the old gradient weighting suffered: half the gradient, same step.
    half = ParameterServer(np.zeros(V, np.float32), ImpactConfig(learning_rate=1e-2, epochs=1), V)
    for g in grads:
        half.apply_block(0, g / 2)
    assert np.abs(half.params).sum() == pytest.approx(moves[0], rel=1e-4)


# -- truncation -------------------------------------------------------------------------


def test_truncated_weights_are_the_ratio_capped_at_rho() -> None:
    mu = torch.log(torch.tensor([0.5, 0.5, 0.2, 0.9]))
    pi = torch.log(torch.tensor([0.25, 0.5, 0.6, 0.0009]))
    c = truncated_importance_weights(pi, mu)
    assert c == pytest.approx(torch.tensor([0.5, 1.0, 1.0, 0.001]), rel=1e-5)
    c2 = truncated_importance_weights(pi, mu, rho=2.0)
    assert c2 == pytest.approx(torch.tensor([0.5, 1.0, 2.0, 0.001]), rel=1e-5)


def test_truncated_weights_take_the_minimum_over_policy_versions() -> None:
    mu = torch.log(torch.tensor([0.5, 0.5, 0.5]))
    a = torch.log(torch.tensor([0.4, 0.9, 0.1]))
    b = torch.log(torch.tensor([0.3, 0.45, 0.6]))
    c = truncated_importance_weights([a, b], mu)
    assert c == pytest.approx(torch.tensor([0.6, 0.9, 0.2]), rel=1e-5)


def test_truncated_weights_stay_in_bounds_for_random_inputs() -> None:
    g = torch.Generator().manual_seed(0)
    for rho in (0.5, 1.0, 3.0):
        mu = torch.log_softmax(torch.randn(500, 3, generator=g), -1)[:, 0]
        versions = [torch.log_softmax(torch.randn(500, 3, generator=g) * 3, -1)[:, 0]
                    for _ in range(3)]
        c = truncated_importance_weights(versions, mu, rho)
        assert (c >= 0).all() and (c <= rho).all()
        assert (c == rho).any() and (c < rho).any()
        assert not c.requires_grad


def test_on_policy_truncated_loss_is_the_a2c_loss_with_the_same_gradient() -> None:
    torch.manual_seed(0)
    logits = torch.randn(16, 3, requires_grad=True)
    actions = torch.randint(0, 3, (16,))
    adv = torch.randn(16)
    logp = torch.distributions.Categorical(logits=logits).log_prob(actions)
    a2c = -(logp * adv).mean()
    (g_a2c,) = torch.autograd.grad(a2c, logits, retain_graph=True)
    trunc = truncated_policy_loss(logp, logp.detach(), adv)
    (g_trunc,) = torch.autograd.grad(trunc, logits)
    assert trunc.item() == pytest.approx(a2c.item())
    assert torch.allclose(g_trunc, g_a2c)


def test_off_policy_loss_weights_but_does_not_differentiate_the_ratio() -> None:
    logp = torch.log(torch.tensor([0.2, 0.8])).requires_grad_(True)
    mu = torch.log(torch.tensor([0.4, 0.4]))
    adv = torch.tensor([1.0, -2.0])
    loss = truncated_policy_loss(logp, mu, adv)
    # c = [0.5, 1.0]: loss = -(0.5*log .2*1 + 1*log .8*-2)/2
    assert loss.item() == pytest.approx(-(0.5 * math.log(0.2) - 2 * math.log(0.8)) / 2, rel=1e-6)
    (grad,) = torch.autograd.grad(loss, logp)
    assert grad == pytest.approx(torch.tensor([-0.25, 1.0]))


def test_truncation_rejects_bad_input() -> None:
    x = torch.zeros(3)
    with pytest.raises(ValueError):
        truncated_importance_weights(x, x, rho=0)
    with pytest.raises(ValueError):
        truncated_importance_weights(torch.zeros(2), x)
    with pytest.raises(ValueError):
        truncated_importance_weights([], x)
    with pytest.raises(ValueError):
        truncated_importance_weights(torch.tensor([0.0, math.nan, 0.0]), x)
    with pytest.raises(ValueError):
        truncated_policy_loss(x, x, torch.zeros(2))
