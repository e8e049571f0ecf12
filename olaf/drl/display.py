"""Live progress of a run and the summary tables, with rich.

On a terminal the progress is a live panel redrawn twice a second; otherwise (CI logs,
pipes) a plain line every ``LINE_PERIOD`` seconds, so logs stay readable.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table

from olaf.drl.bottleneck import Figures
from olaf.drl.results import Snapshot
from olaf.drl.stats import STALENESS_COLUMNS

LINE_PERIOD = 5.0


def _fmt(value: Any, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def _outcomes(snap: Snapshot) -> str:
    short = {"ENQUEUED": "enq", "MERGED": "merged", "REPLACED": "repl",
             "DROPPED_REWARD": "drop_rwd", "DROPPED_FULL": "drop_full",
             "DROPPED_INVALID": "invalid"}
    return " ".join(f"{short.get(k, k)}={v:,}" for k, v in snap.outcomes.items() if v)


def _evals(snap: Snapshot, sep: str = " / ") -> str:
    """The latest evaluation's greedy and stochastic mean returns."""
    return f"{_fmt(snap.eval_greedy)}{sep}{_fmt(snap.eval_stochastic)}"


class Progress:
    """Call with each ``Snapshot``; use as a context manager around the run."""

    def __init__(self, title: str, duration: float, console: Console | None = None,
                 total_steps: int | None = None, link: Figures | None = None) -> None:
        """``link``: the run's bottleneck, for the live rho and D (DESIGN.md §7)."""
        self.link = link
        self.title = title
        self.duration = duration
        self.total_steps = total_steps
        self.console = console or Console()
        self.live_mode = self.console.is_terminal
        self._live: Live | None = None
        self._last_line = -math.inf
        self._pool = ""
        """``--elastic auto``: the latest decision, shown until the next one."""

    def __enter__(self) -> Progress:
        if self.live_mode:
            self._live = Live(self._render(None), console=self.console, refresh_per_second=2,
                              transient=False)
            self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.__exit__(None, None, None)

    def _render(self, snap: Snapshot | None) -> Table:
        table = Table(title=self.title, show_header=False, min_width=60)
        table.add_column(style="bold")
        table.add_column()
        if snap is None:
            table.add_row("status", "starting workers...")
            return table
        table.add_row("elapsed", f"{snap.elapsed:.1f} s" + (
            f" of {self.duration:g} s" if math.isfinite(self.duration) else ""))
        table.add_row("env steps", _fmt(snap.env_steps) + (
            f" of {self.total_steps:,}" if self.total_steps else ""))
        table.add_row("episodes", _fmt(snap.episodes))
        table.add_row("mean return (training)", _fmt(snap.mean_return))
        table.add_row("evaluation greedy / stochastic", _evals(snap))
        table.add_row("AoM", f"{_fmt(snap.aom_ms)} ms")
        table.add_row("queue", f"{snap.occupied}/{snap.capacity} slots")
        table.add_row("model version", f"{snap.model_version:,} ({snap.blocks_applied:,} blocks)")
        table.add_row("threshold", _fmt(snap.threshold, 2))
        table.add_row("updates", f"{snap.updates_sent:,} sent, {snap.updates_skipped:,} skipped, "
                                 f"{snap.updates_probes:,} probes")
        table.add_row("P_s (last 0.5 s)", _fmt(snap.p_s_mean, 3))
        if math.isfinite(snap.loss_ceiling):
            table.add_row("loss ceiling L / answered", f"{_fmt(snap.loss_ceiling, 3)} / "
                                                       f"{_fmt(snap.answered_share, 2)}")
        table.add_row("outcomes", _outcomes(snap) or "-")
        table.add_row("workers", f"{snap.active_workers} active, {snap.restarts} process restarts")
        if self._pool:
            table.add_row("elastic auto", self._pool)
        if self.link is not None:
            table.add_row("bottleneck", self._link(snap))
        return table

    def _link(self, snap: Snapshot) -> str:
        """C, B, D and the oversubscription of every update the workers made so far."""
        link = self.link
        offered = link.offered(snap.updates_sent + snap.updates_skipped, snap.elapsed)
        return (f"C {link.egress_rate / 1e6:,.3f} MB/s, B {link.buffer_bytes / 1e3:,.1f} KB, "
                f"D {link.depth:.2f} gradients, rho {_fmt(link.rho(offered), 2)}")

    def __call__(self, snap: Snapshot) -> None:
        if snap.scale_action:
            self._pool = f"{snap.scale_action} at {snap.elapsed:.1f}s: {snap.scale_reason}"
        if self._live is not None:
            self._live.update(self._render(snap))
        elif snap.elapsed - self._last_line >= LINE_PERIOD:
            self._last_line = snap.elapsed
            print(f"[{snap.elapsed:6.1f}s] steps={snap.env_steps:,} return={_fmt(snap.mean_return)}"
                  f" eval={_evals(snap, '/')}"
                  f" AoM={_fmt(snap.aom_ms)}ms queue={snap.occupied}/{snap.capacity} "
                  f"v={snap.model_version} updates sent={snap.updates_sent:,} "
                  f"skipped={snap.updates_skipped:,} probes={snap.updates_probes:,} "
                  f"P_s={_fmt(snap.p_s_mean, 3)}"
                  + (f" L={_fmt(snap.loss_ceiling, 3)} answered={_fmt(snap.answered_share, 2)}"
                     if math.isfinite(snap.loss_ceiling) else "")
                  + f" workers={snap.active_workers} "
                  f"restarts={snap.restarts} {_outcomes(snap)}"
                  + (f" | {self._link(snap)}" if self.link is not None else "")
                  + (f" | pool: {self._pool}" if self._pool else ""),
                  file=sys.stdout, flush=True)


