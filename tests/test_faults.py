"""Fault injection in the three-process setup (``olaf switch``, ``olaf ps``, ``olaf worker``): kill -9.

* A worker killed with SIGKILL: the switch keeps answering the other worker and the PS
  keeps receiving, and the dead worker's blocks that sat in the queue still reach the
  PS: once drained, every ENQUEUED slot came out as exactly one DATA.
* The PS killed with SIGKILL: the switch keeps acknowledging every block (the queue
  fills and says so, DROPPED_FULL), and a new PS started later drains what was held
  and the workers' updates are enqueued again.

(A switch restart is tests/test_liveness.py's.) The machine may be loaded, so the
checks compare counters before and after each event, never rates or durations; lines
are time-stamped as they arrive.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time

import pytest

from tests.switch_process import REPO, olaf_command, running_switch

SMALL_MODEL = "3072"
"""48 blocks of V = 64: two clusters need 96 slots, more than the queue's 64."""


class Proc:
    """An ``olaf`` subprocess whose stdout lines are kept with the time they arrived."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(olaf_command(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, cwd=REPO)
        self.lines: list[tuple[float, str]] = []
        self._errors: list[str] = []
        self._readers = [threading.Thread(target=self._read, daemon=True),
                         threading.Thread(target=self._read_errors, daemon=True)]
        for r in self._readers:
            r.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append((time.monotonic(), line.rstrip("\n")))

    def _read_errors(self) -> None:
        assert self.proc.stderr is not None
        self._errors.extend(self.proc.stderr)

    @property
    def stderr(self) -> str:
        return "".join(self._errors)

    def stats(self, prefix: str, after: float = 0.0, before: float = float("inf")) -> list[dict[str, str]]:
        """``key=value`` fields of the stats lines that arrived between ``after`` and ``before``.

        Only lines with a ``t=`` field count: the start-up banner shares the prefix, and on a
        slow machine it arrives after the moment a test measures from."""
        fields = [dict(f.split("=", 1) for f in line.split() if "=" in f)
                  for t, line in list(self.lines) if line.startswith(prefix) and after <= t <= before]
        return [f for f in fields if "t" in f]

    def wait_for(self, prefix: str, field: str, timeout: float = 60.0) -> None:
        """Until a stats line shows ``field`` above 0."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.proc.poll() is None:
            if any(int(s.get(field, 0)) > 0 for s in self.stats(prefix)):
                return
            time.sleep(0.1)
        raise AssertionError(f"no {prefix} line with {field} > 0: {self.lines} {self.finish(5)}")

    def kill9(self) -> float:
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)
        return time.monotonic()

    def finish(self, timeout: float = 90.0) -> int:
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for r in self._readers:
            r.join(timeout=10)
        return self.proc.returncode

    def final(self) -> dict:
        finals = [line for _, line in self.lines if line.startswith("final ")]
        assert finals, (self.lines, self.stderr)
        return json.loads(finals[-1][len("final "):])

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        self.finish(30)


def worker(target: str, ident: int, duration: float) -> Proc:
    return Proc("worker", "--switch", target, "--worker-id", str(ident), "--cluster-id", str(ident),
                "--params", SMALL_MODEL, "--duration", str(duration), "--stats-interval", "0.25")


def ps(target: str, duration: float) -> Proc:
    return Proc("ps", "--switch", target, "--duration", str(duration), "--stats-interval", "0.25")


def grows(lines: list[dict[str, str]], field: str) -> bool:
    return len(lines) >= 2 and int(lines[-1][field]) > int(lines[0][field])


@pytest.mark.timeout(180)
def test_kill_9_of_a_worker_leaves_the_others_served_and_its_queued_blocks_delivered() -> None:
    procs: list[Proc] = []
    with running_switch("--listen", "127.0.0.1:0") as sw:
        target = f"{sw.address[0]}:{sw.address[1]}"
        try:
            server = ps(target, duration=11)
            victim = worker(target, 1, duration=60)
            survivor = worker(target, 2, duration=6)
            procs += [server, victim, survivor]
            victim.wait_for("worker ", "enq")
            killed_at = victim.kill9()
            assert victim.proc.returncode == -signal.SIGKILL
            assert survivor.finish() == 0, survivor.stderr
            assert server.finish() == 0, server.stderr
        finally:
            for p in procs:
                p.stop()
    after = survivor.stats("worker ", after=killed_at)
    assert grows(after, "acked"), survivor.lines  # still answered after the other worker died
    assert survivor.final()["lost_blocks"] == 0
    assert grows(server.stats("ps ", after=killed_at), "data"), server.lines
    # The PS ran on after the survivor stopped, so the queue drained: every slot the
    # switch enqueued, the dead worker's included, reached the PS once.
    assert sw.final["occupied"] == 0, sw.final
    assert server.final()["data_blocks"] == sw.final["outcomes"]["ENQUEUED"], (server.final(), sw.final)


@pytest.mark.timeout(180)
def test_kill_9_of_the_ps_keeps_workers_acknowledged_and_a_new_ps_drains_the_queue() -> None:
    procs: list[Proc] = []
    # Feedback revision 2: its ACKs carry the global occupancy, which is what "the queue is
    # full" below reads (under revision 3 one cluster's full queue of its own blocks says 0).
    with running_switch("--listen", "127.0.0.1:0", "--feedback", "2") as sw:
        target = f"{sw.address[0]}:{sw.address[1]}"
        try:
            first = ps(target, duration=60)
            workers = [worker(target, 1, duration=12), worker(target, 2, duration=12)]
            procs += [first, *workers]
            first.wait_for("ps ", "data")
            killed_at = first.kill9()
            assert first.proc.returncode == -signal.SIGKILL
            time.sleep(2.5)  # no PS: nothing drains the queue
            second_at = time.monotonic()
            second = ps(target, duration=14)
            procs.append(second)
            assert [w.finish() for w in workers] == [0, 0], [w.stderr for w in workers]
            assert second.finish() == 0, second.stderr
        finally:
            for p in procs:
                p.stop()
    for w in workers:
        alone = w.stats("worker ", after=killed_at + 0.5, before=second_at)
        assert grows(alone, "acked"), w.lines  # the switch answers with no PS behind it
        assert w.final()["lost_blocks"] == 0
    alone = [s for w in workers for s in w.stats("worker ", after=killed_at + 0.5, before=second_at)]
    assert any(s["util"] == "255" for s in alone), alone  # and says the queue is full
    assert any(grows(w.stats("worker ", after=second_at + 1.0), "enq") for w in workers)
    # What the queue held when the new PS came is delivered to it, then the rest.
    assert second.final()["data_blocks"] >= 64, second.final()
    assert sw.final["occupied"] == 0, sw.final
