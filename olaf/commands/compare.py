"""``olaf compare``: the same run in several modes over several seeds.

Modes: ``olaf`` (OLAF queue, workers send with P_s), ``olaf-always`` (OLAF queue, workers
always send: the queue without the worker's part) and ``fifo`` (drop-tail queue, workers
always send).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from olaf.drl.censored import Comparison, Outcome, compare, km_median
from olaf.drl.stats import plus_minus, staleness_cells

HELP = ("run the same configuration in olaf, olaf-always and fifo mode over seeds and "
        "compare convergence")

DEFAULT_DURATION = 600.0
"""Wall-clock cap; the budget is ``--total-steps``."""
DEFAULT_TOTAL_STEPS = 300_000

MODES: dict[str, tuple[str, bool, str]] = {
    "olaf": ("olaf", False, "P_s"),
    "olaf-always": ("olaf", True, "always"),
    "fifo": ("fifo", False, "always"),
}
"""Mode name -> (switch mode, workers always send, what the workers do)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from olaf.drl.cli_args import add_run_arguments

    add_run_arguments(parser, duration=DEFAULT_DURATION, total_steps=DEFAULT_TOTAL_STEPS)
    parser.add_argument("--seeds", type=int, default=3, help="seeds 0..N-1 per mode (default 3)")
    parser.add_argument("--first-seed", type=int, default=0, help="first seed (default 0)")
    parser.add_argument("--modes", default=",".join(MODES),
                        help="comma-separated subset of olaf (OLAF queue + P_s), olaf-always (OLAF "
                        "queue, workers always send), fifo (default: all three)")
    parser.add_argument("--baseline", default="fifo", metavar="MODE",
                        help="the mode every other one is compared against (default fifo; its "
                        "time over theirs, > 1: they reached the target sooner)")
    parser.add_argument("--out", type=Path, default=Path("runs/compare"),
                        help="directory for per-run metrics, the table and the combined plot")
    parser.epilog = ("Without --target-reward the target is the environment's "
                     "spec.reward_threshold, checked on the --eval-policy evaluations. Every run uses its "
                     "whole --total-steps budget (it does not stop at the target, so that final "
                     "returns compare over the same budget). A run that never reaches the "
                     "target is right-censored at its budget: the ratios against --baseline "
                     "keep that bound's direction, and seeds where neither mode reached it are "
                     "counted, not averaged (olaf.drl.censored).")


def parse_modes(text: str) -> list[str]:
    """The --modes list, or exit 2 with one line on an unknown or empty one."""
    from olaf.drl.cli_args import usage_error

    modes = list(dict.fromkeys(m.strip() for m in text.split(",") if m.strip()))
    unknown = [m for m in modes if m not in MODES]
    if unknown or not modes:
        usage_error(f"olaf compare: error: unknown mode(s) {unknown or text!r}; "
                         f"choose from {', '.join(MODES)}")
    return modes


def outcome(summary: dict[str, Any], metric: str) -> Outcome:
    """A run's time (``metric`` "time") or env steps ("steps") to the target; when it
    missed, the budget it used, as a bound."""
    if metric == "time":
        value, budget = summary["time_to_target_s"], summary["wall_time_s"]
    else:
        value, budget = summary["steps_to_target"], summary["env_steps"]
    return Outcome(budget if value is None else value, value is not None)


def versus(baseline: list[dict[str, Any]], top: list[dict[str, Any]], metric: str) -> Comparison:
    """Per seed, the baseline's time (or env steps) to target over the top mode's, as
    censored data."""
    return compare([outcome(r, metric) for r in baseline], [outcome(r, metric) for r in top])


def comparison_json(c: Comparison) -> dict[str, Any]:
    return {"ratio": c.ratio, "low": c.low, "high": c.high, "text": c.interval_text(),
            "significant": c.verdict, "reached_baseline": c.reached_baseline,
            "reached_top": c.reached_top, "seeds": c.n, "both_missed": c.n - c.informative,
            "per_seed": [{"ratio": p.ratio, "kind": p.kind} for p in c.pairs]}


