"""``olaf sweep`` (olaf.commands.sweep): the example sweep end to end on the virtual clock,
its CSV, resuming (finished cells are skipped), the heatmap, the file's checks, and the
report of any two modes with censored statistics (the statistics themselves:
tests/test_censored.py)."""

from __future__ import annotations

import csv
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

import olaf.commands.run as run_command
from olaf.cli import main
from olaf.commands.sweep import (
    COLUMNS,
    KEYS,
    append_row,
    cells,
    config_of,
    gather_rows,
    key_of,
    load,
    read_rows,
    report,
    write_heatmaps,
)
from olaf.drl.server import PsConfig
from olaf.drl.staleness import StalenessConfig

ROOT = Path(__file__).resolve().parent.parent
SMALL = ROOT / "docs" / "results" / "sweep-small.toml"


def rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def count_runs(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int, int]]:
    """The (mode, seed, capacity) of every run the sweep makes from now on in this process."""
    ran: list[tuple[str, int, int]] = []
    real = run_command.runner

    def counting(cfg):  # noqa: ANN001, ANN202
        ran.append((cfg.mode, cfg.seed, cfg.capacity))
        return real(cfg)

    monkeypatch.setattr(run_command, "runner", counting)
    return ran


def two_cells() -> str:
    """The small sweep cut to one cell (D 10, rho 4, seed 0) in each of its two modes."""
    return (SMALL.read_text().replace("depth = [1, 10]", "depth = [10]")
            .replace("rho = [0.5, 4]", "rho = [4]").replace("seeds = 2", "seeds = 1"))


