"""``olaf compare``: the same run in ``olaf`` and ``fifo`` mode over several seeds."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from olaf.drl.stats import mean_std, plus_minus

HELP = "run the same configuration in olaf and fifo mode over seeds and compare convergence"

DEFAULT_DURATION = 60.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from olaf.drl.cli_args import DEFAULT_TARGETS, add_run_arguments

    add_run_arguments(parser, duration=DEFAULT_DURATION)
    parser.add_argument("--seeds", type=int, default=3, help="seeds 0..N-1 per mode (default 3)")
    parser.add_argument("--first-seed", type=int, default=0, help="first seed (default 0)")
    parser.add_argument("--out", type=Path, default=Path("runs/compare"),
                        help="directory for per-run metrics, the table and the combined plot")
    parser.epilog = ("Without --target-reward the target is "
                     + ", ".join(f"{k}: {v:g}" for k, v in DEFAULT_TARGETS.items())
                     + ". Every run lasts --duration (it does not stop at the target, so that final "
                     "returns compare over the same budget). A run that never reaches the "
                     "target counts as taking its full duration (a bound).")


def speedups(olaf: list[dict[str, Any]], fifo: list[dict[str, Any]]) -> list[float]:
    """Per seed: FIFO time to target / OLAF time to target (> 1: OLAF converges faster).

    A run that missed the target counts with its wall time, so that seed's ratio is a
    bound; a seed where neither mode reached the target says nothing and is left out.
    """
    out = []
    for o, f in zip(olaf, fifo, strict=True):
        if o["time_to_target_s"] is None and f["time_to_target_s"] is None:
            continue
        to = o["time_to_target_s"] or o["wall_time_s"]
        tf = f["time_to_target_s"] or f["wall_time_s"]
        out.append(tf / to)
    return out


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from olaf.drl.cli_args import DEFAULT_TARGETS, check_env, config_from_args
    from olaf.drl.display import Progress, compare_table
    from olaf.drl.report import write_compare_plot, write_json, write_metrics, write_plots
    from olaf.drl.runner import run_experiment

    if args.seeds < 1:
        raise SystemExit("olaf compare: error: --seeds must be >= 1")
    target = args.target_reward if args.target_reward is not None else DEFAULT_TARGETS.get(args.env)
    console = Console() if Console().is_terminal else Console(width=150)
    results = []
    summaries: dict[str, list[dict[str, Any]]] = {"olaf": [], "fifo": []}
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        for mode in ("olaf", "fifo"):
            cfg = check_env(config_from_args(args, mode=mode, seed=seed, target=target,
                                                   stop_at_target=False))
            title = f"olaf compare: {cfg.env_id}, {cfg.workers} workers, {mode}, seed {seed}"
            with Progress(title, cfg.duration, console) as progress:
                result = run_experiment(cfg, progress)
            summary = result.summary()
            run_dir = args.out / f"{mode}-seed{seed}"
            write_metrics(result, run_dir)
            write_plots(result, run_dir)
            console.print(f"{mode} seed {seed}: time to target "
                          f"{summary['time_to_target_s'] or '-'} s, final return "
                          f"{summary['final_return']:.1f}, data in {run_dir}/")
            results.append(result)
            summaries[mode].append(summary)
    rows = []
    for mode, runs in summaries.items():
        reached = [r["time_to_target_s"] for r in runs if r["time_to_target_s"] is not None]
        ttt = [r["time_to_target_s"] or r["wall_time_s"] for r in runs]
        rows.append({
            "mode": mode,
            "seeds": len(runs),
            "reached": f"{len(reached)}/{len(runs)}",
            "ttt": plus_minus(ttt),
            "final": plus_minus([r["final_return"] for r in runs]),
            "aom_mean": plus_minus([r["aom_mean_ms"] for r in runs], 2),
            "aom_p99": plus_minus([r["aom_p99_ms"] for r in runs], 1),
            "bytes": plus_minus([r["bytes_to_ps"] / 1e6 for r in runs], 2) + " MB",
            "agg": plus_minus([r["mean_agg_count"] for r in runs], 2),
        })
    ratios = speedups(summaries["olaf"], summaries["fifo"])
    mean, std = mean_std(ratios)
    console.print(compare_table(rows))
    if ratios:
        console.print(f"target {target}: speedup (fifo time / olaf time to target) "
                      f"{mean:.2f} ± {std:.2f} over {len(ratios)} seed(s) where a mode reached "
                      "it; per seed " + ", ".join(f"{r:.2f}" for r in ratios)
                      + f"; time to target {100 * (1 - 1 / mean):+.0f} % shorter with olaf")
    else:
        console.print(f"target {target}: no run reached it, no speedup to report")
    plot = write_compare_plot(results, args.out / "compare.png")
    write_json(args.out / "compare.json", {"target_reward": target, "rows": rows,
                                          "speedup_per_seed": ratios, "speedup_mean": mean,
                                          "speedup_std": std, "runs": summaries})
    console.print(f"wrote {plot} and {args.out / 'compare.json'}")
    return 0
