"""Greedy evaluation of the parameter server's weights, on environments of its own.

Training returns mix many policy versions and the exploration noise of sampling; the
question "is it solved?" is asked of the greedy policy of one model version (the most
likely action, or a Gaussian policy's mean clipped to the action bounds), on separate
environments with their own seeds. ``olaf run`` asks it every ``eval_every`` environment
steps of an ``Evaluator`` that each backend runs apart from the workers (the local
backend: a process niced like a worker, so that it takes no more CPU than one worker).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from olaf.algorithm import load_flat_parameters
from olaf.drl.learners import run_model

EVAL_SEED_OFFSET = 1_000_003
"""Evaluation environments are seeded apart from every worker's (``seed * 1000 + w``)."""


def default_target(env_id: str) -> float | None:
    """The environment's ``spec.reward_threshold`` (475 CartPole-v1, 200 LunarLander-v3)."""
    import gymnasium as gym

    try:
        spec = gym.spec(env_id)
    except gym.error.Error:
        return None
    return None if spec.reward_threshold is None else float(spec.reward_threshold)


def greedy_actions(policy: Any, obs: Any, action_space: Any) -> np.ndarray:
    """The greedy actions of ``policy`` for a batch of observations (a float32 tensor).

    ``policy`` is a model with a ``greedy(obs)`` method (the algorithm API's contract,
    ``ActorCritic.greedy``), or a network whose output is the logits of a Discrete action
    space or the mean action of a Box one (``ActorCritic.policy``), clipped to its bounds.
    """
    import gymnasium as gym
    import torch

    with torch.no_grad():
        if hasattr(policy, "greedy"):
            return np.asarray(policy.greedy(obs).numpy())
        out = policy(obs).numpy()
    if isinstance(action_space, gym.spaces.Discrete):
        return out.argmax(-1)
    return np.clip(out, action_space.low, action_space.high)


def evaluate_greedy(policy: Any, env_id: str, episodes: int, seed: int) -> np.ndarray:
    """Undiscounted returns of ``episodes`` greedy episodes, stepped side by side.

    ``policy``: a model with ``greedy(obs)``, or a network mapping a (n, obs_dim) float32
    tensor to logits or mean actions (``greedy_actions``).
    """
    import gymnasium as gym
    import torch

    envs = [gym.make(env_id) for _ in range(episodes)]
    try:
        obs = np.stack([np.asarray(e.reset(seed=seed + i)[0], np.float32)
                        for i, e in enumerate(envs)])
        returns = np.zeros(episodes)
        live = np.ones(episodes, bool)
        while live.any():
            idx = np.flatnonzero(live)
            actions = greedy_actions(policy, torch.from_numpy(obs[idx]), envs[0].action_space)
            for i, a in zip(idx.tolist(), list(actions), strict=True):
                o, r, term, trunc, _ = envs[i].step(a)
                returns[i] += float(r)
                obs[i] = o
                if term or trunc:
                    live[i] = False
        return returns
    finally:
        for e in envs:
            e.close()


class Evaluator:
    """Greedy evaluation of a run's weights, each evaluation on seeds of its own.

    Every backend's evaluator (a process, a Ray actor, the testbed's launcher) is one of
    these: the n-th evaluation of a run plays the same episodes whoever runs it.
    """

    def __init__(self, cfg: Any) -> None:
        self.cfg = cfg
        self.model = run_model(cfg)
        self.count = 0

    def evaluate(self, weights: np.ndarray) -> tuple[float, float]:
        """(mean, std) of the greedy returns of ``weights`` on the next evaluation's seeds."""
        cfg = self.cfg
        load_flat_parameters(self.model, weights)
        seed = EVAL_SEED_OFFSET + 10_007 * cfg.seed + self.count * cfg.eval_episodes
        self.count += 1
        returns = evaluate_greedy(self.model, cfg.env_id, cfg.eval_episodes, seed)
        return float(returns.mean()), float(returns.std())

    def final(self, weights: np.ndarray) -> float:
        """Mean greedy return of the weights a run ended with, on seeds apart from the
        evaluations during the run."""
        cfg = self.cfg
        load_flat_parameters(self.model, weights)
        return float(evaluate_greedy(self.model, cfg.env_id, cfg.eval_episodes,
                                     EVAL_SEED_OFFSET - 1 - cfg.seed).mean())
