"""``olaf sweep FILE.toml``: the map of where in-network aggregation pays (DESIGN.md §7).

A sweep file names a base run and a grid; every cell of the grid (depth D or buffer B,
oversubscription rho or egress rate C, or a named bottleneck preset; workers, clusters,
mode, seed) is one run, and each finished run is one row of ``sweep.csv`` in the output
directory. Rows already in the CSV are skipped, so an interrupted sweep goes on where it
stopped; ``--jobs N`` runs N virtual-clock cells at once, each in a process of its own
(the virtual clock's runs are one single-threaded process each, and do not depend on what
else the machine runs). At the end (or with ``--plots-only``) one heatmap per (workers,
clusters, baseline) shows the baseline/OLAF ratio of time to target and of env steps to
target over the (D, rho) grid, each cell with its 95 % interval, beside the baseline's
and OLAF's staleness and AoM.

The file (TOML, read with tomllib)::

    [run]                       # RunConfig fields shared by every cell
    env_id = "CartPole-v1"
    clock = "virtual"
    total_steps = 300000
    [run.staleness]             # a nested RunConfig dataclass (staleness, boost, autoscale,
    max_pending = 1             #    ps): the fields left out keep their defaults
    [grid]
    depth = [1, 10, 30]         # D in gradients -> B = D x blocks per gradient x (36 + 4V)
    rho = [0.5, 2, 8]           # -> C = offered / rho (offered: the virtual clock's
                                #    time model, every worker sending every gradient)
    # or: buffer_bytes = [...] and egress_rate = [...] (bytes, bytes/s)
    # or: bottleneck = ["tor-1g", "tor-10g"] (olaf.drl.bottleneck.PRESETS: each sets B, C,
    #     the propagation delay and the workers' link rate, as olaf run --bottleneck does)
    workers = [8, 32, 128]
    clusters = [1]
    modes = ["olaf", "olaf-always", "fifo", "fifo+sa"]
    seeds = 5                   # seeds first_seed .. first_seed + seeds - 1
    first_seed = 0
    [sweep]
    out = "runs/sweep"          # --out overrides it
    gather = ["a.toml"]         # sweeps with the same [run] whose finished rows are cells
                                #    of this grid: copied into this CSV before anything runs

Modes: ``olaf`` (OLAF queue, P_s), ``olaf-always`` (OLAF queue, workers always send),
``fifo`` (drop-tail, always send), ``fifo+sa`` (drop-tail with the PS's
staleness-aware aggregation, ``aggregation = "staleness-aware"``) and ``olaf+sa`` (the OLAF
queue with that PS: does the host-side correction add to OLAF?), ``olaf+sqrt`` and
``olaf+linear`` (``olaf`` with ``ps.merge_scale``: a merged block of k updates is worth
sqrt(k) or k steps at the PS). Ratios are paired by
seed (the same seed's baseline run over its top run, ``--baseline`` / ``--top``, by default
every other mode over ``olaf``) and read as right-censored data (olaf.drl.censored): a run
that missed the target is a bound (the CSV's ``steps_to_target`` and ``time_to_target_s``
then hold the budget it used, and ``reached`` is 0), a pair where both missed is counted
and left out, and a cell is significant only where the censored interval excludes 1.
``--report`` prints the comparison as Markdown tables (what docs/results.md shows).
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import itertools
import math
import multiprocessing
import time
import tomllib
from collections.abc import Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

# By module: runner and link_figures are looked up when used (tests wrap runner).
import olaf.commands.run as run_command
from olaf.drl.autoscale import AutoscaleConfig
from olaf.drl.boosting import BoostConfig
from olaf.drl.bottleneck import PRESETS, buffer_for, egress_for, offered_rate
from olaf.drl.censored import Comparison, Outcome, compare, km_median
from olaf.drl.cli_args import usage_error
from olaf.drl.config import RunConfig, run_defaults
from olaf.drl.server import PsConfig
from olaf.drl.staleness import StalenessConfig

HELP = "a grid of runs over D, rho, workers, clusters and modes: resumable CSV and heatmaps"

NESTED: dict[str, type] = {"staleness": StalenessConfig, "boost": BoostConfig,
                           "autoscale": AutoscaleConfig, "ps": PsConfig}
"""RunConfig's dataclass fields a sweep file may set as ``[run.NAME]`` tables (``[run.ps]
merge_scale = "sqrt"`` measures what a merged block is worth, issue 49). The learners'
(impact, learner) are not among them: the environment's preset sets those."""


class SweepMode(NamedTuple):
    """What a sweep mode sets in a cell's RunConfig."""

    switch: str
    """The switch's queue: ``olaf`` or ``fifo``."""
    always_send: bool
    aggregation: str
    feedback: int
    """The feedback revision (DESIGN.md §3-4)."""
    merge_scale: str | None = None
    """``ps.merge_scale`` (issue 49: what a merged block is worth); None leaves [run.ps]'s."""


