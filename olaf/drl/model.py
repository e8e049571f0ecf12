"""The built-in actor-critic network: a categorical or a Gaussian policy and a critic.

Gradients travel as one flat float32 vector cut into blocks of V values, and the
parameter server holds the weights as the same flat vector; the flattening is the
platform's (``olaf.algorithm.flat_parameters`` and friends, ``nn.Module.parameters()``
order), and the methods of the same names here are shortcuts to it.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from olaf.algorithm import env_spaces, flat_gradient, flat_parameters, load_flat_parameters


class ActorCritic(nn.Module):
    """A policy and a state-value critic, each two tanh layers wide ``hidden``.

    With ``action_bounds`` (a Box action space's ``low``, ``high``) the policy is a
    diagonal Gaussian: the actor outputs the mean of each of the ``n_actions`` action
    dimensions, and one state-independent log standard deviation per dimension is a
    parameter of its own (CleanRL's continuous PPO). Otherwise it is categorical over
    ``n_actions`` actions and the actor outputs logits.

    The two do not share a trunk: with returns in the hundreds (CartPole, LunarLander)
    a shared trunk is pulled around by the critic's large errors and the policy stalls.
    """

    def __init__(self, obs_dim: int, n_actions: int, hidden: int = 64,
                 action_bounds: tuple[np.ndarray, np.ndarray] | None = None) -> None:
        super().__init__()

        def mlp(out: int) -> nn.Sequential:
            return nn.Sequential(
                nn.Linear(obs_dim, hidden), nn.Tanh(),
                nn.Linear(hidden, hidden), nn.Tanh(),
                nn.Linear(hidden, out),
            )

        self.policy = mlp(n_actions)
        self.value = mlp(1)
        # Small last-layer weights start the policy near uniform, or near a zero mean (the
        # usual PPO/A2C init).
        nn.init.orthogonal_(self.policy[-1].weight, gain=0.01)
        nn.init.zeros_(self.policy[-1].bias)
        self.continuous = action_bounds is not None
        if action_bounds is not None:
            low, high = (torch.as_tensor(np.asarray(b, np.float32).reshape(n_actions))
                         for b in action_bounds)
            # Buffers, not parameters: the bounds are no weights and never cross the switch.
            self.register_buffer("action_low", low)
            self.register_buffer("action_high", high)
            self.log_std = nn.Parameter(torch.zeros(n_actions))

    @classmethod
    def for_spaces(cls, observation_space: gym.Space, action_space: gym.Space,
                   hidden: int) -> ActorCritic:
        """The model of an environment's spaces (ValueError for spaces it cannot handle)."""
        check_spaces(observation_space, action_space)
        obs_dim = int(observation_space.shape[0])
        if isinstance(action_space, gym.spaces.Discrete):
            return cls(obs_dim, int(action_space.n), hidden)
        return cls(obs_dim, int(action_space.shape[0]), hidden,
                   (action_space.low, action_space.high))

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The actor's output ``(..., n_actions)`` (logits, or the Gaussian's mean) and
        state values ``(...)``."""
        return self.policy(obs), self.value(obs).squeeze(-1)

    def distribution(self, actor_out: torch.Tensor) -> torch.distributions.Distribution:
        """pi(.|s) from the actor's output; ``log_prob`` and ``entropy`` are per state (a
        Gaussian's are summed over the action dimensions)."""
        if not self.continuous:
            return torch.distributions.Categorical(logits=actor_out)
        std = self.log_std.exp().expand_as(actor_out)
        return torch.distributions.Independent(torch.distributions.Normal(actor_out, std), 1)

    def act(self, obs: torch.Tensor,
            generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """Sampled actions and their log-probabilities (no gradient), drawn from
        ``generator`` so that a worker's actions repeat for its seed."""
        with torch.no_grad():
            out = self.policy(obs)
            if not self.continuous:
                log_probs = torch.log_softmax(out, -1)
                action = torch.multinomial(log_probs.exp(), 1, generator=generator).squeeze(1)
                return action, log_probs.gather(1, action[:, None]).squeeze(1)
            noise = torch.randn(out.shape, generator=generator)
            action = out + self.log_std.exp() * noise
            return action, self.distribution(out).log_prob(action)

    def greedy(self, obs: torch.Tensor) -> torch.Tensor:
        """The greedy action: the most likely one, or the Gaussian's mean within the bounds."""
        with torch.no_grad():
            out = self.policy(obs)
            if not self.continuous:
                return out.argmax(-1)
            return torch.maximum(torch.minimum(out, self.action_high), self.action_low)

    @property
    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def flat_parameters(self) -> np.ndarray:
        return flat_parameters(self)

    def load_flat_parameters(self, flat: np.ndarray) -> None:
        load_flat_parameters(self, flat)

    def flat_gradient(self) -> np.ndarray:
        """The current ``.grad`` of every parameter as one vector (zeros where None)."""
        return flat_gradient(self)


def check_spaces(observation_space: gym.Space, action_space: gym.Space) -> None:
    """ValueError unless the observation is a flat Box and the actions are Discrete or a
    flat Box with finite bounds (what ``ActorCritic`` handles)."""
    if not isinstance(observation_space, gym.spaces.Box) or len(observation_space.shape) != 1:
        raise ValueError(f"needs a flat Box observation space, has {observation_space}")
    if isinstance(action_space, gym.spaces.Discrete):
        return
    if not isinstance(action_space, gym.spaces.Box) or len(action_space.shape) != 1:
        raise ValueError(f"needs a Discrete or a flat Box action space, has {action_space}")
    if not (np.isfinite(action_space.low).all() and np.isfinite(action_space.high).all()):
        raise ValueError(f"needs finite action bounds, has {action_space}")


def build_model(env_id: str, hidden: int, seed: int) -> ActorCritic:
    """The initial built-in model of a run: same seed, same weights in every process."""
    observation_space, action_space = env_spaces(env_id)
    try:
        check_spaces(observation_space, action_space)
    except ValueError as exc:
        raise ValueError(f"{env_id}: {exc}") from None
    torch.manual_seed(seed)
    return ActorCritic.for_spaces(observation_space, action_space, hidden)