SUMMARY_ROWS = (
    ("learner", "algo", 0),
    ("share of each delta the PS applies", "delta_share", 3),
    ("stopped by", "stopped_by", 0),
    ("error", "error", 0),
    ("resumed from env step", "resumed_from_steps", 0),
    ("worker process restarts", "worker_restarts", 0),
    ("active workers at the end (of max)", "active_of_max", 0),
    ("checkpoints written", "checkpoints_written", 0),
    ("wall time (s)", "wall_time_s", 1),
    ("target ({policy} evaluation)", "target_reward", 1),
    ("time to target (s)", "time_to_target_s", 1),
    ("env steps to target", "steps_to_target", 0),
    ("evaluations", "evaluations", 0),
    ("last evaluation greedy / stochastic", "last_evals", 1),
    ("best {policy} evaluation", "best_eval_return", 1),
    ("final {policy} evaluation", "final_eval_return", 1),
    ("env steps", "env_steps", 0),
    ("episodes", "episodes", 0),
    ("initial mean return (training)", "initial_return", 1),
    ("final mean return (training)", "final_return", 1),
    ("best mean return (training)", "best_return", 1),
    ("AoM mean (ms)", "aom_mean_ms", 2),
    ("AoM p99 (ms)", "aom_p99_ms", 2),
    ("update age mean (ms)", "update_age_mean_ms", 1),
    ("update age p50 / p90 / p99 (ms)", "update_age_percentiles", 1),
    ("staleness p50 / p90 / p99 / max (versions)", "staleness_percentiles", 0),
    ("DATA blocks to PS", "data_blocks", 0),
    ("bytes to PS", "bytes_to_ps", 0),
    ("updates in DATA", "aggregated_updates", 0),
    ("mean agg_count", "mean_agg_count", 2),
    ("mean staleness (versions)", "mean_staleness_versions", 2),
    ("workers send", "workers_send", 0),
    ("updates sent / skipped / probes", None, 0),
    ("skipped share (all; min..max per worker)", "skipped_shares", 3),
    ("mean P_s", "p_s_mean", 3),
    ("bytes from workers", "worker_bytes", 0),
    ("AoM per-worker spread (ms)", "aom_worker_spread_ms", 2),
    ("model version", "model_version", 0),
    ("aggregation", "aggregation", 0),
    ("held blocks", "held_blocks", 0),
    ("scaling", "scaling", 0),
    ("worker-seconds", "worker_seconds", 1),
    ("mean active workers", "mean_active_workers", 2),
    ("detector overhead (share of round)", "detector_overhead_share", 4),
    ("clock", "clock", 0),
    ("bottleneck preset", "bottleneck", 0),
    ("egress rate C (bytes/s)", "egress_rate", 0),
    ("buffer B (bytes)", "buffer_bytes", 0),
    ("depth D (gradients)", "depth_gradients", 2),
    ("oversubscription rho (offered / C)", "rho", 2),
    ("clusters", "clusters", 0),
    ("weights to workers", "weights_downlink", 0),
)


