"""The workers' transmission control never silences a worker (DESIGN.md §4, issue 14).

* (a) the three processes with the CLI defaults (``olaf switch``, ``olaf ps``, ``olaf
  worker``: 157 blocks per update into 64 slots) keep exchanging updates and ACKs for
  the whole run;
* (b) a forged "queue full" ACK silences a running sender for at most ``feedback_ttl``
  plus one update interval;
* (c) after a switch restart, senders resume as soon as the switch answers again.

And issue 18: a worker or PS whose switch never answers says so and exits 1; bad flags
are refused at start-up with one line and exit 2.

The machine may be loaded (CI has 2 cores shared by the suite), so the assertions count
updates and ACKs, not milliseconds, wherever they can, and time bounds are generous.
"""

from __future__ import annotations

import socket
import subprocess
import time

import numpy as np
import pytest

from tests.switch_process import REPO, olaf_command, running_switch
from tests.test_transport_e2e import final_line
from worker_transport.policy import OlafPolicy, OlafRev2Policy
from worker_transport.protocol import MsgType, Olaf, Outcome
from worker_transport.sender import Sender
from worker_transport.transport import UdpTransport

TTL_MS = 100.0
INTERVAL_S = 0.02
"""Between two updates of the in-process senders."""


def stats_lines(output: str, prefix: str) -> list[dict[str, str]]:
    """The ``key=value`` fields of each periodic stats line."""
    return [dict(f.split("=", 1) for f in line.split() if "=" in f)
            for line in output.splitlines() if line.startswith(prefix)]


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def forged_full_ack(worker_id: int, seq: int) -> bytes:
    return bytes(Olaf(msg_type=MsgType.ACK, worker_id=worker_id, seq=seq, queue_util=255,
                      active_clusters=1, flags=1, outcome=Outcome.DROPPED_FULL, num_values=0))


