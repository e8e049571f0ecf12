"""``olaf ablation``: FIFO, OLAF, and OLAF with each policy and both, over seeds.

Variants (switch mode, PS aggregation, worker scaling, whether workers use P_s):

* ``fifo``: drop-tail switch, plain PS, all workers, which always send;
* ``olaf-always``: OLAF switch, plain PS, all workers, which always send (the OLAF queue
  without the worker's transmission control);
* ``olaf``: OLAF switch, plain PS, all workers sending with P_s (DESIGN.md §4);
* ``olaf+sa``: OLAF switch, staleness-aware PS (Stellaris), all workers;
* ``olaf+boost``: OLAF switch, plain PS, boosting-driven worker scaling (Nitro);
* ``olaf+decay``: OLAF switch, plain PS, workers following Nitro's ``d**k`` schedule alone,
  without the detector (what the detector adds is ``olaf+boost`` against this row);
* ``olaf+sa+boost``: both policies.

Every run uses its whole ``--total-steps`` budget (it does not stop at the target), so final returns
compare over the same wall-clock budget. Cost is worker-seconds: active logical workers
integrated over the run; "to target" is the time and cost until the target mean return
was first reached (runs that miss it count the whole duration and cost, a bound).
Logical workers share the machine's cores, so fewer active workers also means more CPU
for each remaining one: the table therefore also reports the CPU seconds the worker
processes used (``getrusage`` of the joined children), the cost on this machine.
"""

from __future__ import annotations

import argparse
import math
import resource
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from olaf.drl.cli_args import (
    add_run_arguments,
    check_env,
    config_from_args,
    resolve_target,
    usage_error,
)
from olaf.drl.stats import STALENESS_COLUMNS, mean_std, plus_minus, staleness_cells

HELP = ("ablation: fifo, olaf queue with workers always sending, olaf, olaf + staleness-aware "
        "aggregation, olaf + boost scaling, olaf + its decay schedule alone, both policies")

DEFAULT_DURATION = 600.0
"""Wall-clock cap; the budget is ``--total-steps``."""
DEFAULT_TOTAL_STEPS = 200_000

