"""The algorithm API (olaf/algorithm.py): Gaussian policies, a user's own loss, the checks."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from olaf.algorithm import (
    Algorithm,
    Experience,
    Rollout,
    Worker,
    flat_parameters,
    initial_model,
    load_flat_parameters,
)
from olaf.drl.config import RunConfig
from olaf.drl.evaluation import Evaluator, can_sample, evaluate_greedy, evaluate_policy, greedy_actions
from olaf.drl.impact import Impact, ImpactConfig, impact_loss
from olaf.drl.inproc import train_in_process
from olaf.drl.learners import algo_config, run_model
from olaf.drl.model import ActorCritic
from tests.inproc_training import take_turn, train_round_robin

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "docs" / "examples" / "reinforce.py"


def _example_module():
    spec = importlib.util.spec_from_file_location("reinforce_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _gaussian(hidden: int = 8) -> ActorCritic:
    torch.manual_seed(0)
    return ActorCritic(3, 2, hidden, (np.array([-2.0, -1.0]), np.array([2.0, 1.0])))


def test_gaussian_policy_log_prob_entropy_and_greedy_action() -> None:
    model = _gaussian()
    with torch.no_grad():
        model.log_std.copy_(torch.tensor([0.3, -0.5]))
    obs = torch.randn(5, 3)
    mean, _ = model(obs)
    actions = torch.randn(5, 2)
    dist = model.distribution(mean)
    std = torch.tensor([0.3, -0.5]).exp()
    by_hand = (-((actions - mean) ** 2) / (2 * std**2) - std.log() - 0.5 * np.log(2 * np.pi)).sum(-1)
    torch.testing.assert_close(dist.log_prob(actions), by_hand)
    torch.testing.assert_close(dist.entropy(), (0.5 + 0.5 * np.log(2 * np.pi) + std.log()).sum().expand(5))
    # The greedy action is the mean, clipped to each dimension's own bounds.
    with torch.no_grad():
        model.policy[-1].bias.copy_(torch.tensor([5.0, -5.0]))
    greedy = model.greedy(obs)
    assert (greedy[:, 0] == 2.0).all() and (greedy[:, 1] == -1.0).all()
    # The log-std is a weight that crosses the switch; the bounds are not.
    assert model.num_parameters == len(flat_parameters(model))
    assert model.num_parameters == sum(p.numel() for p in model.policy.parameters()) + sum(
        p.numel() for p in model.value.parameters()) + 2


def test_sampled_actions_repeat_for_a_seed_and_carry_their_log_prob() -> None:
    model = _gaussian()
    obs = torch.randn(64, 3)
    a1, lp1 = model.act(obs, torch.Generator().manual_seed(7))
    a2, lp2 = model.act(obs, torch.Generator().manual_seed(7))
    torch.testing.assert_close(a1, a2)
    torch.testing.assert_close(lp1, model.distribution(model(obs)[0]).log_prob(a1))
    # std 1 at the start: the samples spread around the mean, unclipped (the loss needs them
    # as drawn; the environment gets them clipped).
    assert a1.std() > 0.5 and (a1.abs() > 2.0).any()


def test_greedy_actions_of_a_plain_network_follow_the_action_space() -> None:
    net = torch.nn.Linear(3, 2)
    with torch.no_grad():
        net.weight.zero_()
        net.bias.copy_(torch.tensor([3.0, -0.5]))
    obs = torch.zeros(4, 3)
    assert greedy_actions(net, obs, gym.spaces.Discrete(2)).tolist() == [0, 0, 0, 0]
    box = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    np.testing.assert_array_equal(greedy_actions(net, obs, box), [[1.0, -0.5]] * 4)


def _pole_velocity_policy(sharpness: float) -> ActorCritic:
    """A CartPole policy that pushes toward the pole's angular velocity (returns ~200):
    logits +-sharpness * tanh(tanh(theta_dot)), nearly deterministic when sharp."""
    model = ActorCritic(4, 2, hidden=8)
    with torch.no_grad():
        for p in model.policy.parameters():
            p.zero_()
        model.policy[0].weight[0, 3] = 1.0
        model.policy[2].weight[0, 0] = 1.0
        model.policy[4].weight[:, 0] = torch.tensor([-sharpness, sharpness])
    return model


def test_stochastic_evaluation_of_a_nearly_deterministic_policy_is_the_greedy_one() -> None:
    model = _pole_velocity_policy(1e8)
    greedy = evaluate_policy(model, "CartPole-v1", 6, seed=5, greedy=True)
    sampled = evaluate_policy(model, "CartPole-v1", 6, seed=5, greedy=False)
    assert 100 < greedy.mean() < 500  # neither trivial nor capped: equality means something
    np.testing.assert_array_equal(sampled, greedy)


def test_stochastic_evaluation_of_a_fresh_policy_differs_from_greedy_and_repeats() -> None:
    torch.set_num_threads(1)
    cfg = RunConfig(eval_episodes=8, seed=3)
    model = run_model(cfg)  # the evaluator's model of the run
    weights = flat_parameters(model)
    # A fresh policy is near uniform: its greedy action is one side (~10 steps), samples
    # wander like random actions (~22), each sample drawn from the evaluation's seed.
    greedy = evaluate_policy(model, cfg.env_id, 8, seed=11, greedy=True)
    sampled = evaluate_policy(model, cfg.env_id, 8, seed=11, greedy=False)
    assert sampled.mean() > greedy.mean() + 5
    np.testing.assert_array_equal(evaluate_policy(model, cfg.env_id, 8, seed=11, greedy=False),
                                  sampled)
    assert not np.array_equal(evaluate_policy(model, cfg.env_id, 8, seed=12, greedy=False), sampled)
    # Every evaluator plays the same n-th evaluation, both policies on the same env seeds.
    first, second = Evaluator(cfg), Evaluator(cfg)
    scores = [first.evaluate(weights), first.evaluate(weights)]
    assert [second.evaluate(weights), second.evaluate(weights)] == scores
    assert scores[0] != scores[1] and scores[0].stochastic_mean > scores[0].greedy_mean
    # The final evaluation is of the configured policy.
    stochastic = Evaluator(replace(cfg, eval_policy="stochastic"))
    assert stochastic.final(weights) > Evaluator(cfg).final(weights) + 5


def test_a_model_that_cannot_sample_has_no_stochastic_evaluation() -> None:
    net = torch.nn.Linear(4, 2)  # greedy actions from its logits, no act(obs, generator)
    assert not can_sample(net) and can_sample(ActorCritic(4, 2))
    with pytest.raises(ValueError, match="cannot sample"):
        evaluate_policy(net, "CartPole-v1", 2, seed=0, greedy=False)
    cfg = RunConfig(algo="tests.test_algorithm_api:_NoBoxes", eval_episodes=2)
    scores = Evaluator(cfg).evaluate(flat_parameters(net))
    assert scores.greedy_mean > 0 and np.isnan(scores.stochastic_mean)
    assert np.isnan(Evaluator(replace(cfg, eval_policy="stochastic")).final(flat_parameters(net)))


def test_impact_worker_on_pendulum_makes_a_finite_gradient_that_reaches_the_log_std() -> None:
    cfg = ImpactConfig(envs_per_worker=2, rollout_steps=16, reward_scale=0.1)
    algorithm = Impact(cfg)
    worker = Worker(algorithm, "Pendulum-v1", 0, seed=3)
    try:
        init = initial_model(algorithm, "Pendulum-v1", 0)
        worker.load_weights(flat_parameters(init), 2)
        fresh = flat_parameters(init) + np.float32(0.01)
        worker.refresh = lambda version: (fresh, 5) if version < 5 else None
        grad = worker.rollout()
        assert grad.model_version == 5 and grad.steps == 32 and grad.stats["refresh_versions"] == 3
        assert np.isfinite(grad.flat).all() and len(grad.flat) == init.num_parameters
        # The log-std's gradient is sent too: its place in the flat vector is its place in
        # parameters() order.
        assert "log_std" in dict(worker.model.named_parameters())
        at = 0
        for name, p in worker.model.named_parameters():
            if name == "log_std":
                assert grad.flat[at] != 0.0
            at += p.numel()
        assert grad.stats["approx_kl"] > 0 and np.isfinite(grad.stats["entropy"])
        assert worker.last_rollout is None  # the categorical curvature probe is not fed
        batch = worker.experience.collect(worker.model).batch
        assert batch.actions.shape == (16, 2, 1) and batch.actions.dtype == np.float32
        loss, stats, adv = impact_loss(worker.model, batch, cfg)
        assert loss.ndim == 0 and adv.shape == (16, 2)
        # The behaviour log-probs are the model's own: on-policy the ratio is 1, nothing clipped.
        assert stats["clip_fraction"] == 0.0 and abs(stats["approx_kl"]) < 1e-6
    finally:
        worker.close()


class _TargetBandit:
    """An experience source of one-step episodes: the observation is constant and the
    reward is -(a - 1.5)^2 (a clipped to [-2, 2]), so the best action is 1.5 and a fresh
    policy's mean is ~0."""

    def __init__(self, seed: int) -> None:
        self.generator = torch.Generator().manual_seed(seed)
        self.recent_return = 0.0

    def collect(self, model: ActorCritic) -> Experience:
        obs = np.ones((1, 16, 3), np.float32)
        action, log_prob = model.act(torch.from_numpy(obs[0]), self.generator)
        actions = action.numpy()[None]
        rewards = -((np.clip(actions[..., 0], -2, 2) - 1.5) ** 2).astype(np.float32)
        self.recent_return = float(rewards.mean())
        rollout = Rollout(obs, actions, log_prob.numpy()[None], rewards, np.ones((1, 16), bool),
                          np.zeros((1, 16), bool), {}, obs[0].copy())
        return Experience(rollout, 16, [])

    def close(self) -> None:
        pass


