"""``olaf run`` end to end: a short CartPole run learns, writes its files, leaks nothing."""

from __future__ import annotations

import csv
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.learners import GRADIENT_FLAGS
from tests.procfs import processes, stat_fields

ROOT = Path(__file__).resolve().parents[1]
RANDOM_POLICY_RETURN = 22.0
"""Mean CartPole-v1 return of a uniformly random policy (about 22)."""
TARGET = 100.0


def _session_members(sid: int) -> list[int]:
    """PIDs of live processes in session ``sid`` (zombies count: they were not reaped)."""
    return [pid for pid, stat in processes("stat") if int(stat_fields(stat)[3]) == sid]


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return "?"


def _tensorboard_scalars(path: Path) -> dict[str, list[tuple[int, float]]]:
    """tag -> [(step, value)] of a TensorBoard event file (TFRecord framing: length, its
    CRC, the Event proto, its CRC), read without tensorboard's reader, which still uses
    NumPy 1 names."""
    import struct

    from tensorboard.compat.proto.event_pb2 import Event

    data, at, out = path.read_bytes(), 0, {}
    while at < len(data):
        (length,) = struct.unpack_from("<Q", data, at)
        event = Event.FromString(data[at + 12 : at + 12 + length])
        at += 12 + length + 4
        for value in event.summary.value:
            out.setdefault(value.tag, []).append((event.step, value.simple_value))
    return out


