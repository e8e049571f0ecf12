"""The parameter server's step (olaf.drl.server): what a merged block is worth (mean or
sum, ``PsConfig.aggregate``) under each optimizer, checked against the arithmetic."""

from __future__ import annotations

import argparse

import numpy as np
import pytest

from olaf.drl.config import RunConfig
from olaf.drl.impact import ImpactConfig
from olaf.drl.policies import RunPolicies
from olaf.drl.server import ParameterServer, PsConfig
from tests.batches import data_batch

V = 4
G = np.array([0.5, -1.0, 2.0, 0.25], np.float32)


def server(**ps: object) -> ParameterServer:
    # One gradient per update (epochs 1): ps.optimizer=auto is Adam at learning_rate.
    return ParameterServer(np.zeros(V, np.float32), ImpactConfig(learning_rate=0.1, epochs=1), V,
                           PsConfig(**ps))


@pytest.mark.parametrize(("aggregate", "factor"), [("mean", 1.0), ("sum", 2.0)])
def test_sgd_moves_an_agg_count_2_block_by_its_mean_or_its_sum(aggregate: str, factor: float) -> None:
    ps = server(optimizer="sgd", aggregate=aggregate)
    # Through the PS's DATA path: the receiver hands over the mean of the 2 merged updates.
    RunPolicies(RunConfig(values=V, ps=ps.ps), ps).apply(data_batch([0], G[None], [2], [0]), 0)
    np.testing.assert_allclose(ps.params, -0.1 * factor * G, rtol=1e-6)


def test_sgd_momentum_accumulates() -> None:
    ps = server(optimizer="sgd", momentum=0.5)
    ps.apply_block(0, G)
    ps.apply_block(0, G)
    np.testing.assert_allclose(ps.params, -0.1 * G - 0.1 * 1.5 * G, rtol=1e-6)


def test_adam_is_blind_to_the_scale_so_sum_buys_no_progress() -> None:
    mean, total = server(aggregate="mean"), server(aggregate="sum")
    mean.apply_block(0, G, agg_count=4)
    total.apply_block(0, G, agg_count=4)
    # Adam's first step is lr * g / |g| per parameter, whatever the scale.
    np.testing.assert_allclose(mean.params, -0.1 * np.sign(G), rtol=1e-4)
    np.testing.assert_allclose(total.params, mean.params, rtol=1e-4)  # but for eps


def test_rmsprop_is_a3c_s_shared_rmsprop() -> None:
    ps = server(optimizer="rmsprop", aggregate="sum", alpha=0.99, rmsprop_eps=0.1)
    ps.apply_block(0, G, agg_count=2)
    g = 2 * G
    np.testing.assert_allclose(ps.params, -0.1 * g / (np.sqrt(0.01 * g * g) + 0.1), rtol=1e-5)


def test_auto_applies_a_gradient_with_adam_and_a_delta_with_sgd_at_delta_rate() -> None:
    gradient = server()
    assert (gradient.optimizer, gradient.learning_rate) == ("adam", 0.1)
    learner = ImpactConfig(learning_rate=0.1, epochs=4, delta_rate=0.5)
    delta = ParameterServer(np.zeros(V, np.float32), learner, V, PsConfig())
    assert (delta.optimizer, delta.learning_rate) == ("sgd", 0.5)
    delta.apply_block(0, G, agg_count=2)  # the mean of two deltas, half of it applied
    np.testing.assert_allclose(delta.params, -0.5 * G, rtol=1e-6)
    # Set by hand, the PS's optimizer and step win over the learner's.
    adam = ParameterServer(np.zeros(V, np.float32), learner, V, PsConfig(optimizer="adam"))
    assert (adam.optimizer, adam.learning_rate) == ("adam", 0.1)
    sgd = ParameterServer(np.zeros(V, np.float32), learner, V, PsConfig(learning_rate=1.0))
    assert (sgd.optimizer, sgd.learning_rate) == ("sgd", 1.0)


def test_the_delta_share_falls_with_the_square_root_of_the_workers() -> None:
    # LUNAR_LANDER's share is 0.5 at 8 workers: 32 take 0.25, 2 would take 1 (the cap).
    learner = ImpactConfig(epochs=4, delta_rate=0.5, delta_rate_workers=8)
    assert [learner.delta_share(n) for n in (8, 32, 128, 2, 1)] == pytest.approx(
        [0.5, 0.25, 0.125, 1.0, 1.0])
    assert ImpactConfig(epochs=4, delta_rate=0.5).delta_share(32) == 0.5  # 0: whatever N
    with pytest.raises(ValueError, match="delta_rate_workers"):
        ImpactConfig(delta_rate_workers=-1)