@pytest.mark.timeout(120)
def test_cli_defaults_worker_keeps_sending_and_getting_acks_for_the_whole_run() -> None:
    duration = 6.0
    with running_switch("--listen", "127.0.0.1:0") as sw:
        target = f"{sw.address[0]}:{sw.address[1]}"
        ps = subprocess.Popen(olaf_command("ps", "--switch", target, "--stats-interval", "0"),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
        try:
            worker = subprocess.run(
                olaf_command("worker", "--switch", target, "--duration", str(duration),
                             "--stats-interval", "0.5"),
                capture_output=True, text=True, cwd=REPO, timeout=90)
        finally:
            ps.terminate()
            ps.communicate(timeout=30)
    assert worker.returncode == 0, worker.stderr
    final = final_line(worker.stdout)
    assert final["sent_blocks"] == 157 * final["sent_updates"]  # the default 10,000 params
    assert final["skipped_updates"] < final["updates"]
    lines = stats_lines(worker.stdout, "worker ")
    assert len(lines) >= 6, worker.stdout
    # In every third of the run the worker sent updates and ACKs came back: the stall of
    # issue 14 (one "full" ACK, then P_s -> 0 for good) shows as flat counters here.
    thirds = np.array_split(np.arange(len(lines)), 3)
    marks = [0] + [int(idx[-1]) for idx in thirds]
    for a, b in zip(marks, marks[1:], strict=False):
        first, last = (lines[a], lines[b]) if a else ({"sent": "0", "acked": "0"}, lines[b])
        assert int(last["sent"]) > int(first["sent"]), (a, b, worker.stdout)
        assert int(last["acked"]) > int(first["acked"]), (a, b, worker.stdout)


@pytest.mark.timeout(120)
def test_a_forged_full_ack_silences_a_sender_for_at_most_ttl_plus_one_interval() -> None:
    with running_switch("--listen", "127.0.0.1:0", "--capacity", "64") as sw:
        # Any source: the forged ACK comes from another socket, as an attacker's would.
        sender = Sender(UdpTransport(sw.address, connect=False), cluster_id=0, worker_id=7,
                        policy=OlafPolicy(feedback_ttl_ms=TTL_MS), seed=1)
        grad = np.ones(4 * 64, np.float32)  # 4 blocks: the real queue stays nearly empty
        forger = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            for k in range(10):
                sender.send_gradient(grad, reward=1.0, model_version=k)
                time.sleep(INTERVAL_S)
            assert sender.wait_for_acks(10)
            assert sender.stats()["queue_util"] < 255
            before = sender.stats()
            # Every real ACK is in, so nothing but the forged one speaks until we send.
            forger.sendto(forged_full_ack(7, seq=12345), sender.transport.local_address)
            deadline = time.monotonic() + 10
            while sender.stats()["queue_util"] != 255 and time.monotonic() < deadline:
                time.sleep(0.001)
            injected_us = sender.clock()
            assert sender.stats()["queue_util"] == 255
            calls: list[tuple[int, bool]] = []
            while len(calls) < 200 and not (calls and calls[-1][1]):
                calls.append((sender.clock(), sender.send_gradient(grad, reward=1.0,
                                                                    model_version=99)))
                time.sleep(INTERVAL_S)
            first_sent_us = calls[-1][0]
            assert calls[-1][1], "the sender never sent again after the forged ACK"
            # Updates are >= INTERVAL_S apart, so those skipped fit in the TTL: at most
            # TTL / interval of them, plus the one that found the feedback just fresh.
            assert len(calls) - 1 <= TTL_MS / 1000 / INTERVAL_S + 1, calls
            # The sender's own clock: TTL plus one interval after the forged ACK, plus
            # (generously) what a loaded machine adds to the sleeps in between.
            assert first_sent_us - injected_us <= (TTL_MS / 1000 + INTERVAL_S + 2.0) * 1e6
            assert sender.wait_for_acks(10)
            after = sender.stats()
            assert after["acked_blocks"] > before["acked_blocks"]
            assert after["queue_util"] < 255  # real feedback replaced the forged one
            assert after["unexpected_acks"] == before["unexpected_acks"] + 1  # the forgery
        finally:
            forger.close()
            sender.close()


@pytest.mark.timeout(180)
def test_senders_resume_when_a_restarted_switch_answers_again() -> None:
    port = free_udp_port()
    # Feedback revision 2: one cluster's full queue reads as full (revision 3 says 0).
    listen = ("--listen", f"127.0.0.1:{port}", "--capacity", "4", "--feedback", "2")
    # Revision 2 probes at P_s = 1, so the first update after the outage goes out; revision
    # 3 probes at its loss ceiling, which the outage drove to L_min (tests/test_policy.py
    # checks that it is never silenced).
    senders = [Sender(UdpTransport(("127.0.0.1", port)), cluster_id=0, worker_id=w,
                      policy=OlafRev2Policy(feedback_ttl_ms=TTL_MS), seed=w) for w in range(2)]
    grad = np.ones(6 * 64, np.float32)  # 6 blocks each, 4 slots, no PS: the queue is full
    try:
        with running_switch(*listen):
            for k in range(30):
                for s in senders:
                    s.send_gradient(grad, reward=1.0, model_version=k)
                time.sleep(INTERVAL_S)
            for s in senders:
                assert s.wait_for_acks(10)
                assert s.stats()["queue_util"] == 255  # the last word before the outage: full
        # The switch is gone (stopped by PID): updates go unanswered for a while.
        for k in range(20):
            for s in senders:
                s.send_gradient(grad, reward=1.0, model_version=k)
            time.sleep(INTERVAL_S)
        acked = [s.stats()["acked_blocks"] for s in senders]
        with running_switch(*listen):
            ready_us = senders[0].clock()
            # The feedback expired during the outage, so the very first update after the
            # restart goes out (a probe) from every sender, and it is answered.
            assert all(s.send_gradient(grad, reward=1.0, model_version=100) for s in senders)
            resumed_us = []
            deadline = time.monotonic() + 10
            while len(resumed_us) < len(senders) and time.monotonic() < deadline:
                resumed_us = [s.feedback.received_us for s, a in zip(senders, acked, strict=True)
                              if s.stats()["acked_blocks"] > a]
                time.sleep(0.005)
            assert len(resumed_us) == len(senders)
            # Generous for a loaded machine; the rule itself allows one TTL.
            assert max(resumed_us) - ready_us <= (TTL_MS / 1000 + 2.0) * 1e6
            assert all(s.stats()["silent_s"] == 0 for s in senders)
    finally:
        for s in senders:
            s.close()


# -- issue 18: silence and bad arguments at the CLI ---------------------------------------
@pytest.mark.timeout(90)
@pytest.mark.parametrize("command", ["worker", "ps"])
def test_a_switch_that_never_answers_is_reported_and_fails_the_run(command: str) -> None:
    port = free_udp_port()  # nothing listens there
    result = subprocess.run(
        olaf_command(command, "--switch", f"127.0.0.1:{port}", "--duration", "2.5",
                     "--silence-warn", "1", "--stats-interval", "0.5"),
        capture_output=True, text=True, cwd=REPO, timeout=60)
    assert result.returncode == 1, result.stderr
    warnings = [line for line in result.stderr.splitlines() if "warning: no answer" in line]
    assert len(warnings) == 1 and f"127.0.0.1:{port}" in warnings[0], result.stderr
    assert "never answered" in result.stderr.splitlines()[-1]
    final = final_line(result.stdout)
    assert final["answered"] is False and final["silent_s"] >= 1.0
    assert final["silence_warnings"] == 1
    assert "silent=" in result.stdout.splitlines()[-2]  # the last stats line says it too


@pytest.mark.timeout(90)
def test_a_worker_with_an_answering_switch_exits_0_without_warning() -> None:
    with running_switch("--listen", "127.0.0.1:0") as sw:
        result = subprocess.run(
            olaf_command("worker", "--switch", f"{sw.address[0]}:{sw.address[1]}",
                         "--count", "5", "--params", "640", "--rate", "20",
                         "--silence-warn", "1"),
            capture_output=True, text=True, cwd=REPO, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "warning" not in result.stderr
    final = final_line(result.stdout)
    assert final["answered"] and final["silence_warnings"] == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["worker", "--reward", "nan"], "--reward must be a finite number"),
        (["worker", "--rate", "inf"], "--rate must be a finite number"),
        (["worker", "--values", "0"], "--values (V) must be 1..255"),
        (["worker", "--worker-id", "70000"], "--worker-id must be 0..65535"),
        (["worker", "--feedback-ttl-ms", "0"], "--feedback-ttl-ms must be > 0"),
        (["worker", "--reward-std", "-1"], "--reward-std and --grad-scale must be >= 0"),
        (["ps", "--aom-out", "/nonexistent/dir/x.npz"], "directory /nonexistent/dir does not exist"),
        (["ps", "--lr", "nan"], "--lr must be a finite number"),
        (["ps", "--workers", "0"], "--workers must be 1..32"),
        (["ps", "--window", "0"], "--window must be >= 1"),
    ],
)
def test_bad_flags_are_refused_at_start_up(args: list[str], message: str) -> None:
    # --duration 60: a check made only after the run would make this time out.
    started = time.monotonic()
    result = subprocess.run(olaf_command(*args, "--switch", "127.0.0.1:9", "--duration", "60"),
                            capture_output=True, text=True, cwd=REPO, timeout=45)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""
    assert time.monotonic() - started < 45
