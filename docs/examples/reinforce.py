"""REINFORCE, a user's own loss on OLAF's algorithm API (docs/algorithm.md).

    PYTHONPATH=docs/examples olaf run --algo reinforce:Reinforce --set algo.gamma=0.98
"""

from dataclasses import dataclass

import torch

from olaf.algorithm import Algorithm, AlgorithmConfig, ClipGroup, Rollout, VectorActor
from olaf.drl.model import ActorCritic


@dataclass(frozen=True)
class ReinforceConfig(AlgorithmConfig):
    gamma: float = 0.99
    envs: int = 4
    steps: int = 64
    hidden: int = 32
    max_grad_norm: float = 0.5
    learning_rate: float = 3e-3


class Reinforce(Algorithm):
    """Policy gradient on discounted returns-to-go within each rollout, normalised per batch."""

    Config = ReinforceConfig

    def make_model(self, observation_space, action_space):
        return ActorCritic.for_spaces(observation_space, action_space, self.config.hidden)

    def make_experience(self, env_id, seed):
        return VectorActor(env_id, envs=self.config.envs, steps=self.config.steps, seed=seed)

    def loss(self, model, batch: Rollout):
        rewards = torch.from_numpy(batch.rewards)
        live = torch.from_numpy(~(batch.terminated | batch.truncated)).float()
        returns, running = torch.zeros_like(rewards), torch.zeros_like(rewards[0])
        for t in reversed(range(len(rewards))):
            running = rewards[t] + self.config.gamma * live[t] * running
            returns[t] = running
        advantages = (returns - returns.mean()) / (returns.std() + 1e-8)
        actor_out, _ = model(torch.from_numpy(batch.obs))
        log_probs = model.distribution(actor_out).log_prob(torch.from_numpy(batch.actions))
        loss = -(log_probs * advantages).mean()
        return loss, {"policy_loss": loss.item()}

    def clip_groups(self, model):
        return [ClipGroup("actor", list(model.policy.parameters()), self.config.max_grad_norm)]