MODES: dict[str, SweepMode] = {
    "olaf": SweepMode("olaf", False, "plain", 3),
    "olaf-rev2": SweepMode("olaf", False, "plain", 2),
    "olaf-always": SweepMode("olaf", True, "plain", 3),
    "fifo": SweepMode("fifo", False, "plain", 3),
    "fifo+sa": SweepMode("fifo", False, "staleness-aware", 3),
    "olaf+sa": SweepMode("olaf", False, "staleness-aware", 3),
    "olaf+sqrt": SweepMode("olaf", False, "plain", 3, "sqrt"),
    "olaf+linear": SweepMode("olaf", False, "plain", 3, "linear"),
}
"""``olaf`` is revision 3 (DESIGN.md §3-4: the cluster's room and the loss ceiling),
``olaf-rev2`` revision 2 (the global occupancy and the paper's P_s, OLAF before issue 49);
the FIFO's workers always send, so its revision changes nothing but the ACK's number.
``olaf+sqrt`` and ``olaf+linear`` are ``olaf`` with a merged block of k updates worth sqrt(k)
or k steps at the PS; in one grid with ``olaf`` and ``fifo``, as no [run] can differ in the
rows a sweep gathers."""
KEYS = ("workers", "clusters", "depth", "rho", "buffer_bytes", "egress_rate", "mode", "seed")
"""The columns that name a cell (the resume key); a preset's cell is its B and C."""
METRICS = ("bottleneck", "reached", "steps_to_target", "time_to_target_s", "env_steps", "wall_time_s",
           "clock", "stopped_by", "final_eval_return", "best_eval_return", "aom_mean_ms",
           "aom_p99_ms", "update_age_mean_ms", "mean_staleness_versions", "staleness_p90",
           "staleness_max", "mean_agg_count", "skipped_share", "rho_measured", "depth_gradients",
           "capacity", "pull_rate", "dropped_full_share", "dropped_reward_share", "delta_share",
           "host_s", "worker_seconds", "mean_active_workers")
COLUMNS = KEYS + METRICS
METRICS_TO_TARGET = {"steps": "steps_to_target", "time": "time_to_target_s"}
"""``--metric``: env steps (the measure to read first) or time to the target."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", type=Path, help="the sweep file (TOML; see olaf.commands.sweep)")
    parser.add_argument("--out", type=Path, default=None,
                        help="output directory (default: [sweep] out, else runs/sweep-<file stem>)")
    parser.add_argument("--plots-only", action="store_true",
                        help="run nothing: redraw the heatmaps from the CSV")
    parser.add_argument("--dry-run", action="store_true",
                        help="list the cells and what is already done, run nothing")
    parser.add_argument("--jobs", type=int, default=1, metavar="N",
                        help="virtual clock: run N cells at once, each in its own process (a "
                        "cell's result does not depend on N; default 1)")
    parser.add_argument("--report", nargs="?", const="ratios", choices=("ratios", "modes", "tally"),
                        default=None,
                        help="run nothing: print Markdown tables from the CSV: `ratios` (the "
                        "default) compares --baseline against --top per cell (censored "
                        "statistics); `modes` gives each mode's reached k/n, median and "
                        "mechanism figures (staleness, update age, agg_count, drops, skips); "
                        "`tally` counts significant cells per slice for each of --top's "
                        "comma-separated modes, side by side")
    parser.add_argument("--baseline", default=None, metavar="MODE",
                        help="the mode on the ratio's top line (default: fifo for --report, "
                        "every mode but --top for the heatmaps)")
    parser.add_argument("--top", default="olaf", metavar="MODE",
                        help="the mode the baseline is divided by (default olaf; > 1: it "
                        "reached the target sooner)")
    parser.add_argument("--metric", choices=tuple(METRICS_TO_TARGET), default="steps",
                        help="--report: env steps (default) or time to the target")
    parser.add_argument("--workers", type=int, default=None, metavar="N",
                        help="--report: only the cells with N workers")
    parser.add_argument("--clusters", type=int, default=None, metavar="K",
                        help="--report: only the cells with K clusters")


# -- the grid -----------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Sweep:
    """A parsed sweep file."""

    base: dict[str, Any]
    """RunConfig fields every cell shares."""
    grid: dict[str, list[Any]]
    """depth|buffer_bytes and rho|egress_rate, or bottleneck; workers, clusters, modes: the
    values of each."""
    seeds: list[int]
    out: Path
    gather: tuple[Path, ...] = ()
    """Sweep files whose rows this one takes in (``gather_rows``)."""
    auto_ceiling: int = 128
    """``workers = "auto"`` cells (``--elastic auto``): the pool's ceiling, and the pool
    whose offered load sets C from rho (the link of that many fixed workers)."""


def load(path: Path, out: Path | None) -> Sweep:
    """Parse and check a sweep file; ValueError with one line on anything wrong."""
    try:
        doc = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"{path}: {exc}") from None
    unknown = set(doc) - {"run", "grid", "sweep"}
    if unknown:
        raise ValueError(f"{path}: unknown table(s) {sorted(unknown)}; use [run], [grid], [sweep]")
    base = dict(doc.get("run", {}))
    for name, kind in NESTED.items():
        if isinstance(base.get(name), dict):
            base[name] = _nested(path, name, kind, base[name])
    fields = {f.name for f in dataclasses.fields(RunConfig)}
    cell_fields = {"workers", "clusters", "mode", "seed", "buffer_bytes", "egress_rate",
                   "always_send", "aggregation", "bottleneck"}
    bad = sorted(k for k in base if k not in fields or k in cell_fields)
    if bad:
        raise ValueError(f"{path}: [run] cannot set {bad} (not RunConfig fields, or set per cell "
                         "by [grid])")
    grid = dict(doc.get("grid", {}))
    allowed = {"depth", "rho", "buffer_bytes", "egress_rate", "bottleneck", "workers",
               "clusters", "modes", "seeds", "first_seed", "auto_ceiling"}
    if set(grid) - allowed:
        raise ValueError(f"{path}: [grid] has unknown key(s) {sorted(set(grid) - allowed)}")
    if "bottleneck" in grid:
        if {"depth", "buffer_bytes", "rho", "egress_rate"} & set(grid):
            raise ValueError(f"{path}: [grid] bottleneck names B and C itself: no depth, "
                             "buffer_bytes, rho or egress_rate beside it")
        unknown_presets = [b for b in grid["bottleneck"] if b not in PRESETS]
        if unknown_presets:
            raise ValueError(f"{path}: unknown bottleneck(s) {unknown_presets}; choose from "
                             f"{', '.join(PRESETS)}")
    elif ("depth" in grid) == ("buffer_bytes" in grid) or ("rho" in grid) == ("egress_rate" in grid):
        raise ValueError(f"{path}: [grid] needs depth or buffer_bytes, and rho or egress_rate "
                         "(one of each), or bottleneck")
    ceiling = grid.pop("auto_ceiling", None)
    seeds = grid.pop("seeds", 5)
    first = int(grid.pop("first_seed", 0))
    seed_list = list(range(first, first + int(seeds))) if isinstance(seeds, int) else list(seeds)
    grid.setdefault("workers", [base.pop("workers", 8)])
    grid.setdefault("clusters", [1])
    grid.setdefault("modes", ["olaf", "fifo"])
    for key, values in grid.items():
        if not isinstance(values, list) or not values:
            raise ValueError(f"{path}: [grid] {key} must be a non-empty list")
    bad_workers = [w for w in grid["workers"]
                   if w != "auto" and (isinstance(w, bool) or not isinstance(w, int) or w < 1)]
    if bad_workers:
        raise ValueError(f"{path}: [grid] workers must be counts >= 1 or \"auto\", got {bad_workers}")
    numeric = [w for w in grid["workers"] if w != "auto"]
    if ceiling is None:
        ceiling = max(numeric, default=128)
    if not isinstance(ceiling, int) or isinstance(ceiling, bool) or ceiling < 1:
        raise ValueError(f"{path}: [grid] auto_ceiling must be a count >= 1, got {ceiling!r}")
    bad_modes = [m for m in grid["modes"] if m not in MODES]
    if bad_modes:
        raise ValueError(f"{path}: unknown mode(s) {bad_modes}; choose from {', '.join(MODES)}")
    if "rho" in grid and base.get("clock", "real") != "virtual":
        raise ValueError(f"{path}: rho needs the virtual clock's time model to know the offered "
                         "load; with clock = \"real\" give egress_rate")
    if not seed_list:
        raise ValueError(f"{path}: no seeds")
    table = doc.get("sweep", {})
    if set(table) - {"out", "gather"}:
        raise ValueError(f"{path}: [sweep] has unknown key(s) {sorted(set(table) - {'out', 'gather'})}")
    gather = table.get("gather", [])
    if not isinstance(gather, list) or not all(isinstance(g, str) for g in gather):
        raise ValueError(f"{path}: [sweep] gather must be a list of sweep file paths")
    target = out or Path(table.get("out", f"runs/sweep-{path.stem}"))
    return Sweep(base, grid, seed_list, target, tuple(Path(g) for g in gather), ceiling)


def _nested(path: Path, name: str, kind: type, table: dict[str, Any]) -> Any:
    """A ``[run.NAME]`` table as its dataclass, the fields it leaves out at their defaults."""
    known = {f.name for f in dataclasses.fields(kind)}
    if set(table) - known:
        raise ValueError(f"{path}: [run.{name}] has unknown key(s) {sorted(set(table) - known)}; "
                         f"choose from {', '.join(sorted(known))}")
    try:
        return kind(**table)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{path}: [run.{name}]: {exc}") from None


def cells(sweep: Sweep) -> list[dict[str, Any]]:
    """Every cell of the grid, seeds innermost-but-one so that a mode's seeds interleave."""
    g = sweep.grid
    if "bottleneck" in g:
        links = [{"depth": "", "rho": "", "buffer_bytes": PRESETS[name].buffer_bytes,
                  "egress_rate": PRESETS[name].egress_rate, "bottleneck": name}
                 for name in g["bottleneck"]]
    else:
        links = [{"depth": s if "depth" in g else "", "rho": r if "rho" in g else "",
                  "buffer_bytes": s if "buffer_bytes" in g else "",
                  "egress_rate": r if "egress_rate" in g else "", "bottleneck": ""}
                 for s, r in itertools.product(g.get("depth") or g["buffer_bytes"],
                                               g.get("rho") or g["egress_rate"])]
    return [{"workers": workers, "clusters": clusters, **link, "mode": mode, "seed": seed}
            for workers, clusters, link, seed, mode in itertools.product(
                g["workers"], g["clusters"], links, sweep.seeds, g["modes"])]


