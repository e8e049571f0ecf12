"""``olaf run``: asynchronous IMPACT (or A2C) workers through the OLAF software switch, here."""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
import time
from pathlib import Path
from typing import Any

HELP = ("train asynchronous IMPACT (or A2C) workers through an embedded OLAF switch, evaluate "
        "the greedy policy, and plot the metrics")

RESUME_OPTIONS = ("resume", "total_steps", "duration", "checkpoint_dir", "checkpoint_every",
                  "out", "tensorboard", "max_restarts")
"""What ``--resume DIR`` lets the command line change; the rest is the checkpoint's run."""


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text} must be >= 0")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from olaf.drl.cli_args import add_backend_arguments, add_run_arguments

    # duration None: RunConfig's 180 s cap (the main job solves CartPole-v1 within 3 minutes
    # on 2 cores), lifted by an explicit --total-steps (cli_args.run_budget).
    add_run_arguments(parser, duration=None)
    add_backend_arguments(parser)
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
    platform = parser.add_argument_group("checkpoints, fault tolerance, elastic workers "
                                         "(docs/platform.md)")
    platform.add_argument("--checkpoint-dir", type=Path, default=None, metavar="DIR",
                          help="write a checkpoint (PS weights, Adam state, version, RNG, config, "
                          "metrics) to DIR/checkpoint.npz, atomically, at the end of the run and "
                          "every --checkpoint-every env steps")
    platform.add_argument("--checkpoint-every", type=_positive_int, default=0, metavar="STEPS",
                          help="environment steps (all workers) between checkpoints; 0: only at "
                          "the end (default 0)")
    platform.add_argument("--resume", type=Path, default=None, metavar="DIR",
                          help="continue the run checkpointed in DIR (its configuration, versions, "
                          "env steps and metrics); only --total-steps, --duration, "
                          "--checkpoint-dir/-every, --out, --tensorboard, --max-restarts may "
                          "change; checkpoints go on to DIR unless --checkpoint-dir is given")
    platform.add_argument("--max-workers", type=_positive_int, default=0, metavar="N",
                          help="logical workers the run can grow to with `olaf workers OUT add N` "
                          "(default: --workers)")
    platform.add_argument("--max-restarts", type=_positive_int, default=10, metavar="N",
                          help="dead worker processes restarted before the run ends with an error "
                          "(default 10)")
    platform.add_argument("--chaos", default=None, metavar="PLAN",
                          help="inject faults during training: a TOML/JSON plan file or inline "
                          "TOML of events keyed by env steps (loss on worker-switch or switch-ps, "
                          "switch-restart, kill-workers, ps-crash; docs/platform.md, Chaos)")


def _defaults() -> dict[str, Any]:
    parser = argparse.ArgumentParser(add_help=False)
    add_arguments(parser)
    return vars(parser.parse_args([]))


def _resume_config(args: argparse.Namespace) -> tuple[Any, Any]:
    """The checkpoint and the configuration to continue it with (exit 2 on a bad one)."""
    from olaf.drl.checkpoint import CheckpointError, load
    from olaf.drl.cli_args import usage_error

    changed = sorted(k for k, v in _defaults().items()
                     if k not in RESUME_OPTIONS and getattr(args, k, v) != v)
    if changed:
        usage_error("olaf run: error: --resume continues the checkpoint's configuration; "
                    f"not allowed with it: {', '.join('--' + k.replace('_', '-') for k in changed)}")
    try:
        ckpt = load(args.resume)
    except CheckpointError as exc:
        usage_error(f"olaf run: error: --resume: {exc}")
    given = {k for k, v in _defaults().items() if getattr(args, k, v) != v}
    cfg = ckpt.config
    changes: dict[str, Any] = {"checkpoint_dir": str(args.checkpoint_dir or args.resume)}
    for key in ("total_steps", "duration", "checkpoint_every", "max_restarts"):
        if key in given:
            changes[key] = getattr(args, key)
    if "total_steps" in given and "duration" not in given:
        changes["duration"] = math.inf  # as for a new run: a step budget is meant to be spent
    try:
        return ckpt, dataclasses.replace(cfg, **changes)
    except ValueError as exc:
        usage_error(f"olaf run: error: {exc}")


def link_figures(cfg: Any) -> Any:
    """The run's bottleneck figures (olaf.drl.bottleneck.Figures), for the live display."""
    from olaf.algorithm import flat_parameters
    from olaf.drl.bottleneck import figures
    from olaf.drl.learners import run_model
    from worker_transport.fixedpoint import num_blocks

    blocks = num_blocks(len(flat_parameters(run_model(cfg))), cfg.values)
    return figures(cfg.capacity, cfg.pull_rate, cfg.values, blocks)


