"""One logical actor-learner worker: roll out, compute a clipped A2C gradient.

A worker owns an environment and a copy of the model. It acts with the weights it
last received (``load_weights``), collects ``rollout_steps`` transitions, and turns
them into the gradient of the advantage actor-critic loss

    L = -E[log pi(a|s) * A] + value_coef * E[(R - V(s))^2] - entropy_coef * E[H(pi(.|s))]

with GAE(lambda) advantages ``A`` and returns ``R = A + V``. The gradient is clipped to
``max_grad_norm`` and handed back as one flat float32 vector; sending it is the
caller's job. It never steps an optimizer: only the parameter server does.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import gymnasium as gym
import numpy as np
import torch

from olaf.drl.config import A2CConfig
from olaf.drl.model import ActorCritic, env_dimensions
from olaf.drl.truncation import truncated_policy_loss


@dataclass
class Episode:
    """A finished episode: its undiscounted return and length."""

    ret: float
    length: int


@dataclass
class Gradient:
    """One worker gradient, ready to send."""

    flat: np.ndarray
    """Clipped gradient, float32, model parameter order."""
    norm: float
    """L2 norm before clipping."""
    model_version: int
    """Version of the weights the rollout used."""
    reward: float
    """The worker's recent mean episode return when the gradient was made."""
    steps: int
    """Environment steps in the rollout."""
    episodes: list[Episode] = field(default_factory=list)
    """Episodes that finished during the rollout."""
    stats: dict[str, float] = field(default_factory=dict)
    """Loss terms and gradient norms of this gradient (for the metrics and TensorBoard)."""


class RolloutWorker:
    """An environment, a policy copy and the A2C gradient computation."""

    def __init__(self, env_id: str, worker_id: int, config: A2CConfig, seed: int) -> None:
        obs_dim, n_actions = env_dimensions(env_id)
        self.worker_id = worker_id
        self.config = config
        self.env = gym.make(env_id)
        self.model = ActorCritic(obs_dim, n_actions, config.hidden)
        self.model_version = -1
        self._generator = torch.Generator().manual_seed(seed)
        obs, _ = self.env.reset(seed=seed)
        self.obs = np.asarray(obs, np.float32)
        self.episode_return = 0.0
        self.episode_length = 0
        self.recent_returns: deque[float] = deque(maxlen=config.reward_window)
        self.total_steps = 0
        self.refresh: Callable[[int], tuple[np.ndarray, int] | None] | None = None
        """Staleness-aware mode: newer weights than the given version, or None; taken
        between acting and computing the loss."""
        self.rho: float | None = None
        """Staleness-aware mode: truncation rho of the importance-weighted policy loss."""
        self.last_rollout: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        """(observations, actions, advantages) of the latest rollout (boosting detector)."""

    def close(self) -> None:
        self.env.close()

    def load_weights(self, flat: np.ndarray, version: int) -> None:
        self.model.load_flat_parameters(flat)
        self.model_version = version

    @property
    def reward(self) -> float:
        """Recent mean episode return (0 before the first episode ends)."""
        return float(np.mean(self.recent_returns)) if self.recent_returns else 0.0

    def rollout(self) -> Gradient:
        """Act ``rollout_steps`` times and return the clipped gradient of the A2C loss."""
        cfg = self.config
        n = cfg.rollout_steps
        obs = np.empty((n, self.obs.shape[0]), np.float32)
        actions = np.empty(n, np.int64)
        rewards = np.empty(n, np.float32)
        terminal = np.zeros(n, np.float32)
        episodes: list[Episode] = []
        bootstrap_obs: dict[int, np.ndarray] = {}
        behaviour = np.zeros(n, np.float32)
        for t in range(n):
            obs[t] = self.obs
            with torch.no_grad():
                logits, _ = self.model(torch.from_numpy(self.obs))
                action = int(
                    torch.multinomial(torch.softmax(logits, -1), 1, generator=self._generator)
                )
            if self.rho is not None:
                behaviour[t] = float(torch.log_softmax(logits, -1)[action])
            next_obs, reward, terminated, truncated, _ = self.env.step(action)
            actions[t] = action
            rewards[t] = reward
            self.episode_return += float(reward)
            self.episode_length += 1
            if terminated or truncated:
                terminal[t] = 1.0
                if truncated and not terminated:
                    # A time limit is not a terminal state: bootstrap from where it stopped.
                    bootstrap_obs[t] = np.asarray(next_obs, np.float32)
                episodes.append(Episode(self.episode_return, self.episode_length))
                self.recent_returns.append(self.episode_return)
                self.episode_return, self.episode_length = 0.0, 0
                next_obs, _ = self.env.reset()
            self.obs = np.asarray(next_obs, np.float32)
        self.total_steps += n
        if self.refresh is not None:
            fresh = self.refresh(self.model_version)
            if fresh is not None:
                self.load_weights(*fresh)

        self.model.zero_grad(set_to_none=True)
        logits, values = self.model(torch.from_numpy(obs))
        with torch.no_grad():
            _, last_value = self.model(torch.from_numpy(self.obs))
            for t, final in bootstrap_obs.items():
                _, v = self.model(torch.from_numpy(final))
                rewards[t] += cfg.gamma * float(v)
        advantages = gae(
            rewards, values.detach().numpy(), terminal, float(last_value), cfg.gamma, cfg.gae_lambda
        )
        adv = torch.from_numpy(advantages)
        returns = adv + values.detach()
        dist = torch.distributions.Categorical(logits=logits)
        logp = dist.log_prob(torch.from_numpy(actions))
        if self.rho is None:
            policy_loss = -(logp * adv).mean()
        else:
            policy_loss = truncated_policy_loss(logp, torch.from_numpy(behaviour), adv, rho=self.rho)
        value_loss = (returns - values).pow(2).mean()
        entropy = dist.entropy().mean()
        loss = policy_loss + cfg.value_coef * value_loss - cfg.entropy_coef * entropy
        loss.backward()
        norm = float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.max_grad_norm))
        self.last_rollout = (obs, actions, advantages)
        stats = {"policy_loss": policy_loss.item(), "value_loss": value_loss.item(),
                 "entropy": entropy.item(), "grad_norm": norm}
        return Gradient(
            flat=self.model.flat_gradient(),
            norm=norm,
            model_version=self.model_version,
            reward=self.reward,
            steps=n,
            episodes=episodes,
            stats=stats,
        )


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