def key_of(row: dict[str, Any]) -> tuple[str, ...]:
    """A cell's resume key: its columns as the CSV writes them."""
    return tuple(_text(row[k]) for k in KEYS)


def _text(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value)


def config_of(sweep: Sweep, cell: dict[str, Any], blocks: int) -> Any:
    """The RunConfig of one cell (``blocks``: blocks per gradient of the run's model)."""
    # torch and gymnasium (olaf.drl.evaluation): imported when a cell is made, so
    # `olaf --help` stays fast.
    from olaf.drl.evaluation import default_target

    switch_mode, always, aggregation, feedback, merge_scale = MODES[cell["mode"]]
    base = {"stop_at_target": True, **sweep.base}
    if "target_reward" not in base:
        base["target_reward"] = default_target(base.get("env_id", run_defaults().env_id))
    auto = cell["workers"] == "auto"
    if auto:
        base = {**base, "scaling": "auto"}
    cfg = RunConfig(**base, workers=sweep.auto_ceiling if auto else cell["workers"],
                    clusters=cell["clusters"], mode=switch_mode, always_send=always,
                    aggregation=aggregation, feedback=feedback, seed=cell["seed"])
    if merge_scale is not None:
        cfg = dataclasses.replace(cfg, ps=dataclasses.replace(cfg.ps, merge_scale=merge_scale))
    buffer = (cell["buffer_bytes"] if cell["depth"] == ""
              else buffer_for(float(cell["depth"]), blocks, cfg.values))
    if cell["rho"] == "":
        egress = float(cell["egress_rate"])
    else:
        offered = offered_rate(cfg.workers, blocks, cfg.values, nominal_turn_s(cfg))
        egress = egress_for(float(cell["rho"]), offered)
    link: dict[str, Any] = {}
    if cell.get("bottleneck"):
        # The preset's links, as ``olaf run --bottleneck NAME``; [run] may still set them.
        preset = PRESETS[cell["bottleneck"]]
        link = {"bottleneck": cell["bottleneck"], "propagation_s": preset.propagation_s,
                "uplink_rate": preset.uplink_rate}
        link.update({k: sweep.base[k] for k in ("propagation_s", "uplink_rate") if k in sweep.base})
    return dataclasses.replace(cfg, buffer_bytes=int(buffer), egress_rate=egress, **link)


