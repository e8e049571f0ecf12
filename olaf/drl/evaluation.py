"""Evaluation of the parameter server's weights, greedy and stochastic, on environments
of their own.

Training returns mix many policy versions and the exploration noise of sampling; the
question "is it solved?" is asked of one model version on separate environments with
their own seeds, under two policies: the greedy one (the most likely action, or a
Gaussian policy's mean clipped to the action bounds) and the stochastic one (actions
sampled from the policy, as the workers act, from a generator seeded with the
evaluation's seed). Both play the same environment seeds; ``RunConfig.eval_policy``
(greedy by default) says which one's mean is the run's evaluation and meets the target.
``olaf run`` asks every ``eval_every`` environment steps of an ``Evaluator`` that each
backend runs apart from the workers (the local backend: a process niced like a worker,
so that it takes no more CPU than one worker).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from olaf.algorithm import load_flat_parameters
from olaf.drl.learners import run_model
from olaf.drl.results import EvalScores

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


def can_sample(policy: Any) -> bool:
    """Whether ``policy`` can play stochastic episodes: it has ``act(obs, generator)``, the
    method ``VectorActor`` acts with (``ActorCritic.act``). A model with only ``greedy``,
    or a plain network, cannot: its stochastic evaluations are NaN."""
    return callable(getattr(policy, "act", None))


def sampled_actions(policy: Any, obs: Any, action_space: Any, generator: Any) -> np.ndarray:
    """Actions sampled by ``policy.act`` for a batch of observations, drawn from
    ``generator``, clipped to a Box's bounds as ``VectorActor`` clips them for the env."""
    import gymnasium as gym
    import torch

    with torch.no_grad():
        actions = np.asarray(policy.act(obs, generator)[0].numpy())
    if isinstance(action_space, gym.spaces.Box):
        return np.clip(actions, action_space.low, action_space.high)
    return actions


def evaluate_policy(policy: Any, env_id: str, episodes: int, seed: int,
                    greedy: bool = True) -> np.ndarray:
    """Undiscounted returns of ``episodes`` episodes, stepped side by side, on environments
    seeded ``seed``, ``seed + 1``, ...

    ``greedy``: the greedy actions (``greedy_actions``: a model with ``greedy(obs)``, or a
    network mapping a (n, obs_dim) float32 tensor to logits or mean actions). Otherwise
    actions sampled by ``policy.act`` (``can_sample``; ValueError without it) from a torch
    generator seeded with ``seed``, so that the same seed plays the same episodes.
    """
    import gymnasium as gym
    import torch

    if not greedy and not can_sample(policy):
        raise ValueError(f"{type(policy).__name__} has no act(obs, generator): it cannot sample")
    generator = None if greedy else torch.Generator().manual_seed(seed)
    envs = [gym.make(env_id) for _ in range(episodes)]
    try:
        obs = np.stack([np.asarray(e.reset(seed=seed + i)[0], np.float32)
                        for i, e in enumerate(envs)])
        returns = np.zeros(episodes)
        live = np.ones(episodes, bool)
        space = envs[0].action_space
        while live.any():
            idx = np.flatnonzero(live)
            batch = torch.from_numpy(obs[idx])
            actions = (greedy_actions(policy, batch, space) if generator is None
                       else sampled_actions(policy, batch, space, generator))
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


def evaluate_greedy(policy: Any, env_id: str, episodes: int, seed: int) -> np.ndarray:
    """Undiscounted returns of ``episodes`` greedy episodes (``evaluate_policy``)."""
    return evaluate_policy(policy, env_id, episodes, seed, greedy=True)


def evaluate_both(policy: Any, env_id: str, episodes: int,
                  seed: int) -> tuple[np.ndarray, np.ndarray | None]:
    """Greedy and stochastic returns of ``episodes`` episodes each on the same environment
    seeds (``evaluate_policy``); the stochastic ones None when ``policy`` cannot sample.

    What every evaluation of a run plays, and ``olaf eval`` with it, so that the two agree
    on the same weights and seed."""
    greedy = evaluate_policy(policy, env_id, episodes, seed, greedy=True)
    if not can_sample(policy):
        return greedy, None
    return greedy, evaluate_policy(policy, env_id, episodes, seed, greedy=False)


def evaluation_seed(run_seed: int, count: int = 0, episodes: int = 0) -> int:
    """The first environment seed of a run's ``count``-th evaluation of ``episodes``
    episodes: ``olaf eval`` of a checkpoint replays the run's first evaluation's seeds."""
    return EVAL_SEED_OFFSET + 10_007 * run_seed + count * episodes


class Evaluator:
    """Evaluation of a run's weights, greedy and stochastic, each evaluation on seeds of
    its own.

    Every backend's evaluator (a process, a Ray actor, the testbed's launcher) is one of
    these: the n-th evaluation of a run plays the same episodes whoever runs it.
    """

    def __init__(self, cfg: Any) -> None:
        self.cfg = cfg
        self.model = run_model(cfg)
        self.stochastic = can_sample(self.model)
        self.count = 0

    def evaluate(self, weights: np.ndarray) -> EvalScores:
        """Greedy and stochastic (mean, std) of ``weights`` on the next evaluation's seeds,
        the same environment seeds for both (stochastic NaN when the model cannot sample)."""
        cfg = self.cfg
        load_flat_parameters(self.model, weights)
        seed = evaluation_seed(cfg.seed, self.count, cfg.eval_episodes)
        self.count += 1
        greedy, sampled = evaluate_both(self.model, cfg.env_id, cfg.eval_episodes, seed)
        if sampled is None:
            return EvalScores(float(greedy.mean()), float(greedy.std()))
        return EvalScores(float(greedy.mean()), float(greedy.std()),
                          float(sampled.mean()), float(sampled.std()))

    def final(self, weights: np.ndarray) -> float:
        """Mean return of the configured policy (greedy by default) of the weights a run
        ended with, on seeds apart from the evaluations during the run (NaN: stochastic,
        and the model cannot sample)."""
        cfg = self.cfg
        greedy = cfg.eval_policy == "greedy"
        if not greedy and not self.stochastic:
            return math.nan
        load_flat_parameters(self.model, weights)
        return float(evaluate_policy(self.model, cfg.env_id, cfg.eval_episodes,
                                     EVAL_SEED_OFFSET - 1 - cfg.seed, greedy=greedy).mean())
