"""The actor-critic network and its flat-vector view.

Gradients travel as one flat float32 vector cut into blocks of V values, and the
parameter server holds the weights as the same flat vector, so the model exposes
``flat_parameters`` / ``load_flat_parameters`` / ``flat_gradient`` in one fixed order
(``nn.Module.parameters()`` order).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch
from torch import nn


class ActorCritic(nn.Module):
    """A categorical policy and a state-value critic, each two tanh layers wide ``hidden``.

    The two do not share a trunk: with returns in the hundreds (CartPole, LunarLander)
    a shared trunk is pulled around by the critic's large errors and the policy stalls.
    """

    def __init__(self, obs_dim: int, n_actions: int, hidden: int = 64) -> None:
        super().__init__()

        def mlp(out: int) -> nn.Sequential:
            return nn.Sequential(
                nn.Linear(obs_dim, hidden), nn.Tanh(),
                nn.Linear(hidden, hidden), nn.Tanh(),
                nn.Linear(hidden, out),
            )

        self.policy = mlp(n_actions)
        self.value = mlp(1)
        # Small last-layer weights start the policy near uniform (the usual PPO/A2C init).
        nn.init.orthogonal_(self.policy[-1].weight, gain=0.01)
        nn.init.zeros_(self.policy[-1].bias)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Action logits ``(..., n_actions)`` and state values ``(...)``."""
        return self.policy(obs), self.value(obs).squeeze(-1)

    @property
    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def flat_parameters(self) -> np.ndarray:
        with torch.no_grad():
            return torch.cat([p.reshape(-1) for p in self.parameters()]).numpy().copy()

    def load_flat_parameters(self, flat: np.ndarray) -> None:
        if flat.shape != (self.num_parameters,):
            raise ValueError(f"expected {self.num_parameters} parameters, got shape {flat.shape}")
        src = torch.from_numpy(np.ascontiguousarray(flat, dtype=np.float32))
        with torch.no_grad():
            at = 0
            for p in self.parameters():
                n = p.numel()
                p.copy_(src[at : at + n].view_as(p))
                at += n

    def flat_gradient(self) -> np.ndarray:
        """The current ``.grad`` of every parameter as one vector (zeros where None)."""
        parts = [
            (p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1)
            for p in self.parameters()
        ]
        return torch.cat(parts).numpy().astype(np.float32, copy=True)


def env_dimensions(env_id: str) -> tuple[int, int]:
    """(observation size, number of actions) of a gymnasium environment.

    Raises ``ValueError`` for spaces this learner does not handle (it needs a flat Box
    observation and a Discrete action space, as CartPole and LunarLander have).
    """
    try:
        env = gym.make(env_id)
    except gym.error.Error as exc:
        raise ValueError(f"unknown gymnasium environment {env_id!r}: {exc}") from exc
    try:
        obs, act = env.observation_space, env.action_space
        if not isinstance(act, gym.spaces.Discrete):
            raise ValueError(f"{env_id}: needs a Discrete action space, has {act}")
        if not isinstance(obs, gym.spaces.Box) or len(obs.shape) != 1:
            raise ValueError(f"{env_id}: needs a flat Box observation space, has {obs}")
        return int(obs.shape[0]), int(act.n)
    finally:
        env.close()


def build_model(env_id: str, hidden: int, seed: int) -> ActorCritic:
    """The initial model of a run: same seed, same weights in every process."""
    obs_dim, n_actions = env_dimensions(env_id)
    torch.manual_seed(seed)
    return ActorCritic(obs_dim, n_actions, hidden)