def with_env_learner(base: dict[str, Any]) -> dict[str, Any]:
    """``[run]`` with the environment's own IMPACT settings (``learners.ENV_LEARNERS``), the
    learner ``olaf run --env ID`` trains; the grid sets the buffer, so not its capacity."""
    # torch: the learners' module, imported once the sweep is known good.
    from olaf.drl.learners import env_learner

    d = run_defaults()
    preset = env_learner(base.get("env_id", d.env_id), base.get("algo", d.algo))
    return base if preset is None else {**base, "impact": preset.impact}


def nominal_turn_s(cfg: Any) -> float:
    """A worker's turn in the virtual clock's time model at factor 1: its rollout's env
    steps times ``step_time_us`` plus ``compute_time_us``."""
    # torch and gymnasium (the learners): imported when a cell is made, so `olaf --help`
    # stays fast.
    from olaf.drl.learners import algo_config

    learner = algo_config(cfg)
    steps = getattr(learner, "envs_per_worker", 1) * getattr(learner, "rollout_steps", 32)
    return (steps * cfg.step_time_us + cfg.compute_time_us) / 1e6


def gather_rows(sweep: Sweep, csv_path: Path, *, write: bool = True) -> int:
    """Copy into ``csv_path`` the rows of the ``gather`` sweeps that are cells of this grid
    and not yet in it; how many. A gathered sweep must have this one's ``[run]`` (else
    ValueError), so that its rows are runs of these very cells."""
    wanted = {key_of(c) for c in cells(sweep)}
    have = {key_of(r) for r in read_rows(csv_path)}
    added = 0
    for path in sweep.gather:
        other = load(path, None)
        if other.base != sweep.base:
            raise ValueError(f"gather {path}: its [run] is not this sweep's, so its rows are "
                             "not runs of these cells")
        for row in read_rows(other.out / "sweep.csv"):
            key = key_of(row)
            if key in wanted and key not in have:
                if write:
                    append_row(csv_path, row)
                have.add(key)
                added += 1
    return added


def run_cell(cfg: Any) -> tuple[dict[str, Any], float]:
    """Run one cell's configuration: its summary and the host seconds it took."""
    began = time.perf_counter()
    result = run_command.runner(cfg)(cfg)
    return result.summary(), time.perf_counter() - began


def run_cells(configs: list[tuple[dict[str, Any], Any]],
              jobs: int) -> Iterator[tuple[dict[str, Any], dict[str, Any], float]]:
    """(cell, summary, host seconds) of every (cell, config), as each finishes: here one
    after the other, or in ``jobs`` processes (spawned: a forked torch is not safe)."""
    if jobs <= 1:
        for cell, cfg in configs:
            yield (cell, *run_cell(cfg))
        return
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
        running: dict[Future, dict[str, Any]] = {}
        todo = iter(configs)
        for cell, cfg in itertools.islice(todo, jobs):
            running[pool.submit(run_cell, cfg)] = cell
        while running:
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in finished:
                cell = running.pop(future)
                # Keep the pool full before handing the result on to be written.
                for nxt_cell, nxt_cfg in itertools.islice(todo, 1):
                    running[pool.submit(run_cell, nxt_cfg)] = nxt_cell
                yield (cell, *future.result())


def row_of(cell: dict[str, Any], summary: dict[str, Any], host_s: float) -> dict[str, Any]:
    """One CSV row: the cell's keys and what its run measured."""
    outcomes = summary.get("outcomes", {})
    total = sum(outcomes.values()) or 1
    reached = summary["steps_to_target"] is not None
    row = {k: cell[k] for k in KEYS}
    row.update({
        "bottleneck": cell.get("bottleneck", ""),
        "reached": int(reached),
        # A run that missed the target counts with its whole budget (a bound).
        "steps_to_target": summary["steps_to_target"] if reached else summary["env_steps"],
        "time_to_target_s": summary["time_to_target_s"] if reached else summary["wall_time_s"],
        "env_steps": summary["env_steps"], "wall_time_s": summary["wall_time_s"],
        "clock": summary["clock"], "stopped_by": summary["stopped_by"],
        "final_eval_return": summary["final_eval_return"],
        "best_eval_return": summary["best_eval_return"],
        "aom_mean_ms": summary["aom_mean_ms"], "aom_p99_ms": summary["aom_p99_ms"],
        "update_age_mean_ms": summary["update_age_mean_ms"],
        "mean_staleness_versions": summary["mean_staleness_versions"],
        "staleness_p90": summary.get("staleness_p90"), "staleness_max": summary.get("staleness_max"),
        "mean_agg_count": summary["mean_agg_count"], "skipped_share": summary["skipped_share"],
        "rho_measured": summary["rho"], "depth_gradients": summary["depth_gradients"],
        "capacity": summary["capacity"], "pull_rate": summary["pull_rate"],
        "dropped_full_share": outcomes.get("DROPPED_FULL", 0) / total,
        "dropped_reward_share": outcomes.get("DROPPED_REWARD", 0) / total,
        "delta_share": summary.get("delta_share"),
        "host_s": host_s,
        "worker_seconds": summary.get("worker_seconds"),
        "mean_active_workers": summary.get("mean_active_workers"),
    })
    return row


