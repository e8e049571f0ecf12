"""Greedy evaluation of the parameter server's weights, on environments of its own.

Training returns mix many policy versions and the exploration noise of sampling; the
question "is it solved?" is asked of the greedy policy of one model version (the most
likely action, or a Gaussian policy's mean clipped to the action bounds), on separate
environments with their own seeds. ``olaf run`` asks it every ``eval_every`` environment
steps in one evaluator process (``evaluator_main``), niced like a worker so that it takes
no more CPU than one worker does.
"""

from __future__ import annotations

import contextlib
import os
import queue as queue_mod
import time
from typing import Any

import numpy as np

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


def evaluator_main(cfg: Any, board_name: str, num_params: int, requests: Any, events: Any,
                   stop: Any, niceness: int) -> None:
    """The evaluator process: for each ``(steps, elapsed)`` request, evaluate the newest
    weights and report ``("eval", steps, elapsed, mean, std, version, wall s)``."""
    import torch

    from olaf.algorithm import initial_model
    from olaf.drl.learners import make_algorithm
    from olaf.drl.weights import WeightBoard

    torch.set_num_threads(1)
    with contextlib.suppress(OSError):
        os.nice(niceness)
    board = WeightBoard(num_params, name=board_name)
    model = initial_model(make_algorithm(cfg), cfg.env_id, cfg.seed)
    events.put(("ready", os.getpid()))
    n = 0
    try:
        while not stop.is_set():
            try:
                steps, elapsed = requests.get(timeout=0.1)
            except queue_mod.Empty:
                continue
            began = time.perf_counter()
            weights, version = board.read()
            model.load_flat_parameters(weights)
            seed = EVAL_SEED_OFFSET + 10_007 * cfg.seed + n * cfg.eval_episodes
            returns = evaluate_greedy(model, cfg.env_id, cfg.eval_episodes, seed)
            n += 1
            events.put(("eval", steps, elapsed, float(returns.mean()), float(returns.std()),
                        version, time.perf_counter() - began))
    finally:
        board.close()
