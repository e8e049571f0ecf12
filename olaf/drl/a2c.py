"""The A2C learner: one environment per worker, a clipped advantage actor-critic gradient.

A worker owns an environment and a copy of the model. It acts with the weights it
last received (``load_weights``), collects ``rollout_steps`` transitions, and turns
them into the gradient of the advantage actor-critic loss

    L = -E[log pi(a|s) * A] + value_coef * E[(R - V(s))^2] - entropy_coef * E[H(pi(.|s))]

with GAE(lambda) advantages ``A`` and returns ``R = A + V``. The gradient is clipped to
``max_grad_norm`` and handed back as one flat float32 vector; sending it is the
caller's job. It never steps an optimizer: only the parameter server does.

``A2C`` is written against the algorithm API (olaf.algorithm), as IMPACT is; the
platform's ``Worker`` does the backward pass, the clipping and the flattening.
``Episode`` and ``Gradient`` live in olaf.algorithm and are re-exported here.
"""

from __future__ import annotations

from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch

from olaf.algorithm import (
    Algorithm,
    ClipGroup,
    Episode,
    Gradient,
    Rollout,
    VectorActor,
    Worker,
    discrete_sample,
)
from olaf.drl.model import ActorCritic
from olaf.drl.truncation import truncated_policy_loss

__all__ = ["A2C", "Episode", "Gradient", "RolloutWorker", "a2c_loss", "gae"]