VARIANTS: dict[str, tuple[str, str, str, bool]] = {
    "fifo": ("fifo", "plain", "fixed", True),
    "olaf-always": ("olaf", "plain", "fixed", True),
    "olaf": ("olaf", "plain", "fixed", False),
    "olaf+sa": ("olaf", "staleness-aware", "fixed", False),
    "olaf+boost": ("olaf", "plain", "boost", False),
    "olaf+decay": ("olaf", "plain", "decay", False),
    "olaf+sa+boost": ("olaf", "staleness-aware", "boost", False),
}
"""Variant -> (switch mode, PS aggregation, worker scaling, workers always send)."""
COLORS = {"fifo": "tab:orange", "olaf-always": "tab:olive", "olaf": "tab:blue",
          "olaf+sa": "tab:green", "olaf+boost": "tab:red", "olaf+decay": "tab:brown",
          "olaf+sa+boost": "tab:purple"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_run_arguments(parser, duration=DEFAULT_DURATION, total_steps=DEFAULT_TOTAL_STEPS)
    parser.add_argument("--seeds", type=int, default=3, help="seeds per variant (default 3)")
    parser.add_argument("--first-seed", type=int, default=0, help="first seed (default 0)")
    parser.add_argument("--variants", default=",".join(VARIANTS),
                        help=f"comma-separated subset of {', '.join(VARIANTS)} (default: all)")
    parser.add_argument("--out", type=Path, default=Path("runs/ablation"),
                        help="directory for per-run metrics, the table and the plot")
    parser.epilog = ("--aggregation and --scaling are set by each variant; the other policy "
                     "parameters apply to the variants that use them. Without --target-reward "
                     "the target is the environment's spec.reward_threshold (greedy "
                     "evaluation).")


def worker_seconds_at(timeline: list[tuple[float, int]], t: float) -> float:
    """Worker-seconds spent by time ``t`` given ``(time, active from then on)`` rows."""
    total = 0.0
    for i, (start, active) in enumerate(timeline):
        end = timeline[i + 1][0] if i + 1 < len(timeline) else math.inf
        if t <= start:
            break
        total += active * (min(t, end) - start)
    return total


def _children_cpu_s() -> float:
    """User + system CPU seconds of every child process waited for so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def row_of(variant: str, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One table row: means ± std over the seeds of a variant."""
    reached = [r for r in runs if r["time_to_target_s"] is not None]
    ttt = [r["time_to_target_s"] or r["duration_s"] for r in runs]
    ws_target = [r["worker_seconds_to_target"] for r in runs]
    return {
        "variant": variant,
        "seeds": len(runs),
        "reached": f"{len(reached)}/{len(runs)}",
        "time_to_target_s": plus_minus(ttt),
        "steps_to_target": plus_minus([r["steps_to_target"] if r["steps_to_target"] is not None
                                       else r["env_steps"] for r in runs], 0),
        "final_return": plus_minus([r["final_return"] for r in runs]),
        "final_eval_return": plus_minus([r.get("final_eval_return") for r in runs]),
        "worker_s_to_target": plus_minus(ws_target, 0),
        "worker_s_total": plus_minus([r["worker_seconds"] for r in runs], 0),
        "worker_cpu_s": plus_minus([r.get("worker_cpu_s") for r in runs], 0),
        "mean_active_workers": plus_minus([r["mean_active_workers"] for r in runs], 2),
        **staleness_cells(runs),
        "held_share": plus_minus([r.get("held_share") for r in runs], 2),
        "detector_overhead_pct": plus_minus([100 * r["detector_overhead_share"]
                                      if r.get("detector_overhead_share") is not None else None
                                      for r in runs], 1),
        "detector_cpu_ms": plus_minus([r.get("detector_mean_cpu_ms") for r in runs], 1),
        "skipped_share": plus_minus([r.get("skipped_share") for r in runs], 3),
        "worker_bytes": plus_minus([r["worker_bytes"] / 1e6 if r.get("worker_bytes") is not None
                                    else None for r in runs], 1),
        "_final": mean_std([r["final_return"] for r in runs])[0],
        "_ws_target": mean_std(ws_target)[0],
        "_cpu": mean_std([r.get("worker_cpu_s") for r in runs])[0],
    }


COLUMNS = (("variant", "variant"), ("seeds", "seeds"), ("reached", "reached"),
           ("env steps to target", "steps_to_target"), ("time to target (s)", "time_to_target_s"),
           ("final eval return", "final_eval_return"),
           ("final training return", "final_return"),
           ("worker-s to target", "worker_s_to_target"), ("worker-s total", "worker_s_total"),
           ("worker CPU-s", "worker_cpu_s"), ("skipped share", "skipped_share"),
           ("MB from workers", "worker_bytes"),
           ("mean active workers", "mean_active_workers"), *STALENESS_COLUMNS,
           ("held share", "held_share"), ("detector overhead %", "detector_overhead_pct"),
           ("detector CPU ms/round", "detector_cpu_ms"))


def markdown_table(rows: list[dict[str, Any]]) -> str:
    lines = ["| " + " | ".join(name for name, _ in COLUMNS) + " |",
             "|" + "|".join("---" for _ in COLUMNS) + "|"]
    lines += ["| " + " | ".join(str(r[key]) for _, key in COLUMNS) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def write_plot(results: dict[str, list[Any]], path: Path, target: float | None) -> Path:
    """Rolling mean return vs wall time and vs worker-seconds, one line per run."""
    # matplotlib: imported when the plot is drawn, so `olaf --help` stays fast; the Agg
    # backend is chosen before pyplot is imported.
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # olaf.drl.results: ~5 ms of imports that every `olaf ...` would pay (cli.py builds every
    # subcommand's parser), so imported when the command runs.
    from olaf.drl.results import rolling_returns

    fig, axes = plt.subplots(1, 2, figsize=(13, 4.5))
    env = ""
    for variant, runs in results.items():
        for i, r in enumerate(runs):
            env = r.config.env_id
            t, _, mean = rolling_returns(r.episodes, r.config.target_window)
            timeline = r.policies.get("workers_over_time") or [(0.0, r.config.workers)]
            ws = np.array([worker_seconds_at(timeline, x) for x in t])
            label = variant if i == 0 else None
            axes[0].plot(t, mean, color=COLORS.get(variant), lw=1.1, alpha=0.8, label=label)
            axes[1].plot(ws, mean, color=COLORS.get(variant), lw=1.1, alpha=0.8, label=label)
    for ax, xlabel in zip(axes, ("wall time (s)", "worker-seconds (active logical workers x s)"),
                          strict=True):
        if target is not None:
            ax.axhline(target, color="gray", ls="--", lw=1)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("mean return (last 20 episodes)")
        ax.grid(alpha=0.3)
        ax.legend(loc="best", fontsize=8)
    fig.suptitle(f"{env}: ablation of the workers' P_s, staleness-aware aggregation and boost "
                 "scaling")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def variant_config(args: argparse.Namespace, variant: str, *, seed: int,
                   target: float | None) -> Any:
    """The RunConfig of one variant (the flags, with the variant's mode and policies)."""
    mode, aggregation, scaling, always_send = VARIANTS[variant]
    base = config_from_args(args, mode=mode, seed=seed, target=target, stop_at_target=False,
                            always_send=always_send and mode == "olaf")
    return replace(base, aggregation=aggregation, scaling=scaling)


def run(args: argparse.Namespace) -> int:
    # rich, torch and gymnasium (olaf.drl.local), rich (olaf.drl.display), and ~10 ms of
    # olaf.drl.report: imported when the command runs, so `olaf --help` stays fast.
    from rich.console import Console
    from rich.table import Table

    from olaf.drl.display import Progress
    from olaf.drl.local import run_experiment
    from olaf.drl.report import write_json, write_metrics

    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown or not variants:
        usage_error(f"olaf ablation: error: unknown variant(s) {unknown}; "
                         f"choose from {', '.join(VARIANTS)}")
    if args.seeds < 1:
        usage_error("olaf ablation: error: --seeds must be >= 1")
    target = resolve_target(args)
    console = Console() if Console().is_terminal else Console(width=160)
    results: dict[str, list[Any]] = {v: [] for v in variants}
    summaries: dict[str, list[dict[str, Any]]] = {v: [] for v in variants}
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        for variant in variants:
            cfg = check_env(variant_config(args, variant, seed=seed, target=target))
            title = f"olaf ablation: {cfg.env_id}, {cfg.workers} workers, {variant}, seed {seed}"
            cpu_before = _children_cpu_s()
            with Progress(title, cfg.duration, console) as progress:
                result = run_experiment(cfg, progress)
            summary = result.summary()
            summary["worker_cpu_s"] = _children_cpu_s() - cpu_before
            summary["duration_s"] = summary["wall_time_s"]
            summary["worker_seconds_to_target"] = (
                worker_seconds_at(summary["workers_over_time"], summary["time_to_target_s"])
                if summary["time_to_target_s"] is not None else summary["worker_seconds"])
            write_metrics(result, args.out / f"{variant}-seed{seed}")
            console.print(f"{variant} seed {seed}: final return {summary['final_return']:.1f}, "
                          f"time to target {summary['time_to_target_s'] or '-'} s, "
                          f"worker-s {summary.get('worker_seconds', math.nan):.0f}")
            results[variant].append(result)
            summaries[variant].append(summary)
    rows = [row_of(v, summaries[v]) for v in variants]
    table = Table(title=f"olaf ablation: {args.env}, target {target}")
    for name, _ in COLUMNS:
        table.add_column(name, justify="right")
    for r in rows:
        table.add_row(*[str(r[key]) for _, key in COLUMNS])
    console.print(table)
    by = {r["variant"]: r for r in rows}
    ratios: dict[str, float] = {}
    if "olaf" in by:
        for v in variants:
            if v != "olaf":
                ratios[f"{v}_final_return_over_olaf"] = by[v]["_final"] / by["olaf"]["_final"]
                ratios[f"{v}_worker_s_to_target_over_olaf"] = (by[v]["_ws_target"]
                                                               / by["olaf"]["_ws_target"])
                ratios[f"{v}_worker_cpu_s_over_olaf"] = by[v]["_cpu"] / by["olaf"]["_cpu"]
        console.print("vs olaf: " + ", ".join(f"{k} {v:.2f}" for k, v in ratios.items()))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "ablation.md").write_text(markdown_table(rows))
    plot = write_plot(results, args.out / "ablation.png", target)
    write_json(args.out / "ablation.json", {
        "env": args.env, "target_reward": target, "duration_s": args.duration,
        "workers": args.workers, "seeds": args.seeds, "first_seed": args.first_seed,
        "rows": [{k: v for k, v in r.items() if not k.startswith("_")} for r in rows],
        "ratios_vs_olaf": ratios, "runs": summaries})
    console.print(f"wrote {plot}, {args.out / 'ablation.md'} and {args.out / 'ablation.json'}")
    return 0