def runner(cfg: Any) -> Any:
    """The function that runs ``cfg``: real processes, or the virtual clock."""
    if cfg.clock == "virtual":
        from olaf.drl.simulated import run_simulated

        return run_simulated
    from olaf.drl.local import run_experiment

    return run_experiment


def run(args: argparse.Namespace) -> int:
    if args.clock == "virtual" and (args.backend != "local" or args.address or args.switch
                                    or args.resume or args.checkpoint_dir or args.max_workers):
        from olaf.drl.cli_args import usage_error

        usage_error("olaf run: error: --clock virtual runs in this process only: no --backend "
                    "ray, --resume, --checkpoint-dir or --max-workers")
    if args.chaos is not None and (args.backend != "local" or args.address or args.switch
                                   or args.switch_port is not None):
        from olaf.drl.cli_args import usage_error

        usage_error("olaf run: error: --chaos needs the embedded switch (--backend local)")
    if args.backend != "local" or args.address or args.switch or args.switch_port is not None:
        from olaf.drl.ray_backend import run_command

        return run_command(args)
    from rich.console import Console

    from olaf.drl import chaos as chaos_mod
    from olaf.drl.cli_args import check_env, config_from_args, resolve_target, usage_error
    from olaf.drl.display import Progress, summary_table
    from olaf.drl.local import run_experiment
    from olaf.drl.report import write_metrics, write_plots
    from olaf.drl.results import RunFailed

    if args.checkpoint_every and not (args.checkpoint_dir or args.resume):
        usage_error("olaf run: error: --checkpoint-every needs --checkpoint-dir")
    plan = None
    if args.chaos is not None and args.resume is None:  # with --resume: refused below
        try:
            plan = chaos_mod.read_plan(args.chaos)
        except chaos_mod.PlanError as exc:
            usage_error(f"olaf run: error: --chaos: {exc}")
    resume = None
    if args.resume is not None:
        resume, cfg = _resume_config(args)
    else:
        cfg = check_env(config_from_args(args, mode=args.mode, seed=args.seed,
                                         target=resolve_target(args), always_send=args.always_send))
        if args.max_workers and args.max_workers < cfg.workers:
            usage_error(f"olaf run: error: --max-workers {args.max_workers} is below --workers "
                        f"{cfg.workers}")
        cfg = dataclasses.replace(cfg, checkpoint_dir=str(args.checkpoint_dir or ""),
                                  checkpoint_every=args.checkpoint_every,
                                  max_workers=args.max_workers, max_restarts=args.max_restarts)
    if plan is not None:
        try:
            chaos_mod.check_plan(plan, cfg)
        except chaos_mod.PlanError as exc:
            usage_error(f"olaf run: error: --chaos: {exc}")
        if plan.crash is not None:  # the plan's crash ends this part, not the target
            cfg = dataclasses.replace(cfg, stop_at_target=False)
    out = args.out or Path("runs") / time.strftime("run-%Y%m%d-%H%M%S")
    out.mkdir(parents=True, exist_ok=True)
    chaos = chaos_mod.Chaos(plan, out) if plan is not None else None
    on_resume = None
    crash_record = None if resume is None else chaos_mod.crash_record(args.resume)
    if crash_record is not None:
        on_resume = chaos_mod.record_resumed(out)  # what the restore gave, for the checks
        cfg = dataclasses.replace(cfg, stop_at_target=crash_record["stop_at_target"])
    console = Console() if Console().is_terminal else Console(width=120)
    title = (f"olaf run: {cfg.algo} on {cfg.env_id}, {cfg.workers} workers in "
             f"{cfg.worker_processes} processes, {cfg.variant}, pull {cfg.pull_rate:g}/s, "
             f"target {cfg.target_reward}")
    if resume is not None:
        title += f", resumed at {resume.env_steps:,} env steps (version {resume.model_version})"
    failed = None
    if cfg.clock == "virtual":
        title += ", virtual clock (simulated s)"
    with Progress(title, cfg.duration, console, total_steps=cfg.total_steps,
                  link=link_figures(cfg)) as progress:
        try:
            if cfg.clock == "virtual":
                result = runner(cfg)(cfg, progress, tensorboard=args.tensorboard, chaos=chaos)
            else:
                result = run_experiment(cfg, progress, tensorboard=args.tensorboard, run_dir=out,
                                        resume=resume, chaos=chaos, on_resume=on_resume)
        except RunFailed as exc:
            failed, result = exc, exc.result
    console.print(summary_table(result.summary(), result.scale_decisions))
    files = write_metrics(result, out) + write_plots(result, out)
    console.print(f"wrote {len(files)} files to {out}/: " + ", ".join(p.name for p in files))
    if failed is not None:
        print(f"olaf run: error: {failed}", file=sys.stderr)
        return 1
    return 0
