"""Command-line flags shared by ``olaf run`` and ``olaf compare``, and their RunConfig."""

from __future__ import annotations

import argparse
from dataclasses import replace

from olaf.drl.config import A2CConfig, RunConfig

DEFAULT_TARGETS = {"CartPole-v1": 195.0, "LunarLander-v3": -100.0}
"""Target mean returns ``olaf compare`` uses when none is given: CartPole's classic
"solved" bar, and for LunarLander a level its learner reaches within minutes on 2 cores
(the 200 "solved" bar takes far longer than these runs)."""


def add_run_arguments(parser: argparse.ArgumentParser, *, duration: float) -> None:
    d = RunConfig()
    parser.add_argument("--env", default=d.env_id,
                        help=f"gymnasium id, Box observations, Discrete actions (default {d.env_id})")
    parser.add_argument("--workers", type=int, default=d.workers,
                        help=f"logical workers (default {d.workers})")
    parser.add_argument("--processes", type=int, default=d.processes,
                        help="worker processes hosting them round-robin (default: min(workers, 2))")
    parser.add_argument("--pull-rate", type=float, default=d.pull_rate,
                        help=f"PULLs/s of the PS, the bottleneck in blocks/s (default {d.pull_rate:g})")
    parser.add_argument("--capacity", type=int, default=d.capacity,
                        help=f"switch queue slots (default {d.capacity})")
    parser.add_argument("--values", type=int, default=d.values,
                        help=f"V, values per block (default {d.values})")
    parser.add_argument("--duration", type=float, default=duration,
                        help=f"wall-clock budget in seconds (default {duration:g})")
    parser.add_argument("--target-reward", type=float, default=None,
                        help="stop once the mean return of the last 20 episodes reaches this")
    parser.add_argument("--lr", type=float, default=A2CConfig().learning_rate,
                        help=f"Adam learning rate at the PS (default {A2CConfig().learning_rate:g})")
    parser.add_argument("--hidden", type=int, default=A2CConfig().hidden,
                        help=f"hidden layer width (default {A2CConfig().hidden})")


def config_from_args(args: argparse.Namespace, *, mode: str, seed: int,
                     target: float | None, stop_at_target: bool = True) -> RunConfig:
    """A RunConfig, or SystemExit with a one-line message on bad values."""
    try:
        learner = A2CConfig(learning_rate=args.lr, hidden=args.hidden)
        return RunConfig(env_id=args.env, workers=args.workers, processes=args.processes,
                         mode=mode, pull_rate=args.pull_rate, capacity=args.capacity,
                         values=args.values, duration=args.duration, target_reward=target,
                         stop_at_target=stop_at_target, seed=seed, learner=learner)
    except ValueError as exc:
        raise SystemExit(f"olaf: error: {exc}") from None


def check_env(cfg: RunConfig) -> RunConfig:
    """Fail early, before any process starts, on an environment the learner cannot use."""
    from olaf.drl.model import env_dimensions

    try:
        env_dimensions(cfg.env_id)
    except ValueError as exc:
        raise SystemExit(f"olaf: error: {exc}") from None
    return replace(cfg)
