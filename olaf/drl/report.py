"""What a run leaves in ``--out``: metrics as CSV/JSON and PNG plots.

Files of one run:

* ``summary.json``: ``RunResult.summary()`` plus the configuration, AoM summary, sender,
  receiver and switch counters;
* ``timeline.csv``: one row per sample (elapsed, env steps, mean return, AoM, queue
  occupancy, outcome counts, model version, threshold, updates sent / skipped / probes
  so far, mean P_s of the workers' draws since the previous sample, the latest
  evaluation's mean return (``eval_return``: the configured policy's; then
  ``greedy_eval_return`` and ``stochastic_eval_return``, empty before the first and, for
  a model that cannot sample, stochastic), staleness and update age p50/p90/p99 of the
  blocks applied since the previous sample, active workers, worker process restarts so
  far); a resumed run's files continue its checkpoint's rows;
* ``workers.csv``: per worker, updates sent, skipped and probes, skipped share, mean P_s,
  blocks sent, acknowledged and lost;
* ``episodes.csv``: every finished episode (time, env steps, worker, return, length);
* ``evaluations.csv``: every evaluation (time, env steps, mean, std, model version, then
  greedy and stochastic mean and std; mean and std are the configured policy's);
* ``data.csv``: every DATA block the PS applied (time, block, agg_count, staleness, reward);
* ``aom.csv``: the global AoM samples;
* ``return_vs_time.png``, ``return_vs_steps.png``, ``aom.png`` (over time and its CDF),
  ``outcomes.png``.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from olaf.drl.results import EVALUATION_COLUMNS, RunResult, result_json, rolling_returns, worker_tx
from worker_transport.protocol import Outcome

LEARNER_COLUMNS = ("policy_loss", "value_loss", "entropy", "actor_grad_norm", "critic_grad_norm",
                   "clip_fraction")
"""Learner statistics in the timeline (means over the gradients since the previous row)."""
AGE_COLUMNS = ("staleness_p50", "staleness_p90", "staleness_p99", "update_age_p50_ms",
               "update_age_p90_ms", "update_age_p99_ms")
"""Staleness (versions) and update age of the blocks applied since the previous row."""
EVAL_COLUMNS = (("eval_return", "eval_return"), ("greedy_eval_return", "eval_greedy"),
                ("stochastic_eval_return", "eval_stochastic"))
"""(timeline column, ``Snapshot`` field) of the latest evaluation's mean return:
``eval_return`` stays the configured policy's (the column older readers know), the
other two are both policies' of the same evaluation."""
SCALE_COLUMNS = ("rho_window", "waste_share", "decision", "decision_reason")
"""``--elastic auto``'s decisions in the timeline (empty between them): the window's rho and
wasted share, grow/hold/shrink, and why."""
MODE_COLORS = {"olaf": "tab:blue", "fifo": "tab:orange", "olaf-always": "tab:green"}


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, tuple):
        return list(value)
    raise TypeError(f"not JSON serialisable: {type(value)}")


