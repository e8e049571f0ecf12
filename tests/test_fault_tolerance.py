"""Fault tolerance of ``olaf run``: a worker process killed with SIGKILL mid-run is restarted
(same logical workers, fresh sockets), counted, and the run finishes and learns; SIGTERM
ends a run early with its metrics written; nothing outlives the run."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.test_run import _session_members as session_members

ROOT = Path(__file__).resolve().parents[1]
TARGET = 150.0
"""Greedy CartPole-v1 return that counts as learned here: a random policy averages about
22 and the fresh greedy policy about 10."""


class OlafRun:
    """An ``olaf run`` subprocess in a session of its own, stopped by PID at the end."""

    def __init__(self, args: list[str], out: Path) -> None:
        self.out = out
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "olaf.cli", "run", *args, "--out", str(out)], cwd=ROOT,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)

    def status(self) -> dict[str, Any] | None:
        """The run's ``run.json`` (None until it is written)."""
        try:
            return json.loads((self.out / "run.json").read_text())
        except (FileNotFoundError, ValueError):
            return None

    def wait_for(self, predicate: Any, timeout: float, what: str) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status = self.status()
            if status is not None and predicate(status):
                return status
            if self.proc.poll() is not None:
                raise AssertionError(f"run ended before {what}: {self.proc.stdout.read()}")
            time.sleep(0.2)
        raise AssertionError(f"timed out waiting for {what}; last status {self.status()}")

    def finish(self, timeout: float) -> str:
        """Wait for the run to end; its output. Then nothing it started may be left."""
        try:
            output, _ = self.proc.communicate(timeout=timeout)
        finally:
            if self.proc.poll() is None:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        assert_session_empty(self.proc.pid)
        return output

    def summary(self) -> dict[str, Any]:
        return json.loads((self.out / "summary.json").read_text())

    def csv(self, name: str) -> list[dict[str, str]]:
        with (self.out / name).open() as f:
            return list(csv.DictReader(f))


def assert_session_empty(sid: int, timeout: float = 15.0) -> None:
    """Every process of the run's session is gone (the resource tracker needs a moment)."""
    deadline = time.monotonic() + timeout
    while session_members(sid) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = session_members(sid)
    if left:
        os.killpg(sid, signal.SIGKILL)
    assert left == []


@pytest.mark.timeout(1500)
def test_kill_9_of_a_worker_process_is_restarted_counted_and_the_run_learns(tmp_path: Path) -> None:
    run = OlafRun(["--workers", "4", "--processes", "2", "--total-steps", "150000",
                   "--duration", "600", "--eval-every", "5000", "--target-reward", str(TARGET),
                   "--seed", "2"], tmp_path / "run")
    status = run.wait_for(lambda s: s["env_steps"] >= 4000, 500, "4000 env steps")
    victim = status["processes"]["olaf-worker-1"]
    os.kill(victim, signal.SIGKILL)
    # The restarted process has a new PID and hosts the same logical workers.
    after = run.wait_for(lambda s: s["restarts"] >= 1, 120, "the restart")
    assert after["processes"]["olaf-worker-1"] != victim
    assert after["logical_workers"]["olaf-worker-1"] == status["logical_workers"]["olaf-worker-1"]
    output = run.finish(timeout=800)
    assert run.proc.returncode == 0, output
    summary = run.summary()
    assert summary["worker_restarts"] == 1, output
    assert [r[1:] for r in summary["restart_log"]] == [["olaf-worker-1", -signal.SIGKILL]]
    assert summary["stopped_by"] == "target", output
    assert summary["best_eval_return"] >= TARGET
    # The restarted process's workers (1 and 3) trained again: their senders' final
    # counters come from the new incarnation.
    workers = {int(w["worker_id"]): w for w in run.csv("workers.csv")}
    assert {1, 3} <= set(workers) and all(int(workers[w]["sent"]) > 0 for w in (1, 3))
    assert not Path(f"/proc/{victim}").exists()
    assert "worker process restarts" in output


def test_max_restarts_must_be_a_count(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "olaf.cli", "run", "--max-restarts", "-1",
                           "--out", str(tmp_path / "x")], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "--max-restarts" in proc.stderr
    assert not (tmp_path / "x").exists()