def pool_decisions(decisions: Sequence[Sequence[Any]]) -> str:
    """The autoscaler's decisions in one line: how many of each, and the pool sizes in order
    (each decision is ``[t, workers, action, phase, rho, waste, applied/s, reason]``)."""
    counts = {a: sum(d[2] == a for d in decisions) for a in ("grow", "hold", "shrink")}
    sizes = [decisions[0][1]]
    for d in decisions[1:]:
        if d[1] != sizes[-1]:
            sizes.append(d[1])
    return (", ".join(f"{n} {a}" for a, n in counts.items()) + "; the pool they made "
            + " → ".join(str(n) for n in sizes))


def summary_table(summary: dict[str, Any],
                  scale_decisions: Sequence[Sequence[Any]] = ()) -> Table:
    """The run's summary as a table; with ``scale_decisions`` (``RunResult.scale_decisions``)
    a row that counts the autoscaler's decisions and the pools they made."""
    table = Table(title=f"olaf run: {summary['env']}, {summary['workers']} workers, "
                        f"{summary.get('variant', summary['mode'])}, "
                        f"pull {summary['pull_rate']:g}/s, seed {summary['seed']}")
    table.add_column("metric", style="bold")
    table.add_column("value", justify="right")
    for label, key, digits in SUMMARY_ROWS:
        if key is None:
            value = (f"{summary['updates_sent']:,} / {summary['updates_skipped']:,} / "
                     f"{summary.get('updates_probes', 0):,}")
        elif key == "skipped_shares":
            value = (f"{_fmt(summary.get('skipped_share'), digits)} "
                     f"({_fmt(summary.get('skipped_share_min'), digits)}.."
                     f"{_fmt(summary.get('skipped_share_max'), digits)})")
        elif key == "active_of_max":
            value = f"{summary.get('active_workers', '-')} of {summary.get('max_workers', '-')}"
        elif key == "update_age_percentiles":
            value = " / ".join(_fmt(summary.get(f"update_age_{p}_ms"), digits)
                               for p in ("p50", "p90", "p99"))
        elif key == "last_evals":
            value = (f"{_fmt(summary.get('greedy_eval_return_last'), digits)} / "
                     f"{_fmt(summary.get('stochastic_eval_return_last'), digits)}")
        elif key == "staleness_percentiles":
            value = " / ".join(_fmt(summary.get(f"staleness_{p}"))
                               for p in ("p50", "p90", "p99", "max"))
        else:
            value = _fmt(summary.get(key), digits)
        # The rows of the run's evaluation name its policy (RunConfig.eval_policy).
        table.add_row(label.format(policy=summary.get("eval_policy", "greedy")), value)
    if scale_decisions:
        table.add_row("pool decisions (elastic auto)", pool_decisions(scale_decisions))
    outcomes = summary.get("outcomes", {})
    table.add_row("switch outcomes", " ".join(f"{k.lower()}={v:,}" for k, v in outcomes.items()))
    return table


COMPARE_COLUMNS = (
    ("mode", "mode"), ("workers send", "send"), ("seeds", "seeds"), ("reached", "reached"),
    ("time to target (s), median", "ttt"), ("env steps to target, median", "steps"),
    ("final eval return", "final_eval"), ("final training return", "final"),
    *STALENESS_COLUMNS, ("AoM p99 (ms)", "aom_p99"),
    ("AoM per-worker spread (ms)", "aom_spread"), ("bytes from workers", "worker_bytes"),
    ("skipped share", "skipped"), ("bytes to PS", "bytes"), ("mean agg_count", "agg"),
)


def compare_table(rows: Sequence[dict[str, Any]]) -> Table:
    """One row per mode: means (± std) over seeds."""
    table = Table(title="olaf compare")
    for name, _ in COMPARE_COLUMNS:
        table.add_column(name, justify="right")
    for row in rows:
        table.add_row(*[str(row.get(k, "-")) for _, k in COMPARE_COLUMNS])
    return table