def test_the_small_sweep_runs_resumes_and_draws(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "sweep"
    assert main(["sweep", str(SMALL), "--out", str(out)]) == 0
    table = rows(out / "sweep.csv")
    assert len(table) == 16  # 2 depths x 2 rhos x 2 modes x 2 seeds
    assert {r["mode"] for r in table} == {"olaf", "fifo"}
    assert {r["clock"] for r in table} == {"simulated"}
    assert all(int(r["env_steps"]) >= 1500 for r in table)
    # D = 10 gradients of 40 blocks is 400 slots for both modes.
    assert {r["capacity"] for r in table if r["depth"] == "10"} == {"400"}
    png = out / "heatmap-w4-k1-fifo.png"
    assert png.exists() and png.stat().st_size > 10_000
    # Drop two finished cells: a restart runs exactly those two.
    kept = table[:-2]
    with (out / "sweep.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, list(table[0]))
        writer.writeheader()
        writer.writerows(kept)
    ran = count_runs(monkeypatch)
    assert main(["sweep", str(SMALL), "--out", str(out)]) == 0
    assert len(ran) == 2
    again = rows(out / "sweep.csv")
    assert sorted(tuple(r[k] for k in KEYS) for r in again) == sorted(
        tuple(r[k] for k in KEYS) for r in table)
    ran.clear()
    assert main(["sweep", str(SMALL), "--out", str(out)]) == 0
    assert ran == []


def test_sweep_files_are_checked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.toml"
    shutil.copy(SMALL, bad)
    bad.write_text(bad.read_text().replace('modes = ["olaf", "fifo"]', 'modes = ["olaf", "lifo"]'))
    with pytest.raises(SystemExit) as exc:
        main(["sweep", str(bad)])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "lifo" in err and "\n" not in err
    both = tmp_path / "both.toml"
    both.write_text("[run]\nclock = \"virtual\"\n[grid]\ndepth = [1]\nbuffer_bytes = [292]\n"
                    "rho = [1]\n")
    with pytest.raises(ValueError, match="depth or buffer_bytes"):
        load(both, None)
    real = tmp_path / "real.toml"
    real.write_text("[grid]\ndepth = [1]\nrho = [1]\n")
    with pytest.raises(ValueError, match="virtual"):
        load(real, None)


def test_the_map_file_has_the_grid_the_issue_asks_for() -> None:
    sweep = load(ROOT / "docs" / "results" / "sweep-map.toml", None)
    assert sweep.grid["workers"] == [8, 32, 128]
    # The map of revision 2 (issue 31): its OLAF runs are olaf-rev2 since issue 49.
    assert set(sweep.grid["modes"]) == {"olaf-rev2", "olaf-always", "fifo", "fifo+sa"}
    assert len(sweep.seeds) >= 5
    assert len(cells(sweep)) == 3 * 3 * 3 * 2 * 4 * 5


PUBLISHED = sorted(p for p in (ROOT / "docs" / "results").glob("*.toml")
                   if load(p, None).out.parts[:2] == ("docs", "results"))


MEASURED: dict[str, Callable[[dict], bool]] = {
    # docs/results.md says why olaf-always is not run with one cluster at D >= 5 (P_s never
    # skips there: it is the olaf run).
    "sweep-map": lambda c: not (c["mode"] == "olaf-always" and c["clusters"] == 1
                                and c["depth"] > 1),
}
"""Published sweeps whose CSV holds only part of the grid: the cells it must hold."""


@pytest.mark.parametrize("path", PUBLISHED, ids=lambda p: p.stem)
def test_a_published_sweep_has_a_row_for_every_cell(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # docs/results.md quotes these CSVs as complete; a grid edited without rerunning would
    # silently leave cells out of the figures.
    monkeypatch.chdir(ROOT)
    sweep = load(path, None)
    done = {key_of(r) for r in read_rows(sweep.out / "sweep.csv")}
    measured = MEASURED.get(path.stem, lambda c: True)
    missing = [c for c in cells(sweep) if measured(c) and key_of(c) not in done]
    assert not missing, f"{len(missing)} cells without a row, e.g. {missing[0]}"
    # ... and a sweep that gathers others holds every row they have of its cells.
    assert gather_rows(sweep, sweep.out / "sweep.csv", write=False) == 0


def test_gather_takes_the_rows_of_sweeps_with_the_same_run(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    part = tmp_path / "part.toml"
    part.write_text(two_cells().replace('out = "runs/sweep-small"', f'out = "{tmp_path / "part"}"'))
    assert main(["sweep", str(part)]) == 0
    whole = tmp_path / "whole.toml"
    whole.write_text(SMALL.read_text().replace("seeds = 2", "seeds = 1").replace(
        'out = "runs/sweep-small"', f'out = "{tmp_path / "whole"}"\ngather = ["{part}"]'))
    ran = count_runs(monkeypatch)
    assert main(["sweep", str(whole)]) == 0
    assert len(ran) == 8 - 2  # the part's two cells were gathered, not run again
    table = rows(tmp_path / "whole" / "sweep.csv")
    assert len(table) == 8 and len({tuple(r[k] for k in KEYS) for r in table}) == 8
    gathered = {tuple(r.values()) for r in rows(tmp_path / "part" / "sweep.csv")}
    assert gathered <= {tuple(r.values()) for r in table}
    # A part of another [run] has rows of other runs: refused, nothing written.
    part.write_text(part.read_text().replace("total_steps = 1500", "total_steps = 1600"))
    before = (tmp_path / "whole" / "sweep.csv").read_text()
    with pytest.raises(SystemExit) as exc:
        main(["sweep", str(whole)])
    assert exc.value.code == 2
    assert (tmp_path / "whole" / "sweep.csv").read_text() == before


@pytest.mark.parametrize(("mode", "switch", "always", "aggregation"), [
    ("olaf", "olaf", False, "plain"), ("olaf-always", "olaf", True, "plain"),
    ("fifo", "fifo", False, "plain"), ("fifo+sa", "fifo", False, "staleness-aware"),
    ("olaf+sa", "olaf", False, "staleness-aware")])
def test_a_cells_mode_sets_switch_workers_and_ps(mode: str, switch: str, always: bool,
                                                 aggregation: str) -> None:
    sweep = load(SMALL, None)
    cell = {"workers": 8, "clusters": 1, "depth": 25, "rho": 4, "buffer_bytes": "",
            "egress_rate": "", "mode": mode, "seed": 3}
    cfg = config_of(sweep, cell, blocks=40)
    assert (cfg.mode, cfg.always_send, cfg.aggregation) == (switch, always, aggregation)
    assert cfg.buffer_bytes == 25 * 40 * 292 and cfg.seed == 3


def test_a_run_table_sets_a_nested_config_and_is_checked(tmp_path: Path) -> None:
    path = tmp_path / "nested.toml"
    text = SMALL.read_text().replace("[grid]", "[run.staleness]\nmax_pending = 1\n"
                                     "scale_learning_rate = false\n[grid]")
    path.write_text(text)
    cell = {"workers": 8, "clusters": 1, "depth": 25, "rho": 4, "buffer_bytes": "",
            "egress_rate": "", "mode": "fifo+sa", "seed": 0}
    cfg = config_of(load(path, None), cell, blocks=40)
    assert cfg.staleness.max_pending == 1 and cfg.staleness.scale_learning_rate is False
    assert cfg.staleness.max_hold == StalenessConfig().max_hold  # left out: the default
    path.write_text(text.replace("max_pending = 1", "max_wait = 1"))
    with pytest.raises(ValueError, match=r"\[run.staleness\] has unknown key\(s\) \['max_wait'\]"):
        load(path, None)
    path.write_text(text.replace("max_pending = 1", "max_pending = 0"))
    with pytest.raises(ValueError, match="max_pending must be >= 1"):
        load(path, None)


def test_a_run_ps_table_sets_what_a_merged_block_is_worth(tmp_path: Path) -> None:
    # [run.ps] is how a sweep measures ps.merge_scale (issue 49): the PS of every cell
    # takes it, and a value the PS does not know is refused when the file loads.
    path = tmp_path / "ps.toml"
    text = SMALL.read_text().replace("[grid]", '[run.ps]\nmerge_scale = "sqrt"\n[grid]')
    path.write_text(text)
    cell = {"workers": 8, "clusters": 1, "depth": 25, "rho": 4, "buffer_bytes": "",
            "egress_rate": "", "mode": "olaf", "seed": 0}
    cfg = config_of(load(path, None), cell, blocks=40)
    assert cfg.ps.merge_scale == "sqrt" and cfg.ps.optimizer == PsConfig().optimizer
    # A mode's merge_scale wins over [run.ps]'s; the others leave it alone.
    assert config_of(load(path, None), {**cell, "mode": "olaf+linear"},
                     blocks=40).ps.merge_scale == "linear"
    path.write_text(text.replace('"sqrt"', '"square"'))
    with pytest.raises(ValueError, match=r"\[run.ps\]: ps.merge_scale must be one of"):
        load(path, None)


def test_a_bottleneck_preset_is_a_grid_axis(tmp_path: Path) -> None:
    # [grid] bottleneck = [...] sets B, C, the propagation delay and the workers' link rate,
    # as olaf run --bottleneck does; a cell is still named by its B and C.
    from olaf.drl.bottleneck import PRESETS

    path = tmp_path / "presets.toml"
    path.write_text('[run]\nclock = "virtual"\nenv_id = "CartPole-v1"\n[grid]\n'
                    'bottleneck = ["tor-1g", "tor-10g"]\nworkers = [8]\nseeds = 1\n')
    sweep = load(path, None)
    grid = cells(sweep)
    assert len(grid) == 2 * 2  # two presets x two modes
    for cell in grid:
        preset = PRESETS[cell["bottleneck"]]
        assert (cell["buffer_bytes"], cell["egress_rate"]) == (preset.buffer_bytes,
                                                               preset.egress_rate)
        cfg = config_of(sweep, cell, blocks=40)
        assert (cfg.bottleneck, cfg.egress_rate, cfg.propagation_s, cfg.uplink_rate) == (
            cell["bottleneck"], preset.egress_rate, preset.propagation_s, preset.uplink_rate)
        assert cfg.capacity == preset.buffer_bytes // 292
    assert len({key_of(c) for c in grid}) == len(grid)
    head = '[run]\nclock = "virtual"\n[grid]\n'
    for grid_lines, message in (('bottleneck = ["tor-1g"]\ndepth = [1]\n', "no depth"),
                                ('bottleneck = ["tor-40g"]\n', "tor-40g")):
        path.write_text(head + grid_lines)
        with pytest.raises(ValueError, match=message):
            load(path, None)
    path.write_text('[run]\nclock = "virtual"\nbottleneck = "tor-1g"\n[grid]\ndepth = [1]\n'
                    'rho = [1]\n')
    with pytest.raises(ValueError, match="bottleneck"):  # a label only: [grid] sets presets
        load(path, None)


def test_jobs_run_the_same_cells_to_the_same_results(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    # The virtual clock's runs do not depend on what else runs: two at a time in processes
    # of their own give the rows that one after the other in this process gives.
    path = tmp_path / "two.toml"
    path.write_text(two_cells())
    assert main(["sweep", str(path), "--out", str(tmp_path / "one")]) == 0
    assert main(["sweep", str(path), "--out", str(tmp_path / "two"), "--jobs", "2"]) == 0
    one, two = rows(tmp_path / "one" / "sweep.csv"), rows(tmp_path / "two" / "sweep.csv")
    assert len(one) == len(two) == 2
    drop = ("host_s",)
    assert sorted(tuple(v for k, v in r.items() if k not in drop) for r in one) == sorted(
        tuple(v for k, v in r.items() if k not in drop) for r in two)
    real = tmp_path / "real.toml"
    real.write_text('[grid]\nbuffer_bytes = [2920]\negress_rate = [29200]\n')
    for bad in (["--jobs", "2"], ["--jobs", "0"]):
        with pytest.raises(SystemExit) as exc:
            main(["sweep", str(real if bad[1] == "2" else path), *bad])
        assert exc.value.code == 2
    assert "--jobs" in capsys.readouterr().err


def test_resuming_a_csv_of_an_older_olaf_keeps_its_columns(tmp_path: Path) -> None:
    path = tmp_path / "sweep.csv"
    old = [c for c in COLUMNS if c not in ("bottleneck", "delta_share")]
    with path.open("w", newline="") as f:
        csv.writer(f).writerow(old)
    append_row(path, {k: 1 for k in COLUMNS})
    table = rows(path)
    assert list(table[0]) == old and all(v == "1" for v in table[0].values())


def synthetic_rows(cells: dict[tuple[int, int], dict[str, list[int | None]]]) -> list[dict[str, str]]:
    """CSV rows as the sweep writes them: per (D, rho) cell, per mode, env steps to target by
    seed (None: missed, censored at the 500,000-step budget)."""
    out = []
    for (depth, rho), modes in cells.items():
        for mode, steps in modes.items():
            for seed, value in enumerate(steps):
                row = {k: "" for k in COLUMNS}
                row.update({"workers": "8", "clusters": "1", "depth": str(depth), "rho": str(rho),
                            "mode": mode, "seed": str(seed), "reached": "0" if value is None else "1",
                            "steps_to_target": str(500_000 if value is None else value),
                            "time_to_target_s": str(8.0 if value is None else value / 60_000),
                            "mean_staleness_versions": "1", "aom_mean_ms": "1"})
                out.append(row)
    return out


CELLS = {
    # every run reached: the t interval on the log ratios
    (25, 4): {"fifo": [142208, 223744, 193536, 132480, 193920],
              "olaf": [101376, 101632, 112256, 122368, 214144],
              "olaf-always": [101376, 101632, 112256, 122368, 214144]},
    # the FIFO missed on three seeds, two of them with OLAF: both-missed pairs are counted,
    # not averaged, and the FIFO's median is "not reached"
    (25, 16): {"fifo": [None, 480000, None, None, 460000],
               "olaf": [None, 300000, 320000, None, 250000],
               "olaf-always": [None, 300000, 320000, None, 250000]},
    # OLAF slower on every seed: significant
    (1, 4): {"fifo": [100000, 110000, 120000, 105000, 115000],
             "olaf": [220000, 250000, 240000, 230000, 260000],
             "olaf-always": [100000, 110000, 120000, 105000, 115000]},
}


def test_the_report_reads_missed_runs_as_censored_and_counts_significant_cells() -> None:
    text = report(synthetic_rows(CELLS), "fifo", "olaf", "steps")
    lines = text.splitlines()
    row = {line.split(" | ")[0] + " | " + line.split(" | ")[1]: line for line in lines
           if line.startswith("| ") and line[2].isdigit() and line.count("|") == 11}
    assert row["| 25 | 4"] == ("| 25 | 4 | 5/5 | 5/5 | 193,536 | 112,256 | 1.39 [0.90, 2.16] | 4 of 5 "
                               "| 0 | no |")
    censored = row["| 25 | 16"]
    assert "| 2/5 | 3/5 | not reached | 320,000 |" in censored  # Kaplan-Meier: S(320k) = 0.4
    assert censored.endswith("| 2 | no |")  # two seeds both missed, left out
    assert row["| 1 | 4"].endswith("| 0 of 5 | 0 | olaf slower |")
    assert "| 8 | 1 | 0 | 1 | 2 |" in lines  # 0 faster, 1 slower, 2 cannot tell
    # byte for byte the same text for the same rows (docs/results.md holds this output)
    assert report(synthetic_rows(CELLS), "fifo", "olaf", "steps") == text


def test_any_two_modes_are_compared_from_the_command_line(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    sweep = tmp_path / "s.toml"
    sweep.write_text(SMALL.read_text().split("[sweep]")[0] + f'[sweep]\nout = "{tmp_path / "out"}"\n')
    (tmp_path / "out").mkdir()
    for row in synthetic_rows(CELLS):
        append_row(tmp_path / "out" / "sweep.csv", row)
    assert main(["sweep", str(sweep), "--report", "--baseline", "olaf-always", "--top", "olaf"]) == 0
    out = capsys.readouterr().out
    assert "olaf-always / olaf, env steps to target" in out
    assert "| 25 | 4 | 5/5 | 5/5 | 112,256 | 112,256 | 1.00 [1.00, 1.00] |" in out
    assert main(["sweep", str(sweep), "--report", "--metric", "time"]) == 0
    assert "fifo / olaf, time (s) to target" in capsys.readouterr().out
    for bad in (["--baseline", "lifo"], ["--top", "fifo", "--baseline", "fifo"]):
        with pytest.raises(SystemExit) as exc:
            main(["sweep", str(sweep), "--report", *bad])
        assert exc.value.code == 2
        assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_the_tally_counts_significant_cells_of_several_modes_side_by_side() -> None:
    from olaf.commands.sweep import report_tally

    text = report_tally(synthetic_rows(CELLS), "fifo", ["olaf", "olaf-always"], "steps")
    lines = text.splitlines()
    assert "| workers | clusters | olaf | olaf-always |" in lines
    # olaf: one cell slower (D 1, rho 4), two cannot tell; olaf-always ties the FIFO there
    assert "| 8 | 1 | 0 / 1 / 2 / 3 | 0 / 0 / 3 / 3 |" in lines
    assert lines[-1] == "| all | | 0 / 1 / 2 / 3 | 0 / 0 / 3 / 3 |"


def test_heatmaps_are_drawn_for_the_chosen_pair_with_censored_cells(tmp_path: Path) -> None:
    paths = write_heatmaps(synthetic_rows(CELLS), tmp_path, "olaf-always", ["fifo"])
    assert [p.name for p in paths] == ["heatmap-w8-k1-fifo-vs-olaf-always.png"]
    assert paths[0].stat().st_size > 10_000
    assert [p.name for p in write_heatmaps(synthetic_rows(CELLS), tmp_path)] == [
        "heatmap-w8-k1-olaf-always.png", "heatmap-w8-k1-fifo.png"]


def test_an_auto_pool_is_a_workers_value_with_its_worker_seconds(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    sweep = tmp_path / "auto.toml"
    text = (two_cells().replace("workers = [4]", 'workers = [4, "auto"]')
            .replace('modes = ["olaf", "fifo"]', 'modes = ["fifo"]')
            .replace("total_steps = 1500", "total_steps = 4000")
            .replace("[grid]", "[run.autoscale]\nwindow_s = 0.25\n\n[grid]")
            .replace('out = "runs/sweep-small"', f'out = "{tmp_path / "out"}"'))
    sweep.write_text(text)
    loaded = load(sweep, None)
    assert loaded.auto_ceiling == 4  # the largest fixed pool: auto shares its link
    cfg = config_of(loaded, next(c for c in cells(loaded) if c["workers"] == "auto"), 40)
    assert cfg.scaling == "auto" and cfg.workers == 4 and cfg.autoscale.window_s == 0.25
    fixed = config_of(loaded, next(c for c in cells(loaded) if c["workers"] == 4), 40)
    assert cfg.egress_rate == fixed.egress_rate  # the same link as the 4 fixed workers
    assert main(["sweep", str(sweep)]) == 0
    table = rows(tmp_path / "out" / "sweep.csv")
    auto = next(r for r in table if r["workers"] == "auto")
    assert float(auto["worker_seconds"]) > 0 and 1 <= float(auto["mean_active_workers"]) <= 4
    from olaf.commands.sweep import report_modes

    text = report_modes(table, "steps")
    assert "worker-seconds (mean pool)" in text
    fixed_row = next(line for line in text.splitlines() if line.startswith("| 10 | 4 | fifo"))
    assert fixed_row.endswith("(4.0) |")  # a fixed pool: its 4 workers all along
    bad = tmp_path / "bad.toml"
    bad.write_text(text.replace('workers = [4, "auto"]', 'workers = ["many"]'))
    with pytest.raises(ValueError, match="workers"):
        load(bad, None)