class _BanditImpact(Impact):
    def make_experience(self, env_id: str, seed: int) -> _TargetBandit:
        return _TargetBandit(seed)


def test_impact_gaussian_policy_learns_the_best_action_through_the_block_wise_ps() -> None:
    """IMPACT's ratio, clip and entropy on a Gaussian policy, end to end through the
    platform Worker and the PS: the greedy action walks from ~0 to the best action 1.5."""
    from olaf.drl.server import ParameterServer

    algorithm = _BanditImpact(ImpactConfig(learning_rate=1e-2, entropy_coef=0.0))
    # Pendulum-v1's spaces (3 observations, one action in [-2, 2]); the bandit acts as its
    # environment (its make_experience ignores the id).
    worker = Worker(algorithm, "Pendulum-v1", 0, seed=0)
    model = initial_model(algorithm, "Pendulum-v1", 0)
    obs = torch.ones(1, 3)
    start = float(model.greedy(obs))
    ps = ParameterServer(flat_parameters(model), algorithm.config, 64)
    for _ in range(150):
        take_turn(ps, worker)
    load_flat_parameters(model, ps.params)
    assert abs(start) < 0.1
    assert abs(float(model.greedy(obs)) - 1.5) < 0.3, float(model.greedy(obs))
    assert float(model.log_std.detach().exp()) < 1.0  # it grew surer, without an entropy bonus


