"""The IMPACT learner: V-trace, the clipped surrogate, separate clipping, config, learning."""

from __future__ import annotations

import argparse
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from olaf.algorithm import Rollout
from olaf.drl.impact import (
    LUNAR_LANDER,
    ImpactConfig,
    ImpactWorker,
    clip_grad_norms,
    clipped_surrogate,
    vtrace,
    vtrace_targets,
)
from olaf.drl.learners import algo_config
from olaf.drl.model import ActorCritic
from tests.inproc_training import train_round_robin

ROOT = Path(__file__).resolve().parents[1]


def _reference_vtrace(log_rhos, discounts, rewards, values, bootstrap, rho_bar, c_bar, lam):
    """IMPALA eq. 1 written as its sum, one (time, env) at a time, in float64:
    v_s = V(x_s) + sum_{t>=s} (prod_{i<t} discount_i) (prod_{s<=i<t} c_i) delta_t."""
    T, N = rewards.shape
    rhos = np.exp(log_rhos)
    nxt = np.concatenate([values[1:], bootstrap[None]])
    delta = np.minimum(rho_bar, rhos) * (rewards + discounts * nxt - values)
    c = lam * np.minimum(c_bar, rhos)
    vs = np.zeros((T, N))
    for n in range(N):
        for s in range(T):
            total, weight = 0.0, 1.0
            for t in range(s, T):
                total += weight * delta[t, n]
                weight *= discounts[t, n] * c[t, n]
            vs[s, n] = values[s, n] + total
    next_vs = np.concatenate([vs[1:], bootstrap[None]])
    return vs, rewards + discounts * next_vs - values


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_vtrace_matches_the_reference_on_random_data(seed: int) -> None:
    rng = np.random.default_rng(seed)
    T, N = 9, 3
    log_rhos = rng.normal(0, 0.7, (T, N))
    discounts = 0.97 * (rng.random((T, N)) > 0.2)  # some episode ends
    rewards = rng.normal(size=(T, N))
    values = rng.normal(size=(T, N))
    bootstrap = rng.normal(size=N)
    for rho_bar, c_bar, lam in ((1.0, 1.0, 1.0), (2.0, 0.5, 0.9)):
        want_vs, want_adv = _reference_vtrace(log_rhos, discounts, rewards, values, bootstrap,
                                              rho_bar, c_bar, lam)
        got_vs, got_adv = vtrace(*(torch.tensor(a) for a in (log_rhos, discounts, rewards, values,
                                                            bootstrap)),
                                 rho_bar=rho_bar, c_bar=c_bar, lam=lam)
        np.testing.assert_allclose(got_vs.numpy(), want_vs, rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(got_adv.numpy(), want_adv, rtol=1e-10, atol=1e-10)


def test_on_policy_vtrace_is_the_n_step_return() -> None:
    """mu == pi, rho_bar = c_bar = lambda = 1: v_s is the discounted return to the end of
    the rollout, bootstrapped with V(x_T), cut where an episode ended."""
    rng = np.random.default_rng(5)
    T, gamma = 7, 0.9
    rewards = rng.normal(size=(T, 1))
    values = rng.normal(size=(T, 1))
    bootstrap = np.array([2.5])
    done = np.zeros((T, 1), bool)
    done[3] = True
    discounts = gamma * ~done
    vs, _ = vtrace(torch.zeros(T, 1, dtype=torch.float64), torch.tensor(discounts),
                   torch.tensor(rewards), torch.tensor(values), torch.tensor(bootstrap))
    expected = np.zeros(T)
    running = bootstrap[0]
    for t in range(T - 1, -1, -1):
        running = rewards[t, 0] + discounts[t, 0] * running
        expected[t] = running
    np.testing.assert_allclose(vs.numpy()[:, 0], expected, rtol=1e-12)
    assert expected[3] == rewards[3, 0]  # the episode ended there: nothing flows back


def _surrogate_grad(ratio: float, advantage: float, clip: float = 0.2) -> float:
    log_pi = torch.tensor([np.log(ratio)], dtype=torch.float64, requires_grad=True)
    loss = clipped_surrogate(log_pi, torch.zeros(1, dtype=torch.float64),
                             torch.tensor([advantage], dtype=torch.float64), clip)
    loss.backward()
    return float(log_pi.grad[0])


def test_a_truncated_episode_is_bootstrapped_only_when_configured() -> None:
    """One environment, two steps, the time limit cutting the first: its on-policy
    target is r_0 + gamma V(final) with bootstrapping, r_0 alone without, and the step
    after it is untouched either way (the new episode's own one-step target)."""
    torch.manual_seed(0)
    model = ActorCritic(obs_dim=3, n_actions=2, hidden=8)
    obs = np.random.default_rng(0).normal(size=(2, 1, 3)).astype(np.float32)
    final, last = np.ones(3, np.float32), np.full((1, 3), 2.0, np.float32)
    with torch.no_grad():
        logp = model.distribution(model(torch.from_numpy(obs))[0]).log_prob(torch.zeros(2, 1))
        v_final = float(model.value(torch.from_numpy(final)))
        v_last = float(model.value(torch.from_numpy(last)))
    rollout = Rollout(obs, np.zeros((2, 1), np.int64), logp.numpy(), np.array([[1.0], [2.0]], np.float32),
                      np.zeros((2, 1), bool), np.array([[True], [False]]), {(0, 0): final}, last)
    cfg = replace(ImpactConfig(), vtrace_lambda=0.0)
    gamma = cfg.gamma
    vs, _, _ = vtrace_targets(model, rollout, cfg)
    assert vs[0, 0] == pytest.approx(1.0 + gamma * v_final, rel=1e-5)
    assert vs[1, 0] == pytest.approx(2.0 + gamma * v_last, rel=1e-5)
    vs, _, _ = vtrace_targets(model, rollout, replace(cfg, bootstrap_truncated=False))
    assert vs[0, 0] == pytest.approx(1.0, rel=1e-5)
    assert vs[1, 0] == pytest.approx(2.0 + gamma * v_last, rel=1e-5)


def test_clipped_surrogate_gradient_is_zero_outside_the_clip_range() -> None:
    # Where the clip binds (the ratio already moved far enough in the advantage's favour)
    # the gradient is exactly zero ...
    assert _surrogate_grad(1.5, +1.0) == 0.0
    assert _surrogate_grad(0.5, -1.0) == 0.0
    # ... inside the range it is -r * A (d r / d log pi = r) ...
    assert _surrogate_grad(1.1, +2.0) == pytest.approx(-1.1 * 2.0)
    assert _surrogate_grad(0.9, -2.0) == pytest.approx(0.9 * 2.0)
    # ... and a step that made things worse is never clipped (PPO's pessimistic min).
    assert _surrogate_grad(0.5, +1.0) == pytest.approx(-0.5)
    assert _surrogate_grad(1.5, -1.0) == pytest.approx(1.5)


def test_actor_and_critic_gradients_are_clipped_separately() -> None:
    model = ActorCritic(4, 2, 8)
    for p in model.policy.parameters():
        p.grad = torch.full_like(p, 0.01)
    for p in model.value.parameters():
        p.grad = torch.full_like(p, 10.0)

    def norm(params) -> float:
        return float(torch.linalg.vector_norm(torch.cat([p.grad.reshape(-1) for p in params])))

    actor_before = norm(model.policy.parameters())
    a, c = clip_grad_norms(model, actor_max=0.5, critic_max=1.0)
    assert a == pytest.approx(actor_before, rel=1e-5) and c > 1.0
    # The small actor gradient is untouched (a joint clip would have shrunk it by the
    # critic's norm); the critic is cut to its own bound.
    assert norm(model.policy.parameters()) == pytest.approx(actor_before, rel=1e-5)
    assert norm(model.value.parameters()) == pytest.approx(1.0, rel=1e-5)


def test_local_epochs_send_the_delta_to_improved_weights_and_act_with_the_ps_s() -> None:
    from olaf.drl.impact import impact_loss

    torch.manual_seed(0)
    cfg = ImpactConfig(envs_per_worker=4, rollout_steps=32, epochs=4, minibatches=4,
                       local_learning_rate=1e-3)
    worker = ImpactWorker("CartPole-v1", 0, cfg, seed=0)
    try:
        theta = worker.model.flat_parameters()
        worker.load_weights(theta, 3)
        update = worker.rollout()
        # The weights the worker acts with are still the PS's; the update is theta - theta'.
        np.testing.assert_array_equal(worker.model.flat_parameters(), theta)
        assert update.model_version == 3 and np.isfinite(update.flat).all()
        assert np.linalg.norm(update.flat) > 0 and update.norm == pytest.approx(
            float(np.linalg.norm(update.flat)))
        # What a PS with SGD at learning rate 1 moves to: the locally improved weights, whose
        # surrogate on the same rollout is lower than theta's.
        batch = worker.experience  # the rollout is gone; score on a fresh one at theta
        rollout = batch.collect(worker.model).batch
        before, _, _ = impact_loss(worker.model, rollout, cfg)
        worker.load_weights(theta - update.flat, 4)
        after, _, _ = impact_loss(worker.model, rollout, cfg)
        assert after.item() < before.item()
        # One epoch: the gradient of one loss, as before.
        one = ImpactWorker("CartPole-v1", 1, ImpactConfig(envs_per_worker=2, rollout_steps=8, epochs=1),
                           seed=0)
        try:
            assert one.algorithm.local_update(one.model, None) is None
        finally:
            one.close()
    finally:
        worker.close()


@pytest.mark.parametrize("trust_region", ["refreshed", "behaviour"])
def test_local_epochs_anchor_the_clip_at_the_refreshed_weights_and_weigh_by_rho(
        trust_region: str) -> None:
    # A rollout acted by an older policy mu that gave every taken action a third of the
    # probability theta gives it: pi_theta / mu = 3 everywhere.
    import dataclasses

    from olaf.drl.impact import Impact

    cfg = ImpactConfig(envs_per_worker=4, rollout_steps=32, epochs=2, minibatches=2,
                       trust_region=trust_region)
    worker = ImpactWorker("CartPole-v1", 0, cfg, seed=0)
    try:
        fresh = worker.experience.collect(worker.model).batch
        aged = dataclasses.replace(fresh, behaviour_log_probs=(
            fresh.behaviour_log_probs - np.float32(np.log(3.0))))

        def delta(batch) -> np.ndarray:
            algo = Impact(cfg)  # a fresh local Adam each time
            torch.manual_seed(1)  # the same minibatch order
            out = algo.local_update(worker.model, batch)
            assert out is not None
            return out[0]

        on_policy, off_policy = delta(fresh), delta(aged)
    finally:
        worker.close()
    assert np.linalg.norm(on_policy) > 0
    if trust_region == "refreshed":
        # The ratio starts at 1 against theta, and min(rho_bar = 1, 3) = 1: the rollout's
        # age changes neither the clip nor the weights.
        np.testing.assert_allclose(off_policy, on_policy, rtol=1e-5, atol=1e-7)
    else:
        # Against mu the ratio starts at 3, outside 1 +- clip: positive advantages are
        # clipped to no gradient, so the move differs.
        assert np.linalg.norm(off_policy - on_policy) > 0.1 * np.linalg.norm(on_policy)


def test_anneal_lr_takes_the_local_step_size_linearly_down_over_the_workers_budget() -> None:
    from olaf.drl.config import RunConfig
    from olaf.drl.learners import make_algorithm

    cfg = ImpactConfig(envs_per_worker=2, rollout_steps=16, epochs=2, minibatches=2,
                       local_learning_rate=1e-3, anneal_lr=True)
    # The worker's share of the run's budget: 8 workers of 1M env steps, 125k each.
    assert make_algorithm(RunConfig(impact=cfg, workers=8, total_steps=1_000_000)).budget_steps == 125_000
    worker = ImpactWorker("CartPole-v1", 0, cfg, seed=0)
    try:
        algo = worker.algorithm
        algo.budget_steps = 4 * 32  # four rollouts of 2 x 16 steps
        rates = []
        for _ in range(5):
            batch = worker.experience.collect(worker.model).batch
            delta, _ = algo.local_update(worker.model, batch)
            rates.append(algo.optimizer.param_groups[0]["lr"])
        assert rates == pytest.approx([1e-3, 0.75e-3, 0.5e-3, 0.25e-3, 0.0])
        assert np.linalg.norm(delta) == 0  # past its budget a worker no longer moves
        # Off (the default), the rate stays.
        steady = ImpactWorker("CartPole-v1", 1, replace(cfg, anneal_lr=False), seed=0)
        try:
            steady.algorithm.budget_steps = 32
            for _ in range(3):
                steady.algorithm.local_update(steady.model, steady.experience.collect(steady.model).batch)
            assert steady.algorithm.optimizer.param_groups[0]["lr"] == 1e-3
        finally:
            steady.close()
    finally:
        worker.close()


def test_worker_refreshes_weights_before_the_loss_and_stamps_their_version() -> None:
    cfg = ImpactConfig(envs_per_worker=3, rollout_steps=8)
    worker = ImpactWorker("CartPole-v1", 0, cfg, seed=0)
    try:
        acting = worker.model.flat_parameters()
        worker.load_weights(acting, 4)
        fresh = acting + np.float32(0.05)
        worker.refresh = lambda version: (fresh, 9) if version < 9 else None
        grad = worker.rollout()
        assert grad.model_version == 9  # computed at theta, not at mu
        assert grad.steps == 24 and grad.stats["refresh_versions"] == 5.0
        np.testing.assert_array_equal(worker.model.flat_parameters(), fresh)
        # theta != mu: some ratios moved, which the stats report.
        assert grad.stats["approx_kl"] > 0
        assert grad.stats["actor_grad_norm"] > 0 and grad.stats["critic_grad_norm"] > 0
        assert np.isfinite(grad.flat).all() and len(grad.flat) == worker.model.num_parameters
    finally:
        worker.close()


def test_set_reaches_every_hyperparameter_and_refuses_bad_ones() -> None:
    from dataclasses import fields

    from olaf.drl.cli_args import add_run_arguments, config_from_args

    parser = argparse.ArgumentParser()
    add_run_arguments(parser, duration=10)
    args = parser.parse_args(["--set", "algo.clip=0.3", "--set", "algo.normalize_advantages=false",
                              "--set", "algo.adam_betas=0.8,0.99", "--envs-per-worker", "2",
                              "--lr", "0.002"])
    cfg = config_from_args(args, mode="olaf", seed=0, target=None)
    assert cfg.algo == "impact" and algo_config(cfg) is cfg.impact
    assert (cfg.impact.clip, cfg.impact.normalize_advantages, cfg.impact.adam_betas) == (
        0.3, False, (0.8, 0.99))
    assert (cfg.impact.envs_per_worker, cfg.impact.learning_rate) == (2, 0.002)
    # Every field has a docstring in docs/learner.md's table.
    doc = (ROOT / "docs" / "learner.md").read_text()
    for f in fields(ImpactConfig):
        assert f"`{f.name}`" in doc, f.name
    a2c = config_from_args(parser.parse_args(["--algo", "a2c", "--set", "algo.gae_lambda=0.9"]),
                           mode="olaf", seed=0, target=None)
    assert algo_config(a2c) is a2c.learner and a2c.learner.gae_lambda == 0.9


@pytest.mark.parametrize(("flags", "message"), [
    (["--set", "algo.nope=1"], "has no 'nope'"),
    (["--set", "algo.clip=wide"], "'wide' is not a valid float"),
    (["--set", "algo.clip=1.5"], "clip must be in (0, 1)"),
    (["--set", "clip=0.2"], "expected algo.NAME=VALUE"),
    (["--algo", "a2c", "--envs-per-worker", "2"], "option of --algo impact"),
    (["--total-steps", "0"], "total_steps must be >= 1"),
])
def test_bad_hyperparameters_exit_2_with_one_line(flags: list[str], message: str,
                                                  tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "olaf.cli", "run", *flags, "--out",
                             str(tmp_path / "x")], cwd=ROOT, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.stderr
    assert not (tmp_path / "x").exists()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("cfg", [ImpactConfig(), replace(LUNAR_LANDER, envs_per_worker=2,
                                                          rollout_steps=256, minibatches=8)],
                         ids=["gradients-adam", "deltas-sgd"])
def test_impact_learns_cartpole_through_the_block_wise_ps(cfg: ImpactConfig) -> None:
    """Workers take turns against the block-wise PS in one process (no network, no clock),
    with the default parameter deltas (SGD at delta_rate) and with one gradient per rollout
    (Adam): after 40k env steps the greedy policy is far better than a fresh one."""
    from olaf.drl.evaluation import evaluate_greedy
    from olaf.drl.model import build_model
    from olaf.drl.server import ParameterServer

    torch.set_num_threads(1)
    model = build_model("CartPole-v1", cfg.hidden, 0)
    before = evaluate_greedy(model.policy, "CartPole-v1", 10, seed=123).mean()
    ps = ParameterServer(model.flat_parameters(), cfg, 64)
    workers = [ImpactWorker("CartPole-v1", w, cfg, seed=w) for w in range(4)]
    train_round_robin(ps, workers, env_steps=40_000)
    model.load_flat_parameters(ps.params)
    after = evaluate_greedy(model.policy, "CartPole-v1", 10, seed=123).mean()
    # A fresh (near-uniform) greedy policy falls over in 10-50 steps; random actions ~22.
    assert before < 60
    assert after > 150, (before, after)


def test_target_defaults_to_the_environments_reward_threshold() -> None:
    from olaf.drl.cli_args import add_run_arguments, resolve_target
    from olaf.drl.evaluation import default_target

    assert default_target("CartPole-v1") == 475.0
    assert default_target("LunarLander-v3") == 200.0
    assert default_target("Pendulum-v1") is None  # no threshold: no target
    parser = argparse.ArgumentParser()
    add_run_arguments(parser, duration=10)
    assert resolve_target(parser.parse_args([])) == 475.0
    assert resolve_target(parser.parse_args(["--target-reward", "300"])) == 300.0


def test_the_documented_lunar_lander_flags_give_lunar_lander() -> None:
    # docs/learner.md and docs/results.md give LUNAR_LANDER as flags: the same learner.
    from olaf.drl.cli_args import add_run_arguments, config_from_args

    doc = (ROOT / "docs" / "learner.md").read_text()
    line = next(ln for ln in doc.splitlines() if ln.strip().startswith("L=\"--hidden 64"))
    flags = line.split('"')[1].split()
    parser = argparse.ArgumentParser()
    add_run_arguments(parser, duration=10.0)
    cfg = config_from_args(parser.parse_args(flags), mode="olaf", seed=0, target=None)
    assert cfg.impact == LUNAR_LANDER
    assert cfg.capacity >= 154 and cfg.pull_rate > 1000  # holds a whole update, no congestion


def test_lunar_lander_gets_its_own_learner_and_a_queue_that_holds_its_updates() -> None:
    # olaf run --env LunarLander-v3 trains LUNAR_LANDER (the zoo's way: settings per env),
    # through a queue that holds its 154-block updates; flags still apply on top.
    from olaf.commands.sweep import with_env_learner
    from olaf.drl.cli_args import add_run_arguments, config_from_args
    from olaf.drl.config import RunConfig

    parser = argparse.ArgumentParser()
    add_run_arguments(parser, duration=None)

    def config(*flags: str) -> RunConfig:
        return config_from_args(parser.parse_args(list(flags)), mode="olaf", seed=0, target=None)

    lunar = config("--env", "LunarLander-v3")
    assert lunar.impact == LUNAR_LANDER and lunar.capacity == 2048
    assert config("--env", "LunarLander-v3", "--capacity", "300").capacity == 300
    assert config("--env", "LunarLander-v3", "--hidden", "32").impact == replace(LUNAR_LANDER, hidden=32)
    # A buffer in bytes replaces the capacity, as for every environment.
    assert config("--env", "LunarLander-v3", "--buffer-bytes", "29200").capacity == 100
    default = RunConfig()
    cartpole = config()
    assert cartpole.impact == default.impact and cartpole.capacity == default.capacity
    a2c = config("--env", "LunarLander-v3", "--algo", "a2c")
    assert a2c.impact == default.impact and a2c.capacity == default.capacity
    # olaf sweep trains the same learner on that environment.
    assert with_env_learner({"env_id": "LunarLander-v3"})["impact"] == LUNAR_LANDER
    assert "impact" not in with_env_learner({"env_id": "CartPole-v1"})
