"""Command-line flags shared by ``olaf run`` and ``olaf compare``, and their RunConfig."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from typing import NoReturn

from olaf.drl.boosting import BoostConfig
from olaf.drl.config import AGGREGATIONS, SCALINGS, A2CConfig, RunConfig
from olaf.drl.staleness import StalenessConfig

DEFAULT_TARGETS = {"CartPole-v1": 195.0, "LunarLander-v3": -100.0}
"""Target mean returns ``olaf compare`` uses when none is given: CartPole's classic
"solved" bar, and for LunarLander a level its learner reaches within minutes on 2 cores
(the 200 "solved" bar takes far longer than these runs)."""


def usage_error(message: str) -> NoReturn:
    """One line on stderr and exit code 2, as for any bad command-line value."""
    print(message, file=sys.stderr)
    raise SystemExit(2)


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
    parser.add_argument("--shuffle-blocks", action="store_true",
                        help="workers send each gradient's blocks in random order, not by block id")
    parser.add_argument("--feedback-ttl-ms", type=float, default=d.feedback_ttl_ms, metavar="MS",
                        help="workers' P_s: ACK feedback older than this no longer counts and the "
                        f"next update is a probe, DESIGN.md §4 (default {d.feedback_ttl_ms:g})")
    parser.add_argument("--duration", type=float, default=duration,
                        help=f"wall-clock budget in seconds (default {duration:g})")
    parser.add_argument("--target-reward", type=float, default=None,
                        help="stop once the mean return of the last 20 episodes reaches this")
    parser.add_argument("--lr", type=float, default=A2CConfig().learning_rate,
                        help=f"Adam learning rate at the PS (default {A2CConfig().learning_rate:g})")
    parser.add_argument("--hidden", type=int, default=A2CConfig().hidden,
                        help=f"hidden layer width (default {A2CConfig().hidden})")
    add_policy_arguments(parser)


def add_policy_arguments(parser: argparse.ArgumentParser) -> None:
    """The PS aggregation and worker-scaling policies (both off by default)."""
    s, b, d = StalenessConfig(), BoostConfig(), RunConfig()
    group = parser.add_argument_group("policies (Stellaris staleness-aware aggregation, "
                                      "Nitro boosting-driven worker scaling)")
    group.add_argument("--aggregation", choices=AGGREGATIONS, default=d.aggregation,
                       help="PS aggregation: plain (apply each DATA block) or staleness-aware "
                            f"(default {d.aggregation})")
    group.add_argument("--staleness-decay", type=float, default=s.decay,
                       help=f"d in beta_k = delta_max * d^k (default {s.decay:g})")
    group.add_argument("--max-hold", type=float, default=s.max_hold,
                       help=f"seconds a held block waits at most (default {s.max_hold:g})")
    group.add_argument("--max-pending", type=int, default=s.max_pending,
                       help=f"held DATA blocks per parameter block at most (default {s.max_pending})")
    group.add_argument("--is-rho", type=float, default=s.rho,
                       help=f"truncation rho of the importance weight (default {s.rho:g})")
    group.add_argument("--scaling", choices=SCALINGS, default=d.scaling,
                       help=f"worker scaling: fixed or boost (default {d.scaling})")
    group.add_argument("--min-workers", type=int, default=b.min_workers,
                       help=f"I_min of boost scaling (default {b.min_workers}; I_max is --workers)")
    group.add_argument("--boost-period", type=float, default=d.boost_period,
                       help=f"seconds between boosting-detector rounds (default {d.boost_period:g})")
    group.add_argument("--boost-decay", type=float, default=b.decay,
                       help=f"d in S_k (default {b.decay:g})")
    group.add_argument("--boost-window", type=int, default=b.window,
                       help=f"rounds in the sliding window of S_k (default {b.window})")
    group.add_argument("--lanczos-iterations", type=int, default=b.lanczos_iterations,
                       help=f"Hessian-vector products per Lanczos probe (default {b.lanczos_iterations})")


def policies_from_args(args: argparse.Namespace) -> dict:
    """RunConfig keyword arguments of the two policies (ValueError on bad values)."""
    return {
        "aggregation": args.aggregation,
        "staleness": StalenessConfig(decay=args.staleness_decay, max_hold=args.max_hold,
                                     max_pending=args.max_pending, rho=args.is_rho),
        "scaling": args.scaling,
        "boost": BoostConfig(window=args.boost_window, decay=args.boost_decay,
                             min_workers=args.min_workers,
                             lanczos_iterations=args.lanczos_iterations),
        "boost_period": args.boost_period,
    }


def config_from_args(args: argparse.Namespace, *, mode: str, seed: int,
                     target: float | None, stop_at_target: bool = True,
                     always_send: bool = False) -> RunConfig:
    """A RunConfig, or exit 2 with a one-line message on bad values. ``always_send``:
    workers send every update in olaf mode too (the OLAF queue without P_s)."""
    try:
        learner = A2CConfig(learning_rate=args.lr, hidden=args.hidden)
        return RunConfig(env_id=args.env, workers=args.workers, processes=args.processes,
                         mode=mode, always_send=always_send,
                         feedback_ttl_ms=args.feedback_ttl_ms,
                         pull_rate=args.pull_rate, capacity=args.capacity,
                         values=args.values, shuffle_blocks=args.shuffle_blocks,
                         duration=args.duration, target_reward=target,
                         stop_at_target=stop_at_target, seed=seed, learner=learner,
                         **policies_from_args(args))
    except ValueError as exc:
        usage_error(f"olaf: error: {exc}")


def check_env(cfg: RunConfig) -> RunConfig:
    """Fail early, before any process starts, on an environment the learner cannot use."""
    from olaf.drl.model import env_dimensions

    try:
        env_dimensions(cfg.env_id)
    except ValueError as exc:
        usage_error(f"olaf: error: {exc}")
    return replace(cfg)