def read_rows(path: Path) -> list[dict[str, str]]:
    if not path.exists():
        return []
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def append_row(path: Path, row: dict[str, Any]) -> None:
    """One finished cell, written at once: an interrupted sweep keeps every finished cell.
    A CSV begun by an older olaf keeps its own columns, so resuming it never shifts them."""
    new = not path.exists()
    columns = list(COLUMNS)
    if not new:
        with path.open(newline="") as f:
            columns = next(csv.reader(f), columns)
    with path.open("a", newline="") as f:
        writer = csv.DictWriter(f, columns, extrasaction="ignore")
        if new:
            writer.writeheader()
        writer.writerow({k: _cell_text(row.get(k)) for k in columns})


def _cell_text(value: Any) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return ""
    return _text(value)


# -- statistics and heatmaps --------------------------------------------------------------------
def _num(text: str) -> float:
    try:
        return float(text)
    except (TypeError, ValueError):
        return math.nan


def _slice_order(workers_clusters: tuple[str, ...]) -> tuple[float, float]:
    """Slices by worker count, then clusters; ``auto`` pools after the fixed ones."""
    w, k = workers_clusters
    return (math.inf if w == "auto" else int(w), int(k))


def _axis_order(text: str) -> tuple[float, str]:
    """Numbers in order, names (presets) after them in the order of ``PRESETS``."""
    value = _num(text)
    if math.isfinite(value):
        return value, ""
    names = list(PRESETS)
    return math.inf, f"{names.index(text):03d}" if text in names else text


def link_of(row: dict[str, str]) -> tuple[str, str]:
    """A row's place on the heatmap's axes: (D or B, rho or C), or (preset name, "")."""
    if row.get("bottleneck"):
        return row["bottleneck"], ""
    return row["depth"] or row["buffer_bytes"], row["rho"] or row["egress_rate"]


def outcome_of(row: dict[str, str], metric: str) -> Outcome:
    """A row's time or env steps to target (``metric``, a CSV column); when it missed, the
    budget it used, as a bound."""
    return Outcome(_num(row[metric]), row["reached"] == "1")


def comparisons(rows: list[dict[str, str]], baseline: str, top: str,
                metric: str) -> dict[tuple, Comparison]:
    """Per (workers, clusters, size, rate): ``baseline`` against ``top`` on ``metric``,
    paired by seed (seeds that have both modes)."""
    by = {(r["workers"], r["clusters"], *link_of(r), r["mode"], r["seed"]): r for r in rows}
    runs: dict[tuple, tuple[list[Outcome], list[Outcome]]] = {}
    for (w, k, s, c, mode, seed), r in sorted(by.items(), key=lambda kv: _seed_order(kv[0][5])):
        if mode != top or (other := by.get((w, k, s, c, baseline, seed))) is None:
            continue
        pair = runs.setdefault((w, k, s, c), ([], []))
        pair[0].append(outcome_of(other, metric))
        pair[1].append(outcome_of(r, metric))
    return {key: compare(*pair) for key, pair in runs.items()}


def _seed_order(seed: str) -> float:
    return _num(seed)


def mean_of(rows: list[dict[str, str]], mode: str, metric: str) -> dict[tuple, float]:
    values: dict[tuple, list[float]] = {}
    for r in rows:
        if r["mode"] == mode:
            key = (r["workers"], r["clusters"], *link_of(r))
            v = _num(r[metric])
            if math.isfinite(v):
                values.setdefault(key, []).append(v)
    return {k: sum(v) / len(v) for k, v in values.items()}