@dataclass(frozen=True)
class A2CConfig:
    """Learner hyperparameters, shared by every worker and the parameter server."""

    hidden: int = 32
    """Width of the two tanh hidden layers of the actor and of the critic (32 keeps a
    CartPole gradient at 40 blocks of 64 values, LunarLander at 45)."""
    rollout_steps: int = 32
    """Environment steps per worker per gradient (the n of n-step returns)."""
    gamma: float = 0.99
    """Discount factor."""
    gae_lambda: float = 0.95
    """GAE(lambda) mixing between one-step TD (0) and Monte-Carlo (1) advantages."""
    value_coef: float = 0.5
    """Weight of the critic's squared-error loss against the policy loss."""
    entropy_coef: float = 0.01
    """Weight of the entropy bonus that keeps the policy exploring."""
    max_grad_norm: float = 0.5
    """Each worker clips its gradient to this L2 norm before sending it, which also
    bounds every fixed-point value far below int32 saturation even after many merges."""
    learning_rate: float = 1e-3
    """Adam step size at the parameter server."""
    adam_betas: tuple[float, float] = (0.9, 0.999)
    """Adam's first- and second-moment decay rates."""
    adam_eps: float = 1e-8
    """Adam's denominator epsilon."""
    reward_window: int = 10
    """Episodes in a worker's "recent mean episode return", the reward it sends."""

    def __post_init__(self) -> None:
        checks = [
            (self.hidden >= 1, "hidden must be >= 1"),
            (self.rollout_steps >= 1, "rollout_steps must be >= 1"),
            (0.0 < self.gamma <= 1.0, "gamma must be in (0, 1]"),
            (0.0 <= self.gae_lambda <= 1.0, "gae_lambda must be in [0, 1]"),
            (self.max_grad_norm > 0, "max_grad_norm must be > 0"),
            (self.learning_rate > 0, "learning_rate must be > 0"),
            (self.reward_window >= 1, "reward_window must be >= 1"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)


class A2C(Algorithm):
    """Advantage actor-critic as an ``olaf.algorithm.Algorithm``: the built-in model, one
    environment per worker (``VectorActor``), ``a2c_loss``, one joint gradient clip.

    ``rho``: with staleness-aware aggregation (olaf.drl.staleness) the policy term is
    the truncated importance-weighted loss (olaf.drl.truncation) with this truncation.
    """

    Config = A2CConfig
    config: A2CConfig

    def __init__(self, config: A2CConfig | None = None, rho: float | None = None) -> None:
        super().__init__(config)
        self.rho = rho

    def make_model(self, observation_space: gym.Space, action_space: gym.Space) -> ActorCritic:
        return ActorCritic.for_spaces(observation_space, action_space, self.config.hidden)

    def make_experience(self, env_id: str, seed: int) -> VectorActor:
        cfg = self.config
        return VectorActor(env_id, envs=1, steps=cfg.rollout_steps, seed=seed,
                           reward_window=cfg.reward_window)

    def loss(self, model: ActorCritic, batch: Rollout) -> tuple[torch.Tensor, dict[str, float]]:
        loss, stats, batch.advantages = a2c_loss(model, batch, self.config, self.rho)
        return loss, stats

    def clip_groups(self, model: ActorCritic) -> list[ClipGroup]:
        return [ClipGroup("joint", list(model.parameters()), self.config.max_grad_norm)]

    def curvature_sample(self, batch: Rollout) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        return discrete_sample(batch)


def a2c_loss(model: ActorCritic, rollout: Rollout, cfg: A2CConfig,
             rho: float | None = None) -> tuple[torch.Tensor, dict[str, float], np.ndarray]:
    """The A2C loss of a rollout at ``model``'s weights, its statistics and the GAE
    advantages (T, N)."""
    actor_out, values = model(torch.from_numpy(rollout.obs))
    rewards = rollout.rewards.copy()
    with torch.no_grad():
        last_values = model.value(torch.from_numpy(rollout.last_obs)).squeeze(-1).numpy()
        for (t, i), final in rollout.final_obs.items():
            # A time limit is not a terminal state: bootstrap from where it stopped.
            rewards[t, i] += cfg.gamma * float(model.value(torch.from_numpy(final)))
    terminal = (rollout.terminated | rollout.truncated).astype(np.float32)
    value_arr = values.detach().numpy()
    advantages = np.stack([gae(rewards[:, i], value_arr[:, i], terminal[:, i], float(last_values[i]),
                               cfg.gamma, cfg.gae_lambda) for i in range(rewards.shape[1])], 1)
    adv = torch.from_numpy(advantages)
    returns = adv + values.detach()
    dist = model.distribution(actor_out)
    logp = dist.log_prob(torch.from_numpy(rollout.actions))
    if rho is None:
        policy_loss = -(logp * adv).mean()
    else:
        policy_loss = truncated_policy_loss(logp.reshape(-1),
                                            torch.from_numpy(rollout.behaviour_log_probs).reshape(-1),
                                            adv.reshape(-1), rho=rho)
    value_loss = (returns - values).pow(2).mean()
    entropy = dist.entropy().mean()
    loss = policy_loss + cfg.value_coef * value_loss - cfg.entropy_coef * entropy
    stats = {"policy_loss": policy_loss.item(), "value_loss": value_loss.item(),
             "entropy": entropy.item()}
    return loss, stats, advantages


class RolloutWorker(Worker):
    """The platform's ``Worker`` carrying ``A2C``: one logical A2C worker."""

    def __init__(self, env_id: str, worker_id: int, config: A2CConfig, seed: int,
                 rho: float | None = None) -> None:
        super().__init__(A2C(config, rho), env_id, worker_id, seed)


def gae(
    rewards: np.ndarray,
    values: np.ndarray,
    terminal: np.ndarray,
    last_value: float,
    gamma: float,
    lam: float,
) -> np.ndarray:
    """Generalized advantage estimates of one rollout (float32).

    ``terminal[t] == 1`` means the episode ended at step t, so neither the value nor the
    advantage of step t+1 flows back into step t.
    """
    n = len(rewards)
    adv = np.zeros(n, np.float32)
    running = 0.0
    next_value = last_value
    for t in range(n - 1, -1, -1):
        live = 1.0 - float(terminal[t])
        delta = float(rewards[t]) + gamma * next_value * live - float(values[t])
        running = delta + gamma * lam * live * running
        adv[t] = running
        next_value = float(values[t])
    return adv
