"""Elastic workers: the add/remove rule, AoM tracking over a changing worker set, and
``olaf workers`` growing and shrinking a running ``olaf run`` (ended by SIGTERM, which
must still write its metrics)."""

from __future__ import annotations

import math
import re
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from olaf.drl.elastic import ElasticAoM, change_active, worker_bits
from tests.test_fault_tolerance import ROOT, OlafRun


def test_add_remove_and_set_pick_ids_and_refuse_impossible_changes() -> None:
    assert change_active([0, 1], "add", 2, 6) == [0, 1, 2, 3]
    assert change_active([0, 2], "add", 1, 6) == [0, 1, 2]  # the lowest free id first
    assert change_active([0, 1, 2, 3], "remove", 3, 6) == [0]  # the highest ids go first
    assert change_active([0, 5], "set", 3, 6) == [0, 1, 2]
    for args, message in [(([0, 1], "add", 5, 6), "at most 6"),
                          (([0, 1], "remove", 2, 6), "at least one"),
                          (([0], "add", 0, 6), ">= 1"),
                          (([0], "grow", 1, 6), "unknown action"),
                          (([0], "set", 7, 6), "1..6")]:
        with pytest.raises(ValueError, match=message):
            change_active(*args)


def test_aom_follows_the_active_workers() -> None:
    ms = 1000  # microseconds
    aom = ElasticAoM(active_bits=worker_bits([0, 1], 4), workers=4, start_us=0, interval_us=10 * ms,
                     clock=lambda: 0)
    aom.record(5 * ms, 0b11, 0)  # workers 0 and 1 get through at 5 ms
    aom.set_active(worker_bits([0, 1, 2], 4), 20 * ms)  # worker 2 joins at 20 ms
    aom.record(25 * ms, 0b101, 0)  # workers 0 and 2 at 25 ms
    aom.set_active(worker_bits([0, 2], 4), 32 * ms)  # worker 1 leaves at 32 ms
    aom.advance(50 * ms)
    per = aom.series.per_worker_ms
    active = aom.active_matrix(len(per))
    assert aom.series.t_ms.tolist() == [0, 10, 20, 30, 40, 50]
    # A joining worker starts with AoM 0, as every worker does at the start of the run.
    assert per[2:, 2].tolist() == [0, 5, 15, 25]
    assert active[:, 2].tolist() == [False, False, True, True, True, True]
    assert active[:, 1].tolist() == [True, True, True, True, False, False]
    summary = aom.summary()
    # Worker 1's AoM (still growing after it left) counts only while it was active; worker 3,
    # never active, has none.
    assert summary["per_worker"]["max"][1] == 25.0
    assert math.isnan(summary["per_worker"]["mean"][3])
    assert math.isnan(summary["per_worker"]["last"][1])
    assert summary["per_worker"]["active"] == [True, False, True, False]
    # Fairness over the active workers only: the widest spread is at 30 ms, AoM 5, 25, 5 of
    # workers 0-2 (mean 35/3); at 40 and 50 ms workers 0 and 2 were heard together.
    assert summary["fairness_gap_ms"] == pytest.approx(25 - 35 / 3)
    masked = np.where(active, per, np.nan)
    assert np.isnan(masked[:, 3]).all()


