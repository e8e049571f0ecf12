"""Greedy evaluation of the parameter server's weights, on environments of its own.

Training returns mix many policy versions and the exploration noise of sampling; the
question "is it solved?" is asked of the greedy policy (argmax of the logits) of one
model version, on separate environments with their own seeds. ``olaf run`` asks it
every ``eval_every`` environment steps in one evaluator process (``evaluator_main``),
niced like a worker so that it takes no more CPU than one worker does.
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


def evaluate_greedy(policy: Any, env_id: str, episodes: int, seed: int) -> np.ndarray:
    """Undiscounted returns of ``episodes`` greedy episodes, stepped side by side.

    ``policy`` maps a (n, obs_dim) float32 tensor to action logits (``ActorCritic.policy``).
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
            with torch.no_grad():
                actions = policy(torch.from_numpy(obs[idx])).argmax(-1).numpy()
            for i, a in zip(idx.tolist(), actions.tolist(), strict=True):
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

    from olaf.drl.model import build_model
    from olaf.drl.weights import WeightBoard

    torch.set_num_threads(1)
    with contextlib.suppress(OSError):
        os.nice(niceness)
    board = WeightBoard(num_params, name=board_name)
    model = build_model(cfg.env_id, cfg.algo_config.hidden, cfg.seed)
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
            returns = evaluate_greedy(model.policy, cfg.env_id, cfg.eval_episodes, seed)
            n += 1
            events.put(("eval", steps, elapsed, float(returns.mean()), float(returns.std()),
                        version, time.perf_counter() - began))
    finally:
        board.close()