def compare_row(mode: str, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One table row: the Kaplan-Meier medians of time and env steps to target (a run that
    missed is censored at its budget; "not reached" when half or more missed), and means ±
    std over the seeds of everything else."""
    reached = [r["time_to_target_s"] for r in runs if r["time_to_target_s"] is not None]
    ttt = km_median([outcome(r, "time") for r in runs])
    steps = km_median([outcome(r, "steps") for r in runs])
    return {
        "mode": mode,
        "send": MODES[mode][2] if mode in MODES else "-",
        "seeds": len(runs),
        "reached": f"{len(reached)}/{len(runs)}",
        "ttt": "not reached" if ttt is None else f"{ttt:,.1f}",
        "steps": "not reached" if steps is None else f"{steps:,.0f}",
        "final": plus_minus([r["final_return"] for r in runs]),
        "final_eval": plus_minus([r.get("final_eval_return") for r in runs]),
        **staleness_cells(runs),
        "aom_p99": plus_minus([r["aom_p99_ms"] for r in runs], 1),
        "aom_spread": plus_minus([r.get("aom_worker_spread_ms") for r in runs], 1),
        "worker_bytes": plus_minus([r["worker_bytes"] / 1e6 if r.get("worker_bytes") is not None
                                    else None for r in runs], 1) + " MB",
        "skipped": plus_minus([r.get("skipped_share") for r in runs], 3),
        "bytes": plus_minus([r["bytes_to_ps"] / 1e6 for r in runs], 2) + " MB",
        "agg": plus_minus([r["mean_agg_count"] for r in runs], 2),
    }


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from olaf.commands.run import link_figures, runner
    from olaf.drl.cli_args import check_env, config_from_args, resolve_target, usage_error
    from olaf.drl.display import Progress, compare_table
    from olaf.drl.report import (
        write_compare_plot,
        write_json,
        write_metrics,
        write_plots,
        write_staleness_plot,
    )

    if args.seeds < 1:
        usage_error("olaf compare: error: --seeds must be >= 1")
    modes = parse_modes(args.modes)
    if args.baseline not in MODES:
        usage_error(f"olaf compare: error: --baseline {args.baseline!r}: choose from "
                    f"{', '.join(MODES)}")
    target = resolve_target(args)
    console = Console() if Console().is_terminal else Console(width=200)
    results = []
    summaries: dict[str, list[dict[str, Any]]] = {m: [] for m in modes}
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        for mode in modes:
            switch_mode, always_send, _ = MODES[mode]
            cfg = check_env(config_from_args(args, mode=switch_mode, seed=seed, target=target,
                                             stop_at_target=False, always_send=always_send))
            title = f"olaf compare: {cfg.env_id}, {cfg.workers} workers, {mode}, seed {seed}"
            with Progress(title, cfg.duration, console, link=link_figures(cfg)) as progress:
                result = runner(cfg)(cfg, progress)
            summary = result.summary()
            run_dir = args.out / f"{mode}-seed{seed}"
            write_metrics(result, run_dir)
            write_plots(result, run_dir)
            console.print(f"{mode} seed {seed}: time to target "
                          f"{summary['time_to_target_s'] or '-'} s, final return "
                          f"{summary['final_return']:.1f}, skipped share "
                          f"{summary['skipped_share']:.3f}, data in {run_dir}/")
            results.append(result)
            summaries[mode].append(summary)
    rows = []
    for mode, runs in summaries.items():
        rows.append(compare_row(mode, runs))
    console.print(compare_table(rows))
    if args.baseline not in summaries:
        console.print(f"no ratios: the baseline {args.baseline} was not among --modes")
    against: dict[str, dict[str, Any]] = {}
    for mode in (m for m in modes if m != args.baseline and args.baseline in summaries):
        against[mode] = {}
        for metric, what in (("steps", "env steps"), ("time", "time")):
            c = versus(summaries[args.baseline], summaries[mode], metric)
            against[mode][metric] = comparison_json(c)
            console.print(f"target {target}: {args.baseline}/{mode} {what} to target "
                          f"{c.interval_text()} (censored 95 % interval; reached "
                          f"{args.baseline} {c.reached_baseline}/{c.n}, {mode} "
                          f"{c.reached_top}/{c.n}; {c.n - c.informative} seed(s) both missed; "
                          + ("significant: " + f"{mode} {c.verdict}" if c.verdict != "-"
                             else "not significant") + ")")
    plot = write_compare_plot(results, args.out / "compare.png")
    write_staleness_plot(results, args.out / "staleness.png")
    write_json(args.out / "compare.json", {"target_reward": target, "modes": modes, "rows": rows,
                                          "baseline": args.baseline, "against_baseline": against,
                                          "runs": summaries})
    console.print(f"wrote {plot}, {args.out / 'staleness.png'} and {args.out / 'compare.json'}")
    return 0