# Pendulum-v1 with IMPACT's Gaussian policy: a short critic horizon, rewards scaled to the
# critic, no entropy bonus (CleanRL's continuous PPO has none), the critic clipped loosely.
# One gradient per rollout through the PS's Adam (epochs 1, IMPACT as published), with the
# learner's earlier network and rollout shape: the gradient path of the API.
PENDULUM = ImpactConfig(gamma=0.9, reward_scale=0.1, entropy_coef=0.0, critic_max_grad_norm=5.0,
                        learning_rate=1e-3, rollout_steps=16, epochs=1, hidden=32,
                        envs_per_worker=4, vtrace_lambda=0.95)


@pytest.mark.timeout(600)
def test_impact_learns_pendulum_through_the_api_and_the_block_wise_ps() -> None:
    """Four workers take turns against the block-wise Adam PS (in process, no clock): after
    160k env steps the greedy policy (the Gaussian's mean) swings up part of the way."""
    from olaf.drl.server import ParameterServer

    torch.set_num_threads(1)
    algorithm = Impact(PENDULUM)
    model = initial_model(algorithm, "Pendulum-v1", 0)
    before = evaluate_greedy(model, "Pendulum-v1", 10, seed=123).mean()
    ps = ParameterServer(flat_parameters(model), algorithm.config, 64)
    workers = [Worker(algorithm, "Pendulum-v1", w, seed=w) for w in range(4)]
    train_round_robin(ps, workers, env_steps=160_000)
    load_flat_parameters(model, ps.params)
    after = evaluate_greedy(model, "Pendulum-v1", 10, seed=123).mean()
    # The fresh policy's mean action is ~0 and the pendulum mostly hangs or swings: about
    # -1230 on these 10 episodes (untrained policies score -1150..-1450 on them).
    assert before < -1100
    assert after > -900, (before, after)


def test_a_users_own_loss_trains_in_process() -> None:
    """docs/examples/reinforce.py, imported as a user's module: CartPole's greedy return
    rises well above a fresh policy's (~10) and a random one's (~22)."""
    reinforce = _example_module()
    algorithm = reinforce.Reinforce()
    model = initial_model(algorithm, "CartPole-v1", 0)
    before = evaluate_greedy(model, "CartPole-v1", 10, seed=123).mean()
    result = train_in_process("CartPole-v1", workers=4, turns=120, pulls_per_turn=64,
                              algorithm=algorithm, seed=0)
    load_flat_parameters(model, result.weights)
    after = evaluate_greedy(model, "CartPole-v1", 10, seed=123).mean()
    assert before < 30
    assert after > 100, (before, after)


def test_the_docs_show_the_example_as_it_is() -> None:
    doc = (ROOT / "docs" / "algorithm.md").read_text()
    source = EXAMPLE.read_text()
    start = source.index("@dataclass(frozen=True)")
    assert source[start:].strip() in doc
    assert len(source.splitlines()) < 50