def _clean(value: Any) -> Any:
    """NaN/inf become null: JSON has no NaN."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


def write_json(path: Path, payload: Any) -> None:
    path.write_text(json.dumps(_clean(payload), indent=2, default=_json_default) + "\n")


def _write_csv(path: Path, header: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)


def _cell(value: float) -> float | str:
    """A float for a CSV cell, empty when not a number."""
    return value if math.isfinite(value) else ""


def write_metrics(result: RunResult, out: Path) -> list[Path]:
    """Write the CSV and JSON files of one run into ``out``; returns their paths."""
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / n for n in ("summary.json", "timeline.csv", "episodes.csv", "data.csv",
                               "aom.csv", "workers.csv", "evaluations.csv")]
    write_json(paths[0], result_json(result))
    names = [o.name for o in Outcome]
    _write_csv(
        paths[1],
        ["elapsed_s", "env_steps", "episodes", "mean_return", "aom_ms", "occupied", "capacity",
         "model_version", "blocks_applied", "threshold", "updates_sent", "updates_skipped",
         "updates_probes", "p_s_mean", "loss_ceiling", "answered_share",
         *[c for c, _ in EVAL_COLUMNS], *AGE_COLUMNS, *LEARNER_COLUMNS,
         *[n.lower() for n in names], "active_workers", "worker_restarts", *SCALE_COLUMNS],
        [[s.elapsed, s.env_steps, s.episodes, s.mean_return, s.aom_ms, s.occupied, s.capacity,
          s.model_version, s.blocks_applied, "" if s.threshold is None else s.threshold,
          s.updates_sent, s.updates_skipped, s.updates_probes,
          "" if not math.isfinite(s.p_s_mean) else s.p_s_mean,
          _cell(s.loss_ceiling), _cell(s.answered_share),
          *[_cell(getattr(s, f)) for _, f in EVAL_COLUMNS],
          *[_cell(getattr(s, c)) for c in AGE_COLUMNS],
          *[s.learner.get(c, "") for c in LEARNER_COLUMNS],
          *[s.outcomes.get(n, 0) for n in names], s.active_workers, s.restarts,
          _cell(s.scale_rho), _cell(s.scale_waste), s.scale_action, s.scale_reason]
         for s in result.timeline],
    )
    _write_csv(paths[2], ["time_s", "env_steps", "worker", "return", "length"], result.episodes)
    _write_csv(paths[6], EVALUATION_COLUMNS,
               [[_cell(v) for v in row] for row in result.evaluations])
    _write_csv(paths[3], ["time_s", "block_id", "agg_count", "staleness_versions", "reward"],
               result.data)
    _write_csv(paths[4], ["t_ms", "global_aom_ms"],
               zip(result.aom_t_ms.tolist(), result.aom_global_ms.tolist(), strict=True))
    columns = ("worker_id", "sent", "skipped", "probes", "skipped_share", "p_s_mean",
               "blocks_sent", "blocks_acked", "blocks_lost")
    _write_csv(paths[5], columns,
               [["" if w[c] is None else w[c] for c in columns]
                for w in sorted((worker_tx(s) for s in result.senders),
                                key=lambda w: w["worker_id"] if w["worker_id"] is not None else -1)])
    return paths


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def write_plots(result: RunResult, out: Path) -> list[Path]:
    """The four PNGs of one run; returns their paths."""
    plt = _pyplot()
    out.mkdir(parents=True, exist_ok=True)
    cfg = result.config
    color = MODE_COLORS.get(cfg.variant, "tab:green")
    title = f"{cfg.env_id}, {cfg.workers} workers, {cfg.variant}, pull {cfg.pull_rate:g}/s"
    t, steps, mean = rolling_returns(result.episodes, result.config.target_window)
    raw_t = [e[0] for e in result.episodes]
    raw_steps = [e[1] for e in result.episodes]
    raw_ret = [e[3] for e in result.episodes]
    paths = []
    ev = np.array([e[:4] for e in result.evaluations], np.float64).reshape(-1, 4)
    for name, x_raw, x, x_eval, label in (
        ("return_vs_time.png", raw_t, t, ev[:, 0], "wall time (s)"),
        ("return_vs_steps.png", raw_steps, steps, ev[:, 1], "environment steps (all workers)"),
    ):
        fig, ax = plt.subplots(figsize=(7, 4))
        ax.scatter(x_raw, raw_ret, s=3, alpha=0.25, color=color, label="training episode")
        ax.plot(x, mean, color=color, lw=2, label=f"training, mean of last {cfg.target_window}")
        if len(ev):
            ax.errorbar(x_eval, ev[:, 2], yerr=ev[:, 3], color="black", lw=1.2, marker="o", ms=3,
                        capsize=2, label=f"{cfg.eval_policy} evaluation (mean ± std)")
        if cfg.target_reward is not None:
            ax.axhline(cfg.target_reward, color="gray", ls="--", lw=1, label="target")
        ax.set_xlabel(label)
        ax.set_ylabel("episode return")
        ax.set_title(title)
        ax.legend(loc="best", fontsize=8)
        ax.grid(alpha=0.3)
        fig.tight_layout()
        fig.savefig(out / name, dpi=110)
        plt.close(fig)
        paths.append(out / name)

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    ax1.plot(result.aom_t_ms / 1000, result.aom_global_ms, color=color, lw=0.8)
    ax1.set_xlabel("wall time (s)")
    ax1.set_ylabel("global AoM (ms)")
    ax1.set_title("Age of Model at the PS")
    ax1.grid(alpha=0.3)
    for values, style, label in ((result.aom_global_ms, "-", "global AoM"),
                                 (result.update_age_ms, "--", "update age")):
        if len(values):
            v = np.sort(values)
            ax2.plot(v, np.arange(1, len(v) + 1) / len(v), style, color=color, label=label)
    ax2.set_xscale("symlog", linthresh=1.0)
    ax2.set_xlabel("ms")
    ax2.set_ylabel("CDF")
    ax2.set_title("AoM and update-age CDF")
    ax2.legend(loc="lower right", fontsize=8)
    ax2.grid(alpha=0.3)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(out / "aom.png", dpi=110)
    plt.close(fig)
    paths.append(out / "aom.png")

    fig, ax = plt.subplots(figsize=(7, 4))
    outcomes = result.switch.get("outcomes", {})
    names = [o.name for o in Outcome]
    counts = [outcomes.get(n, 0) for n in names]
    bars = ax.bar([n.lower().replace("_", "\n") for n in names], counts, color=color)
    ax.bar_label(bars, fontsize=8)
    ax.set_ylabel("UPDATE blocks")
    ax.set_title(f"switch outcomes ({title})", fontsize=9)
    fig.tight_layout()
    fig.savefig(out / "outcomes.png", dpi=110)
    plt.close(fig)
    paths.append(out / "outcomes.png")
    return paths


def write_staleness_plot(results: Sequence[RunResult], path: Path) -> Path:
    """The distribution of what the PS applied, per mode (all seeds pooled): staleness in
    model versions and update age in ms, as CDFs side by side (DESIGN.md §5)."""
    plt = _pyplot()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    by_mode: dict[str, tuple[list[np.ndarray], list[np.ndarray]]] = {}
    for r in results:
        stale, ages = by_mode.setdefault(r.config.variant, ([], []))
        stale.append(np.array([d[3] for d in r.data], np.float64))
        ages.append(np.asarray(r.update_age_ms, np.float64))
    for mode, (stale, ages) in by_mode.items():
        color = MODE_COLORS.get(mode, "tab:gray")
        for ax, parts in zip(axes, (stale, ages), strict=True):
            v = np.sort(np.concatenate(parts)) if parts else np.zeros(0)
            if len(v):
                ax.plot(v, np.arange(1, len(v) + 1) / len(v), color=color, lw=1.2, label=mode)
    axes[0].set_xlabel("staleness of applied blocks (versions)")
    axes[1].set_xlabel("update age of applied blocks (ms)")
    for ax in axes:
        ax.set_xscale("symlog", linthresh=1.0)
        ax.set_ylabel("CDF")
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right")
    cfg = results[0].config
    fig.suptitle(f"{cfg.env_id}, {cfg.workers} workers: how old the PS's gradients were, per mode")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_compare_plot(results: Sequence[RunResult], path: Path) -> Path:
    """Return vs wall time and vs env steps of every run, coloured by mode, plus AoM CDF."""
    plt = _pyplot()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    labelled: set[str] = set()
    for r in results:
        t, steps, mean = rolling_returns(r.episodes, r.config.target_window)
        mode = r.config.variant
        color = MODE_COLORS.get(mode, "tab:gray")
        label = mode if mode not in labelled else None
        labelled.add(mode)
        axes[0].plot(t, mean, color=color, lw=1.2, alpha=0.8, label=label)
        axes[1].plot(steps, mean, color=color, lw=1.2, alpha=0.8, label=label)
        if r.evaluations:
            ev = np.array([e[:3] for e in r.evaluations], np.float64)
            axes[0].plot(ev[:, 0], ev[:, 2], color=color, lw=1, ls="--", alpha=0.8)
            axes[1].plot(ev[:, 1], ev[:, 2], color=color, lw=1, ls="--", alpha=0.8)
        if len(r.aom_global_ms):
            v = np.sort(r.aom_global_ms)
            axes[2].plot(v, np.arange(1, len(v) + 1) / len(v), color=color, lw=1, alpha=0.8,
                         label=label)
    cfg = results[0].config
    variants = list(dict.fromkeys(r.config.variant for r in results))
    seeds = len({r.config.seed for r in results})
    for ax in axes[:2]:
        if cfg.target_reward is not None:
            ax.axhline(cfg.target_reward, color="gray", ls="--", lw=1)
        ax.set_ylabel(f"return: training mean of {cfg.target_window} (solid), "
                      f"{cfg.eval_policy} eval (dashed)")
        ax.grid(alpha=0.3)
        ax.legend(loc="best")
    axes[0].set_xlabel("wall time (s)")
    axes[1].set_xlabel("environment steps")
    axes[2].set_xscale("symlog", linthresh=1.0)
    axes[2].set_xlabel("global AoM (ms)")
    axes[2].set_ylabel("CDF")
    axes[2].grid(alpha=0.3)
    axes[2].legend(loc="lower right")
    fig.suptitle(f"{cfg.env_id}, {cfg.workers} workers, pull {cfg.pull_rate:g} blocks/s, "
                 f"capacity {cfg.capacity}: {' vs '.join(variants)}, {seeds} seed(s)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