def test_a_runs_parameter_server_applies_the_share_of_its_number_of_workers() -> None:
    import torch

    from olaf.drl.impact import LUNAR_LANDER
    from olaf.drl.learners import parameter_server

    model = torch.nn.Linear(2, 2)
    for workers, share in ((8, 0.5), (32, 0.25)):
        cfg = RunConfig(env_id="LunarLander-v3", workers=workers, impact=LUNAR_LANDER)
        ps = parameter_server(cfg, model)
        assert (ps.optimizer, ps.learning_rate) == ("sgd", pytest.approx(share))
    # ps.learning_rate set by hand still wins.
    cfg = RunConfig(env_id="LunarLander-v3", workers=32, impact=LUNAR_LANDER,
                    ps=PsConfig(learning_rate=0.5))
    assert parameter_server(cfg, model).learning_rate == 0.5


def test_bad_ps_settings_and_agg_counts_are_refused() -> None:
    with pytest.raises(ValueError, match="ps.aggregate"):
        PsConfig(aggregate="median")
    with pytest.raises(ValueError, match="ps.optimizer"):
        PsConfig(optimizer="lion")
    ps = server()
    with pytest.raises(ValueError, match="agg_count"):
        ps.apply_block(0, G, agg_count=0)
    assert ps.blocks_applied == 0 and not ps.params.any()


@pytest.mark.parametrize(("merge_scale", "factor"), [("none", 1.0), ("sqrt", 2.0), ("linear", 4.0)])
def test_merge_scale_multiplies_the_step_of_a_merged_block(merge_scale: str, factor: float) -> None:
    """ps.merge_scale (issue 49): a block of agg_count 4 steps with the learning rate times
    1, sqrt(4) = 2 or 4; under SGD (a parameter delta's optimizer) and under Adam, whose
    first step is lr * sign(g) whatever the gradient's scale; a block of 1 is unchanged.
    Through the PS's DATA path for SGD, as a run applies it."""
    sgd = server(optimizer="sgd", merge_scale=merge_scale)
    RunPolicies(RunConfig(values=V, ps=sgd.ps), sgd).apply(data_batch([0], G[None], [4], [0]), 0)
    np.testing.assert_allclose(sgd.params, -0.1 * factor * G, rtol=1e-6)
    adam = server(merge_scale=merge_scale)
    adam.apply_block(0, G, agg_count=4)
    np.testing.assert_allclose(adam.params, -0.1 * factor * np.sign(G), rtol=1e-4)
    single = server(optimizer="sgd", merge_scale=merge_scale)
    single.apply_block(0, G, agg_count=1)
    np.testing.assert_allclose(single.params, -0.1 * G, rtol=1e-6)


def test_merge_scale_is_set_with_set_ps_and_validated() -> None:
    from olaf.drl.cli_args import add_run_arguments, config_from_args

    with pytest.raises(ValueError, match="ps.merge_scale"):
        PsConfig(merge_scale="cubic")
    parser = argparse.ArgumentParser()
    add_run_arguments(parser, duration=10.0)
    cfg = config_from_args(parser.parse_args(["--set", "ps.merge_scale=sqrt"]), mode="olaf",
                           seed=0, target=None)
    assert cfg.ps.merge_scale == "sqrt" and RunConfig().ps.merge_scale == "none"


def test_set_ps_items_reach_the_run_config() -> None:
    from olaf.drl.cli_args import add_run_arguments, config_from_args

    parser = argparse.ArgumentParser()
    add_run_arguments(parser, duration=10.0)
    args = parser.parse_args(["--set", "ps.aggregate=sum", "--set", "ps.optimizer=sgd",
                              "--set", "ps.learning_rate=0.5", "--set", "algo.clip=0.3"])
    cfg = config_from_args(args, mode="olaf", seed=0, target=None)
    assert cfg.ps == PsConfig(aggregate="sum", optimizer="sgd", learning_rate=0.5)
    assert cfg.impact.clip == 0.3
    bad = parser.parse_args(["--set", "ps.aggregate=median"])
    with pytest.raises(SystemExit) as exc:
        config_from_args(bad, mode="olaf", seed=0, target=None)
    assert exc.value.code == 2
