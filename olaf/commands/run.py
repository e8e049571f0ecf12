"""``olaf run``: asynchronous IMPACT (or A2C) workers through the OLAF software switch, here."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

HELP = ("train asynchronous IMPACT (or A2C) workers through an embedded OLAF switch, evaluate "
        "the greedy policy, and plot the metrics")

DEFAULT_DURATION = 180.0
"""Wall-clock cap: the main job is to solve CartPole-v1 within 3 minutes on 2 cores."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from olaf.drl.cli_args import add_run_arguments

    add_run_arguments(parser, duration=DEFAULT_DURATION)
    parser.add_argument("--mode", choices=("olaf", "fifo"), default="olaf",
                        help="olaf: merge/replace/drop + P_s senders; fifo: drop-tail baseline")
    parser.add_argument("--always-send", action="store_true",
                        help="with --mode olaf: workers send every update (P_s = 1), the OLAF queue "
                        "without the workers' transmission control (fifo workers always send)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument("--out", type=Path, default=None,
                        help="directory for metrics and plots (default runs/run-<time>)")
    parser.add_argument("--tensorboard", type=Path, default=None, metavar="DIR",
                        help="also write the run's scalars as TensorBoard event files to DIR")


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from olaf.drl.cli_args import check_env, config_from_args, resolve_target
    from olaf.drl.display import Progress, summary_table
    from olaf.drl.report import write_metrics, write_plots
    from olaf.drl.runner import run_experiment

    cfg = check_env(config_from_args(args, mode=args.mode, seed=args.seed,
                                     target=resolve_target(args), always_send=args.always_send))
    out = args.out or Path("runs") / time.strftime("run-%Y%m%d-%H%M%S")
    console = Console() if Console().is_terminal else Console(width=120)
    title = (f"olaf run: {cfg.algo} on {cfg.env_id}, {cfg.workers} workers in "
             f"{cfg.worker_processes} processes, {cfg.variant}, pull {cfg.pull_rate:g}/s, "
             f"target {cfg.target_reward}")
    with Progress(title, cfg.duration, console, total_steps=cfg.total_steps) as progress:
        result = run_experiment(cfg, progress, tensorboard=args.tensorboard)
    console.print(summary_table(result.summary()))
    files = write_metrics(result, out) + write_plots(result, out)
    console.print(f"wrote {len(files)} files to {out}/: " + ", ".join(p.name for p in files))
    return 0