@pytest.mark.timeout(1500)
def test_workers_added_and_removed_mid_run_follow_in_flags_aom_and_metrics(tmp_path: Path) -> None:
    out = tmp_path / "run"
    run = OlafRun(["--workers", "2", "--max-workers", "4", "--processes", "2", "--total-steps",
                   "10000000", "--duration", "900", "--eval-every", "100000"], out)

    def workers(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "olaf.cli", "workers", str(out), *args],
                              cwd=ROOT, capture_output=True, text=True, timeout=120)

    start = run.wait_for(lambda s: s["env_steps"] >= 1000, 500, "1000 env steps")
    assert start["active_workers"] == [0, 1] and start["max_workers"] == 4
    added = workers("add", "2")
    assert added.returncode == 0, added.stderr
    assert "4 workers active: [0, 1, 2, 3]" in added.stdout
    grown = run.wait_for(lambda s: s["active_workers"] == [0, 1, 2, 3], 30, "4 active")
    refused = workers("add", "1")
    assert refused.returncode == 1 and "at most 4" in refused.stderr
    assert workers("add", "0").returncode == 2
    run.wait_for(lambda s: s["env_steps"] >= grown["env_steps"] + 4000, 400, "4000 more steps")
    removed = workers("remove", "3")
    assert removed.returncode == 0 and "1 workers active: [0]" in removed.stdout, removed.stderr
    shrunk = run.wait_for(lambda s: s["active_workers"] == [0], 30, "1 active")
    run.wait_for(lambda s: s["env_steps"] >= shrunk["env_steps"] + 1000, 400, "1000 more steps")
    run.proc.send_signal(signal.SIGTERM)
    output = run.finish(timeout=400)
    assert run.proc.returncode == 0, output
    summary = run.summary()
    assert summary["stopped_by"] == "signal SIGTERM"
    assert [n for _, n in summary["worker_changes"]] == [4, 1]
    assert summary["active_workers"] == 1 and summary["max_workers"] == 4
    # The worker processes built workers 2 and 3 when their flags went up: they sent
    # gradients through the switch, which acknowledged them.
    senders = {int(w["worker_id"]): w for w in run.csv("workers.csv")}
    assert set(senders) == {0, 1, 2, 3}
    assert all(int(senders[w]["sent"]) > 0 and int(senders[w]["blocks_acked"]) > 0 for w in (2, 3))
    # AoM follows: only worker 0's bit is active at the end, workers 1-3 have no AoM at the
    # last sample, and every worker's contributor bit reached the PS while it was active
    # (its AoM stayed far below the time it was active).
    per = summary["aom"]["per_worker"]
    assert per["active"] == [True, False, False, False]
    assert per["last"][0] is not None and per["last"][1:] == [None, None, None]
    for w in (2, 3):
        assert per["max"][w] is not None and per["max"][w] < 0.5 * 1000 * (
            summary["worker_changes"][1][0] - summary["worker_changes"][0][0])
    timeline = [int(r["active_workers"]) for r in run.csv("timeline.csv")]
    assert timeline[0] == 2 and 4 in timeline and timeline[-1] == 1


@pytest.mark.timeout(300)
def test_elastic_auto_on_the_embedded_default_sizes_the_pool_itself(tmp_path: Path) -> None:
    import csv
    import json

    out = tmp_path / "auto"
    result = subprocess.run(
        # A link ten times the default's (one worker offers a twentieth of it): on the
        # default's 1,000 blocks/s one worker alone fills the link, and the pool stays at 1.
        [sys.executable, "-m", "olaf.cli", "run", "--elastic", "auto", "--workers", "8",
         "--processes", "2", "--total-steps", "100000", "--duration", "120",
         "--egress-rate", "2920000", "--buffer-bytes", "292000",
         "--set", "autoscale.window_s=2", "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=280)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    with (out / "timeline.csv").open() as f:
        rows = list(csv.DictReader(f))
    decisions = [r for r in rows if r["decision"]]
    assert decisions and all(r["decision_reason"] and r["rho_window"] for r in decisions)
    # It starts with one worker and the warm-up grows it, every change in the summary and
    # in the timeline's active column.
    assert int(rows[0]["active_workers"]) == 1
    assert decisions[0]["decision"] == "grow"
    sizes = [n for _, n in summary["worker_changes"]]
    assert sizes and sizes[0] > 1 and max(sizes) <= 8
    assert int(rows[-1]["active_workers"]) == summary["active_workers"] == sizes[-1]
    assert summary["scaling"] == "auto" and summary["worker_seconds"] < 8 * summary["wall_time_s"]
    # the summary table counts the decisions and the pools they made (the periodic line
    # shows the latest one, but a run this short may end before its first line after one)
    made = " → ".join(str(n) for n in sizes)
    assert re.search(rf"\d+ grow, \d+ hold, \d+ shrink; the pool they made {made}", result.stdout)
    # A pool that sizes itself refuses changes by hand.
    bad = subprocess.run([sys.executable, "-m", "olaf.cli", "run", "--elastic", "auto",
                          "--scaling", "boost", "--out", str(tmp_path / "x")],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "both set the active workers" in bad.stderr