def write_heatmaps(rows: list[dict[str, str]], out: Path, top: str = "olaf",
                   baselines: list[str] | None = None) -> list[Path]:
    """One PNG per (workers, clusters, baseline mode): the baseline/top ratio in time and in
    env steps to target (censored interval in each cell; a cell with a run that missed is
    hatched and says how many of each mode reached), then staleness and AoM of both."""
    # matplotlib: imported when the heatmaps are drawn, so `olaf --help` stays fast; the Agg
    # backend is chosen before pyplot is imported.
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not rows:
        return []
    if rows[0].get("bottleneck"):
        size_name, rate_name = "bottleneck", ""
    else:
        size_name = "D (gradients)" if rows[0]["depth"] else "B (bytes)"
        rate_name = "rho (offered / C)" if rows[0]["rho"] else "C (bytes/s)"
    sizes = sorted({link_of(r)[0] for r in rows}, key=_axis_order)
    rates = sorted({link_of(r)[1] for r in rows}, key=_axis_order)
    pairs = sorted({(r["workers"], r["clusters"]) for r in rows}, key=_slice_order)
    if baselines is None:
        baselines = [m for m in MODES if m != top and any(r["mode"] == m for r in rows)]
    paths = []
    for (w, k), baseline in itertools.product(pairs, baselines):
        if not any(r["mode"] == baseline and (r["workers"], r["clusters"]) == (w, k) for r in rows):
            continue  # nothing to draw: this slice has no run of the baseline yet
        panels = [("time to target", comparisons(rows, baseline, top, "time_to_target_s")),
                  ("env steps to target", comparisons(rows, baseline, top, "steps_to_target"))]
        fig, axes = plt.subplots(1, 4, figsize=(4.2 * 4, 1.1 * len(rates) + 2.8))
        for ax, (title, cells_of) in zip(axes[:2], panels, strict=True):
            grid = [[math.nan] * len(sizes) for _ in rates]
            labels = [[""] * len(sizes) for _ in rates]
            hatched = []
            for i, c in enumerate(rates):
                for j, s in enumerate(sizes):
                    cmp = cells_of.get((w, k, s, c))
                    if cmp is None:
                        continue
                    finite = math.isfinite(cmp.ratio) and cmp.ratio > 0
                    grid[i][j] = math.log2(cmp.ratio) if finite else math.nan
                    labels[i][j] = _cell_label(cmp, baseline, top)
                    if cmp.censored:
                        hatched.append((i, j))
            _draw(ax, grid, labels, sizes, rates, size_name, rate_name, cmap="RdBu", centred=True)
            for i, j in hatched:
                ax.add_patch(matplotlib.patches.Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False,
                                                          hatch="//", edgecolor="0.55", lw=0))
            ax.set_title(f"{baseline}/{top}: {title}\n(> 1: {top} faster; censored 95 % CI; "
                         "hatched: a run missed)", fontsize=9)
        for ax, (metric, name) in zip(axes[2:], (("mean_staleness_versions", "staleness (versions)"),
                                                 ("aom_mean_ms", "AoM mean (ms)")), strict=True):
            base_mean, top_mean = mean_of(rows, baseline, metric), mean_of(rows, top, metric)
            grid = [[base_mean.get((w, k, s, c), math.nan) for s in sizes] for c in rates]
            labels = [[f"{base_mean.get((w, k, s, c), math.nan):.3g} / "
                       f"{top_mean.get((w, k, s, c), math.nan):.3g}" for s in sizes] for c in rates]
            _draw(ax, grid, labels, sizes, rates, size_name, rate_name, cmap="viridis", centred=False)
            ax.set_title(f"{name}: {baseline} / {top}", fontsize=9)
        fig.suptitle(f"{w} workers, {k} cluster(s): {baseline} against {top}", fontsize=10)
        fig.tight_layout()
        suffix = "" if top == "olaf" else f"-vs-{top.replace('+', '-')}"
        path = out / f"heatmap-w{w}-k{k}-{baseline.replace('+', '-')}{suffix}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    return paths


def _cell_label(cmp: Comparison, baseline: str, top: str) -> str:
    """The ratio with its interval on two lines, and, where a run missed, who reached."""
    text = cmp.interval_text().replace(" [", "\n[", 1)
    if cmp.censored:
        text += f"\nreached {cmp.reached_baseline}|{cmp.reached_top} of {cmp.n}"
    return text


def report(rows: list[dict[str, str]], baseline: str, top: str, metric: str) -> str:
    """Markdown: per (workers, clusters) a table of ``baseline`` against ``top`` in each
    cell (reached k/n, Kaplan-Meier medians, the censored ratio and its verdict), then a
    count of significant cells per slice. The same text for the same CSV, byte for byte
    (docs/results.md's tables are this function's output; a test compares them)."""
    column = METRICS_TO_TARGET[metric]
    what = "env steps" if metric == "steps" else "time (s)"
    cells_of = comparisons(rows, baseline, top, column)
    if not cells_of:
        return f"no seed has both {baseline} and {top}\n"
    slices = sorted({key[:2] for key in cells_of}, key=_slice_order)
    head = _place_header(rows)
    preset = head == "| bottleneck |"
    out: list[str] = []
    tally = []
    for w, k in slices:
        keys = sorted((key for key in cells_of if key[:2] == (w, k)),
                      key=lambda key: (_axis_order(key[2]), _axis_order(key[3])))
        out += [f"**{w} workers, {k} cluster{'s' if k != '1' else ''}**: {baseline} / {top}, "
                f"{what} to target", "",
                f"{head} reached {baseline} | reached {top} | median {baseline} | median {top} "
                f"| {baseline}/{top} [95 %] | {top} ahead | both missed | significant |",
                "|" + "---|" * (head.count("|") - 1 + 8)]
        counts = {"faster": 0, "slower": 0, "-": 0}
        for key in keys:
            cmp = cells_of[key]
            counts[cmp.verdict] += 1
            place = f"| {key[2]} |" if preset else f"| {key[2]} | {key[3]} |"
            verdict = {"faster": f"{top} faster", "slower": f"{top} slower", "-": "no"}[cmp.verdict]
            out.append(f"{place} {cmp.reached_baseline}/{cmp.n} | {cmp.reached_top}/{cmp.n} | "
                       f"{_median(cmp.median_baseline, metric)} | {_median(cmp.median_top, metric)} "
                       f"| {cmp.interval_text()} | {cmp.top_ahead} of {cmp.informative} | "
                       f"{cmp.n - cmp.informative} | {verdict} |")
        out.append("")
        tally.append((w, k, counts))
    out += [f"**Significant cells**, {baseline} / {top} in {what} to target:", "",
            f"| workers | clusters | {top} faster | {top} slower | cannot tell |", "|---|---|---|---|---|"]
    out += [f"| {w} | {k} | {c['faster']} | {c['slower']} | {c['-']} |" for w, k, c in tally]
    return "\n".join(out) + "\n"


MODE_COLUMNS = (("staleness", "mean_staleness_versions", "{:.1f}"),
                ("update age (ms)", "update_age_mean_ms", "{:.1f}"),
                ("agg_count", "mean_agg_count", "{:.2f}"),
                ("skipped", "skipped_share", "{:.1%}"), ("dropped full", "dropped_full_share", "{:.1%}"),
                ("dropped by reward", "dropped_reward_share", "{:.1%}"),
                ("rho measured", "rho_measured", "{:.3g}"))