@pytest.mark.timeout(300)
def test_short_run_learns_writes_metrics_and_plots_and_leaks_nothing(tmp_path: Path) -> None:
    out = tmp_path / "run"
    tb = tmp_path / "tb"
    cmd = [sys.executable, "-m", "olaf.cli", "run", "--env", "CartPole-v1", "--workers", "4",
           "--duration", "90", "--total-steps", "300000", "--eval-every", "4000",
           "--target-reward", str(TARGET), "--seed", "1", "--out", str(out), "--tensorboard", str(tb)]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
            proc.wait()
    assert proc.returncode == 0, output
    # Nothing the run started outlives it: its session empties (multiprocessing's resource
    # tracker needs a moment after its parent exits to see the closed pipe and quit).
    deadline = time.monotonic() + 10
    while _session_members(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = {pid: _cmdline(pid) for pid in _session_members(proc.pid)}
    assert left == {}, output

    summary = json.loads((out / "summary.json").read_text())
    assert summary["stopped_by"] == "target", output
    # Learning: the stop was decided by a greedy evaluation (10 episodes on environments of
    # its own) averaging >= TARGET, which neither the fresh greedy policy (~10) nor a random
    # one (mean 22) comes near; time and steps to target are that evaluation's.
    assert summary["algo"] == "impact"
    assert summary["return_at_target"] >= TARGET > 2 * RANDOM_POLICY_RETURN
    assert summary["evaluations"] >= 2 and summary["best_eval_return"] >= TARGET
    assert 0 < summary["steps_to_target"] <= summary["env_steps"]
    assert 0 < summary["time_to_target_s"] <= summary["wall_time_s"]
    assert summary["initial_return"] < TARGET
    with (out / "evaluations.csv").open() as f:
        evals = list(csv.DictReader(f))
    assert float(evals[0]["eval_mean"]) < TARGET <= float(evals[-1]["eval_mean"])
    assert [int(e["env_steps"]) for e in evals] == sorted(int(e["env_steps"]) for e in evals)
    # The same scalars as TensorBoard event files.
    (events,) = tb.glob("events.out.tfevents.*")
    scalars = _tensorboard_scalars(events)
    assert {"eval/return_mean", "train/episode_return", "aom/global_ms", "tx/p_s_mean",
            "outcomes/merged", "learner/policy_loss", "learner/value_loss"} <= set(scalars)
    assert scalars["eval/return_mean"][-1][1] >= TARGET
    assert summary["data_blocks"] > 0 and summary["blocks_applied"] == summary["data_blocks"]
    assert summary["model_version"] > 0
    assert summary["outcomes"]["MERGED"] > 0  # olaf mode merged some blocks
    assert summary["aom"]["received"] == summary["data_blocks"]
    for pid in summary["worker_pids"]:
        assert not Path(f"/proc/{pid}").exists()
    assert not Path("/dev/shm", summary["weight_board"].lstrip("/")).exists()
    # The switch's port is free again.
    host, port = summary["switch_address"]
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind((host, port))

    for name in ("timeline.csv", "episodes.csv", "data.csv", "aom.csv", "evaluations.csv"):
        with (out / name).open() as f:
            rows = list(csv.reader(f))
        assert len(rows) > 2, name
    for name in ("return_vs_time.png", "return_vs_steps.png", "aom.png", "outcomes.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
    assert "final greedy evaluation" in output


def test_bad_environment_is_refused_before_anything_starts(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "olaf.cli", "run", "--env", "FrozenLake-v1", "--out",
         str(tmp_path / "x")], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "needs a flat Box observation space" in result.stderr
    assert not (tmp_path / "x").exists()


def test_bad_flag_value_is_a_one_line_error(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "olaf.cli", "run", "--workers", "0"],
        cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "workers must be >= 1" in result.stderr


@pytest.mark.timeout(300)
def test_compare_runs_the_olaf_queue_with_workers_always_sending_as_its_own_row(
        tmp_path: Path) -> None:
    out = tmp_path / "cmp"
    result = subprocess.run(
        [sys.executable, "-m", "olaf.cli", "compare", "--env", "CartPole-v1", "--workers", "2",
         "--duration", "4", "--total-steps", "100000", "--seeds", "1", "--modes",
         "olaf-always,olaf", "--out", str(out), *GRADIENT_FLAGS],
        cwd=ROOT, capture_output=True, text=True, timeout=280)
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads((out / "compare.json").read_text())
    assert [r["mode"] for r in report["rows"]] == ["olaf-always", "olaf"]
    assert [r["send"] for r in report["rows"]] == ["always", "P_s"]
    (always,), (olaf,) = report["runs"]["olaf-always"], report["runs"]["olaf"]
    # The same OLAF queue (merges and replacements happen) ...
    assert always["mode"] == olaf["mode"] == "olaf"
    assert always["outcomes"]["MERGED"] + always["outcomes"]["REPLACED"] > 0
    # ... but workers that never skip, and never need to probe.
    assert always["variant"] == "olaf-always" and always["workers_send"] == "always"
    assert always["updates_sent"] > 0 and always["updates_skipped"] == 0
    assert always["updates_probes"] == 0 and always["p_s_mean"] == 1.0
    assert olaf["variant"] == "olaf" and olaf["workers_send"] == "P_s"
    assert olaf["updates_sent"] > 0
    # Per worker and over time, as a user reads them.
    with (out / "olaf-seed0" / "workers.csv").open() as f:
        workers = list(csv.DictReader(f))
    assert [w["worker_id"] for w in workers] == ["0", "1"]
    assert sum(int(w["sent"]) for w in workers) == olaf["updates_sent"]
    with (out / "olaf-seed0" / "timeline.csv").open() as f:
        timeline = list(csv.DictReader(f))
    assert any(row["p_s_mean"] not in ("", "nan") for row in timeline)
    assert "olaf-always" in result.stdout and "skipped share" in result.stdout


def test_ablation_variants_set_the_queue_and_the_workers_policy_apart() -> None:
    import argparse

    from olaf.commands import ablation

    parser = argparse.ArgumentParser()
    ablation.add_arguments(parser)
    args = parser.parse_args(["--feedback-ttl-ms", "40"])
    assert list(ablation.VARIANTS)[:3] == ["fifo", "olaf-always", "olaf"]
    assert "olaf+decay" in ablation.VARIANTS
    seen = {}
    for variant in ablation.VARIANTS:
        cfg = ablation.variant_config(args, variant, seed=0, target=None)
        seen[variant] = (cfg.mode, cfg.workers_use_p_s, cfg.variant)
        assert cfg.feedback_ttl_ms == 40
    assert seen["fifo"] == ("fifo", False, "fifo")
    assert seen["olaf-always"] == ("olaf", False, "olaf-always")
    for variant in ("olaf", "olaf+sa", "olaf+boost", "olaf+decay", "olaf+sa+boost"):
        assert seen[variant] == ("olaf", True, "olaf"), variant
    scaling = {v: ablation.variant_config(args, v, seed=0, target=None).scaling
               for v in ("olaf", "olaf+boost", "olaf+decay")}
    assert scaling == {"olaf": "fixed", "olaf+boost": "boost", "olaf+decay": "decay"}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", "--feedback-ttl-ms", "0"], "feedback_ttl_ms must be > 0"),
        (["run", "--workers", "0"], "workers must be >= 1"),
        (["run", "--eval-policy", "sampled"], "eval_policy must be one of ('greedy', 'stochastic')"),
        (["compare", "--modes", "olaf,sometimes"], "unknown mode(s) ['sometimes']"),
        (["ablation", "--variants", "olaf,nope"], "unknown variant(s) ['nope']"),
    ],
)
def test_bad_run_flags_exit_2_with_one_line(args: list[str], message: str, tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "olaf.cli", *args, "--out", str(tmp_path / "x")],
                            cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.stderr
    assert not (tmp_path / "x").exists()