def _cfg(*flags: str) -> RunConfig:
    from olaf.drl.cli_args import add_run_arguments, config_from_args

    parser = argparse.ArgumentParser()
    add_run_arguments(parser, duration=10)
    return config_from_args(parser.parse_args(list(flags)), mode="olaf", seed=0, target=None)


def test_run_config_carries_a_users_algorithm_and_its_settings(monkeypatch) -> None:
    from olaf.drl.cli_args import check_env
    from olaf.drl.learners import make_algorithm, make_worker

    monkeypatch.syspath_prepend(str(EXAMPLE.parent))
    cfg = check_env(_cfg("--algo", "reinforce:Reinforce", "--set", "algo.gamma=0.9", "--lr", "0.01",
                         "--env", "Pendulum-v1"))
    assert cfg.algo == "reinforce:Reinforce"
    assert cfg.algo_set == ("algo.learning_rate=0.01", "algo.gamma=0.9")
    algorithm = make_algorithm(cfg)
    assert type(algorithm).__name__ == "Reinforce"
    assert (algorithm.config.gamma, algorithm.config.learning_rate) == (0.9, 0.01)
    assert algo_config(cfg) == algorithm.config  # what the PS's Adam reads
    worker = make_worker(cfg, 0, 0)
    try:
        grad = worker.rollout()
        assert grad.steps == 4 * 64 and "actor_grad_norm" in grad.stats
    finally:
        worker.close()


class _NoBoxes(Algorithm):
    def make_model(self, observation_space, action_space):
        if not isinstance(action_space, gym.spaces.Discrete):
            raise ValueError("this toy only does Discrete actions")
        return torch.nn.Linear(observation_space.shape[0], int(action_space.n))

    def make_experience(self, env_id, seed):
        raise NotImplementedError

    def loss(self, model, batch):
        raise NotImplementedError


@pytest.mark.parametrize(("flags", "message"), [
    (["--algo", "nosuchmodule:Algo"], "cannot import 'nosuchmodule'"),
    (["--algo", "olaf.algorithm:Worker"], "no olaf.algorithm.Algorithm subclass 'Worker'"),
    (["--algo", "reinforce:Reinforce", "--set", "algo.nope=1"], "has no 'nope'"),
    (["--algo", "reinforce:Reinforce", "--envs-per-worker", "2"], "option of --algo impact"),
    (["--env", "FrozenLake-v1"], "FrozenLake-v1: needs a flat Box observation space"),
    (["--env", "Pendulum-v1", "--scaling", "boost"], "needs a built-in learner and a Discrete"),
    (["--algo", "tests.test_algorithm_api:_NoBoxes", "--env", "Pendulum-v1"], "only does Discrete"),
    (["--algo", "tests.test_algorithm_api:_NoBoxes", "--eval-policy", "stochastic"],
     "--eval-policy stochastic: tests.test_algorithm_api:_NoBoxes's model has no act"),
])
def test_what_an_algorithm_cannot_do_is_a_one_line_error_before_anything_starts(
        flags: list[str], message: str, monkeypatch, capsys) -> None:
    from olaf.drl.cli_args import check_env

    monkeypatch.syspath_prepend(str(EXAMPLE.parent))
    with pytest.raises(SystemExit) as exit_info:
        check_env(_cfg(*flags))
    assert exit_info.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], lines


@pytest.mark.timeout(600)
def test_olaf_run_trains_a_users_algorithm_on_pendulum_through_the_switch(tmp_path: Path) -> None:
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(EXAMPLE.parent),
                                                       os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, "-m", "olaf.cli", "run", "--env", "Pendulum-v1", "--algo",
           "reinforce:Reinforce", "--workers", "2", "--total-steps", "3000", "--eval-every", "1500",
           "--eval-episodes", "2", "--duration", "120", "--out", str(out)]
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=540)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["algo"] == "reinforce:Reinforce" and summary["stopped_by"] == "steps"
    assert summary["env_steps"] >= 3000 and summary["model_version"] > 0
    assert summary["blocks_applied"] > 0 and summary["outcomes"]["ENQUEUED"] > 0
    # Pendulum's returns lie in [-16.3 * 200, 0]: the greedy evaluations ran the Gaussian's mean.
    assert -3300 < summary["final_eval_return"] <= 0


def test_replace_keeps_a_run_config_with_a_users_algorithm_valid() -> None:
    cfg = RunConfig(algo="reinforce:Reinforce", algo_set=("algo.gamma=0.5",))
    assert replace(cfg, workers=3).algo_set == ("algo.gamma=0.5",)
    with pytest.raises(ValueError, match="MODULE:CLASS"):
        RunConfig(algo="reinforce")