"""The mechanism figures ``report_modes`` shows per mode: (header, CSV column, format);
each the mean over the cell's seeds."""


def report_modes(rows: list[dict[str, str]], metric: str) -> str:
    """Markdown: per (workers, clusters), one line per cell and mode with its reached k/n,
    Kaplan-Meier median to target and the mechanism figures (``MODE_COLUMNS``)."""
    column = METRICS_TO_TARGET[metric]
    what = "env steps" if metric == "steps" else "time (s)"
    head = _place_header(rows)
    preset = head == "| bottleneck |"
    groups: dict[tuple, list[dict[str, str]]] = {}
    for r in rows:
        groups.setdefault((r["workers"], r["clusters"], *link_of(r), r["mode"]), []).append(r)
    order = list(MODES)
    keys = sorted(groups, key=lambda g: (*_slice_order(g[:2]), _axis_order(g[2]), _axis_order(g[3]),
                                         order.index(g[4]) if g[4] in order else len(order)))
    # Worker-seconds only where a pool changed size (an auto pool's sweep): a fixed pool's
    # are its workers times its run's seconds.
    pools = int(any(r.get("workers") == "auto" for r in rows))
    out: list[str] = []
    for w, k in dict.fromkeys(g[:2] for g in keys):
        out += [f"**{w} workers, {k} cluster{'s' if k != '1' else ''}**: each mode, means over "
                "the seeds", "",
                f"{head} mode | reached | median {what} to target | "
                + " | ".join(name for name, _, _ in MODE_COLUMNS)
                + (" | worker-seconds (mean pool)" if pools else "") + " |",
                "|" + "---|" * (head.count("|") - 1 + 3 + len(MODE_COLUMNS) + pools)]
        for g in (g for g in keys if g[:2] == (w, k)):
            runs = sorted(groups[g], key=lambda r: _num(r["seed"]))
            median = km_median([outcome_of(r, column) for r in runs])
            figures = []
            for _, name, fmt in MODE_COLUMNS:
                values = [v for v in (_num(r.get(name, "")) for r in runs) if math.isfinite(v)]
                figures.append(fmt.format(sum(values) / len(values)) if values else "-")
            place = f"| {g[2]} |" if preset else f"| {g[2]} | {g[3]} |"
            out.append(f"{place} {g[4]} | {sum(r['reached'] == '1' for r in runs)}/{len(runs)} | "
                       f"{_median(median, metric)} | " + " | ".join(figures)
                       + (f" | {_worker_seconds(runs)}" if pools else "") + " |")
        out.append("")
    return "\n".join(out)


def report_tally(rows: list[dict[str, str]], baseline: str, tops: list[str], metric: str) -> str:
    """Markdown: per (workers, clusters), how many cells have each of ``tops``
    significantly faster than ``baseline``, significantly slower, or cannot tell (the
    censored comparison of ``report``), the modes side by side, and a total row."""
    column = METRICS_TO_TARGET[metric]
    what = "env steps" if metric == "steps" else "time (s)"
    verdicts = {top: comparisons(rows, baseline, top, column) for top in tops}
    slices = sorted({key[:2] for cells_of in verdicts.values() for key in cells_of},
                    key=_slice_order)
    out = [f"**Significant cells against {baseline}**, {what} to target (faster / slower / "
           "cannot tell / cells):", "",
           "| workers | clusters | " + " | ".join(tops) + " |", "|---|---|" + "---|" * len(tops)]
    totals = {top: [0, 0, 0, 0] for top in tops}
    for w, k in slices:
        cells_text = []
        for top in tops:
            here = [c.verdict for key, c in verdicts[top].items() if key[:2] == (w, k)]
            counts = (here.count("faster"), here.count("slower"), here.count("-"), len(here))
            totals[top] = [a + b for a, b in zip(totals[top], counts, strict=True)]
            cells_text.append(" / ".join(map(str, counts)))
        out.append(f"| {w} | {k} | " + " | ".join(cells_text) + " |")
    out.append("| all | | " + " | ".join(" / ".join(map(str, totals[t])) for t in tops) + " |")
    return "\n".join(out) + "\n"


def _place_header(rows: list[dict[str, str]]) -> str:
    """The report's first columns: the preset, or (D or B, rho or C), as the heatmaps' axes."""
    if rows[0].get("bottleneck"):
        return "| bottleneck |"
    return (f"| {'D' if rows[0]['depth'] else 'B (bytes)'} | "
            f"{'rho' if rows[0]['rho'] else 'C (bytes/s)'} |")


def report_text(sweep: Sweep, args: argparse.Namespace) -> str:
    """What ``olaf sweep FILE --report [ratios|modes]`` prints (docs/results/tables.py puts
    it into the docs)."""
    table = [r for r in read_rows(sweep.out / "sweep.csv")
             if (args.workers is None or r["workers"] == str(args.workers))
             and (args.clusters is None or r["clusters"] == str(args.clusters))]
    if not table:
        return "no rows\n"
    if args.report == "modes":
        return report_modes(table, args.metric)
    if args.report == "tally":
        return report_tally(table, args.baseline or "fifo", args.top.split(","), args.metric)
    return report(table, args.baseline or "fifo", args.top, args.metric)