def test_olaf_run_feedback_flag_picks_the_revision() -> None:
    """--feedback 2|3 reaches RunConfig.feedback (the queue's and the workers' revision)."""
    import argparse

    from olaf.commands import run as run_command
    from olaf.drl.cli_args import config_from_args

    parser = argparse.ArgumentParser()
    run_command.add_arguments(parser)
    for argv, want in (([], 3), (["--feedback", "2"], 2), (["--feedback", "3"], 3)):
        cfg = config_from_args(parser.parse_args(argv), mode="olaf", seed=0, target=None)
        assert cfg.feedback == want
    with pytest.raises(SystemExit) as e:
        parser.parse_args(["--feedback", "4"])
    assert e.value.code == 2


def test_an_explicit_step_budget_lifts_olaf_run_s_wall_clock_cap(tmp_path: Path) -> None:
    import argparse
    import math

    from olaf.commands import compare
    from olaf.commands import run as run_command
    from olaf.drl.cli_args import config_from_args, run_budget
    from olaf.drl.report import write_metrics
    from olaf.drl.results import RunResult

    parser = argparse.ArgumentParser()
    run_command.add_arguments(parser)
    (duration,) = [a for a in parser._actions if a.dest == "duration"]
    assert "none when --total-steps is given, else 180" in duration.help
    assert run_budget(parser.parse_args([])) == (1_000_000, 180.0)
    assert run_budget(parser.parse_args(["--total-steps", "5000"])) == (5000, math.inf)
    assert run_budget(parser.parse_args(["--total-steps", "5000", "--duration", "30"])) == (5000, 30.0)
    assert run_budget(parser.parse_args(["--duration", "30"])) == (1_000_000, 30.0)
    # olaf compare (and ablation) keep their own cap whatever the budget.
    cmp = argparse.ArgumentParser()
    compare.add_arguments(cmp)
    assert run_budget(cmp.parse_args(["--total-steps", "5000"])) == (5000, compare.DEFAULT_DURATION)
    # The RunConfig of an uncapped run, and its summary.json (JSON has no inf: null).
    cfg = config_from_args(parser.parse_args(["--total-steps", "5000", "--eval-policy", "stochastic"]),
                           mode="olaf", seed=0, target=None)
    assert (cfg.total_steps, cfg.duration, cfg.eval_policy) == (5000, math.inf, "stochastic")
    write_metrics(RunResult(cfg), tmp_path)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["config"]["duration"] is None and summary["eval_policy"] == "stochastic"