def _worker_seconds(runs: list[dict[str, str]]) -> str:
    """Mean worker-seconds over a cell's runs, and the mean pool: the run's own figures for
    an auto pool, workers x the run's seconds for a fixed one."""
    seconds, pool = [], []
    for r in runs:
        measured = _num(r.get("worker_seconds", ""))
        if math.isfinite(measured):
            seconds.append(measured)
            pool.append(_num(r.get("mean_active_workers", "")))
        elif r["workers"] != "auto":
            seconds.append(int(r["workers"]) * _num(r["wall_time_s"]))
            pool.append(int(r["workers"]))
    if not seconds:
        return "-"
    return f"{sum(seconds) / len(seconds):,.0f} ({sum(pool) / len(pool):.1f})"


def _median(value: float | None, metric: str) -> str:
    if value is None:
        return "not reached"
    return f"{value:,.0f}" if metric == "steps" else f"{value:,.2f}"


def _draw(ax: Any, grid: list[list[float]], labels: list[list[str]], sizes: list[str],
          rates: list[str], size_name: str, rate_name: str, *, cmap: str, centred: bool) -> None:
    data = np.array(grid, float)
    finite = data[np.isfinite(data)]
    if centred:
        span = max(float(np.abs(finite).max()) if len(finite) else 1.0, 0.5)
        image = ax.imshow(data, cmap=cmap, vmin=-span, vmax=span, origin="lower", aspect="auto")
    else:
        image = ax.imshow(data, cmap=cmap, origin="lower", aspect="auto")
    for i, row in enumerate(labels):
        for j, text in enumerate(row):
            ax.text(j, i, text, ha="center", va="center", fontsize=7,
                    color="black" if centred else "white")
    ax.set_xticks(range(len(sizes)), sizes)
    ax.set_yticks(range(len(rates)), rates)
    ax.set_xlabel(size_name)
    ax.set_ylabel(rate_name)
    ax.figure.colorbar(image, ax=ax, shrink=0.8,
                       label="log2 ratio" if centred else None)


# -- the command --------------------------------------------------------------------------------
def run(args: argparse.Namespace) -> int:
    # rich: imported when the command runs, so `olaf --help` stays fast.
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    try:
        sweep = load(args.file, args.out)
    except ValueError as exc:
        usage_error(f"olaf sweep: error: {exc}")
    if args.jobs < 1:
        usage_error(f"olaf sweep: error: --jobs must be >= 1, got {args.jobs}")
    if args.jobs > 1 and sweep.base.get("clock", "real") != "virtual":
        usage_error("olaf sweep: error: --jobs needs clock = \"virtual\": real-clock runs "
                    "measure wall time and must have the machine to themselves")
    tops = args.top.split(",")
    if len(tops) > 1 and args.report != "tally":
        usage_error("olaf sweep: error: several --top modes only with --report tally")
    for name, mode in [("baseline", args.baseline), *(("top", t) for t in tops)]:
        if mode is not None and mode not in MODES:
            usage_error(f"olaf sweep: error: --{name} {mode!r}: choose from {', '.join(MODES)}")
    if args.baseline is not None and args.baseline in tops:
        usage_error(f"olaf sweep: error: --baseline {args.baseline!r} is also a --top mode")
    if args.report:
        print(report_text(sweep, args), end="")
        return 0
    as_written = sweep  # gather compares [run] tables as the files give them
    sweep = dataclasses.replace(sweep, base=with_env_learner(sweep.base))
    sweep.out.mkdir(parents=True, exist_ok=True)
    csv_path = sweep.out / "sweep.csv"
    console = Console()
    if sweep.gather:
        try:
            gathered = gather_rows(as_written, csv_path, write=not args.dry_run)
        except ValueError as exc:
            usage_error(f"olaf sweep: error: {exc}")
        console.print(f"olaf sweep {args.file}: {'would gather' if args.dry_run else 'gathered'} "
                      f"{gathered} rows from {len(sweep.gather)} sweeps")
    todo = cells(sweep)
    done = {key_of(r) for r in read_rows(csv_path)}
    pending = [c for c in todo if key_of(c) not in done]
    console.print(f"olaf sweep {args.file}: {len(todo)} cells, {len(todo) - len(pending)} already "
                  f"in {csv_path}, {len(pending)} to run")
    if args.dry_run:
        for c in pending:
            console.print("  " + ", ".join(f"{k}={c[k]}" for k in KEYS if c[k] != ""))
        return 0
    if not args.plots_only and pending:
        try:
            probe = RunConfig(**{k: v for k, v in sweep.base.items()})
        except (TypeError, ValueError) as exc:
            usage_error(f"olaf sweep: error: [run]: {exc}")
        blocks = run_command.link_figures(probe).blocks_per_gradient
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                   TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn())
        configs = []
        for cell in pending:  # every cell checked before the first one runs
            try:
                configs.append((cell, config_of(sweep, cell, blocks)))
            except (TypeError, ValueError) as exc:
                usage_error(f"olaf sweep: error: cell {key_of(cell)}: {exc}")
        with Progress(*columns, console=console) as bar:
            task = bar.add_task("cells", total=len(pending))
            if args.jobs == 1:
                bar.update(task, description=_label(pending[0]))
            else:
                bar.update(task, description=f"{min(args.jobs, len(pending))} cells at a time")
            for done_count, (cell, summary, host_s) in enumerate(run_cells(configs, args.jobs), 1):
                append_row(csv_path, row_of(cell, summary, host_s))
                bar.advance(task)
                if args.jobs == 1 and done_count < len(pending):
                    bar.update(task, description=_label(pending[done_count]))
    paths = write_heatmaps(read_rows(csv_path), sweep.out, args.top,
                           None if args.baseline is None else [args.baseline])
    console.print(f"wrote {csv_path}" + "".join(f", {p}" for p in paths))
    return 0


def _label(cell: dict[str, Any]) -> str:
    return ", ".join(f"{k} {cell[k]}" for k in KEYS if cell[k] != "")
