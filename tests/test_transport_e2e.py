"""Workers and a PS through a running ``olaf switch``: every block accounted for.

* UDP mode on loopback: 8 ``Sender``s and one ``Receiver`` in this process;
* loss (``--drop-prob``) stalls neither end;
* the standalone ``olaf worker`` / ``olaf ps`` processes, over UDP (stopped by SIGTERM)
  and, when namespaces can be made, over the switch's interface mode with the PS on
  raw Ethernet frames (``EthernetTransport``) and workers on both transports.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections import defaultdict

import numpy as np
import pytest

from bmv2_topologies.netns import Hosts, can_create_namespaces
from tests.switch_process import REPO, olaf_command, running_switch
from worker_transport.policy import AlwaysSend
from worker_transport.protocol import Outcome
from worker_transport.receiver import DataBatch, Receiver
from worker_transport.sender import Sender
from worker_transport.transport import UdpTransport

V = 64
BLOCKS = 8
CAPACITY = 12


def final_line(output: str) -> dict:
    lines = [line for line in output.splitlines() if line.startswith("final ")]
    assert lines, output
    return json.loads(lines[-1][len("final "):])


def update_value(worker: int, seq: int) -> int:
    """Integers, so sums of averaged blocks come back exactly; small enough (< 2048) that
    a slot merging all 8 workers stays below the int32 saturation at 2**15 with 16
    fraction bits."""
    assert seq < 200
    return worker * 200 + seq


def update_values(worker: int, seq: int) -> np.ndarray:
    return np.full(BLOCKS * V, update_value(worker, seq), np.float32)


def test_eight_workers_one_ps_every_block_accounted_for() -> None:
    with running_switch("--listen", "127.0.0.1:0", "--capacity", str(CAPACITY),
                        "--values", str(V)) as sw:
        senders = [
            # Odd workers send with UDP GSO: the kernel must cut the same datagrams.
            Sender(UdpTransport(sw.address, gso=w % 2 == 1), cluster_id=w // 4, worker_id=w,
                   values=V, policy=AlwaysSend(), record_acks=True, ack_timeout=5.0)
            for w in range(8)
        ]
        received: list[DataBatch] = []
        receiver = Receiver(UdpTransport(sw.address), values=V, pull_rate=None, window=8,
                            on_batch=received.append, workers=8, sample_interval_us=1000)
        rng = np.random.default_rng(5)
        seqs = [0] * 8

        def send(worker: int) -> None:
            assert senders[worker].send_gradient(update_values(worker, seqs[worker]),
                                                 reward=float(worker), model_version=seqs[worker])
            seqs[worker] += 1

        try:
            # Phase 1, no PS: the queue fills (12 slots, 2 clusters x 8 blocks = 16 keys).
            # A worker following itself replaces, one following a peer merges, and the
            # other cluster's blocks beyond the 12th slot are dropped: all four outcomes.
            for worker in [0, 0, 1, 4, 5, 4, 2, 6, 3, 3, 7, 1]:
                send(worker)
            for s in senders:
                assert s.wait_for_acks(5)
            # Phase 2: the PS pulls as fast as it can while workers keep sending.
            receiver.start()
            for worker in rng.integers(0, 8, 120).tolist():
                send(worker)
                time.sleep(0.002)
            for s in senders:
                assert s.wait_for_acks(5)
            deadline = time.monotonic() + 10
            while receiver.stats()["empty_streak"] < 50 and time.monotonic() < deadline:
                time.sleep(0.02)
        finally:
            receiver.close()
            for s in senders:
                s.close()
    assert sw.proc.returncode == 0, sw.stderr
    switch = sw.final["outcomes"]

    # Each block sent got exactly one ACK outcome.
    worker_outcomes: dict[str, int] = defaultdict(int)
    for s in senders:
        st = s.stats()
        assert st["sent_blocks"] == st["acked_blocks"] == len(s.ack_log)
        assert st["duplicate_acks"] == st["unexpected_acks"] == st["lost_blocks"] == 0
        assert st["outstanding_blocks"] == 0 and st["send_errors"] == 0
        assert s.transport.gso == (s.worker_id % 2 == 1)
        for name, n in st["outcomes"].items():
            worker_outcomes[name] += n
    assert dict(worker_outcomes) == switch
    sent = sum(s.stats()["sent_blocks"] for s in senders)
    assert sum(switch.values()) == sent == sw.final["msg_types"]["1"]
    for outcome in ("ENQUEUED", "MERGED", "REPLACED", "DROPPED_FULL"):
        assert switch[outcome] > 0, outcome
    assert switch["DROPPED_INVALID"] == switch["DROPPED_REWARD"] == 0

    # The drained queue's DATA account for every ENQUEUED and MERGED update, minus
    # those a REPLACED superseded (with the default threshold, replacement is by the
    # same worker of a single-update slot: one update out, one in).
    headers = np.concatenate([b.headers for b in received])
    assert len(headers) == switch["ENQUEUED"] == receiver.stats()["data_blocks"]
    assert int(headers["agg_count"].sum()) == switch["ENQUEUED"] + switch["MERGED"]
    assert sw.final["occupied"] == 0

    # And the values: replay each worker's ACKs (they arrive in the switch's processing
    # order) to know which of its updates are still in the delivered sums.
    expected = np.zeros(BLOCKS, np.int64)
    for w, s in enumerate(senders):
        live: dict[int, int] = {}  # block -> the worker's update value a REPLACED would undo
        for ack in s.ack_log:
            value = update_value(w, ack.seq)
            if ack.outcome == Outcome.REPLACED:
                expected[ack.block_id] += value - live[ack.block_id]
            elif ack.outcome in (Outcome.ENQUEUED, Outcome.MERGED):
                expected[ack.block_id] += value
            if ack.outcome in (Outcome.ENQUEUED, Outcome.REPLACED):
                live[ack.block_id] = value
    got = np.zeros(BLOCKS, np.int64)
    for b in received:
        sums = np.rint(b.values[:, 0].astype(np.float64) * b.headers["agg_count"]).astype(np.int64)
        assert (b.values == b.values[:, :1]).all()  # every value of a block is the same
        np.add.at(got, b.headers["block_id"].astype(np.int64), sums)
    assert got.tolist() == expected.tolist()

    # AoM was measured on the PS clock for all 8 contributor bits.
    aom = receiver.aom.summary()
    assert aom["received"] == len(headers) and aom["samples"] > 0
    assert 0 <= aom["update_age"]["p50"] < 5000
    assert all(m > 0 for m in aom["per_worker"]["mean"])
    assert (receiver.aom.last_worker_us > receiver.aom.start_us).all()


def test_loss_stalls_neither_end() -> None:
    with running_switch("--listen", "127.0.0.1:0", "--capacity", "64", "--values", str(V),
                        "--drop-prob", "0.2", "--seed", "3") as sw:
        senders = [Sender(UdpTransport(sw.address), cluster_id=w % 2, worker_id=w, values=V,
                          policy=AlwaysSend(), ack_timeout=1.0) for w in range(4)]
        receiver = Receiver(UdpTransport(sw.address), values=V, pull_rate=None, window=16,
                            pull_timeout=0.02)
        progress = []
        try:
            receiver.start()
            # Intervals long enough that a loaded machine's scheduling gaps are not read
            # as a stall; 16 blocks in 2 clusters keep up to 32 slots for the PS to pull.
            for _ in range(3):
                t_end = time.monotonic() + 0.8
                while time.monotonic() < t_end:
                    for w, s in enumerate(senders):
                        s.send_gradient(np.ones(16 * V, np.float32), reward=1.0,
                                        model_version=w)
                    time.sleep(0.01)
                progress.append((receiver.stats()["data_blocks"],
                                 sum(s.stats()["acked_blocks"] for s in senders)))
            for s in senders:
                assert s.wait_for_acks(5)
        finally:
            receiver.close()
            for s in senders:
                s.close()
    assert sw.proc.returncode == 0, sw.stderr
    # Both ends kept making progress in every interval, despite 20 % of answers lost.
    data, acked = zip(*progress, strict=True)
    assert all(b > a for a, b in zip((0, *data), data, strict=False)), progress
    assert all(b > a for a, b in zip((0, *acked), acked, strict=False)), progress
    st = receiver.stats()
    assert st["expired_pulls"] > 0  # lost DATA/EMPTY were written off, not waited for
    stats = [s.stats() for s in senders]
    lost = sum(st["lost_blocks"] for st in stats)
    sent = sum(st["sent_blocks"] for st in stats)
    assert lost > 0
    for st in stats:  # every block resolved: answered or lost
        assert st["acked_blocks"] + st["lost_blocks"] == st["sent_blocks"], st
    assert 0.1 < lost / sent < 0.3
    # Every UPDATE reached the switch (only responses are dropped) and every ACK that
    # arrived carried the outcome the switch counted for it, or fewer (some were lost).
    assert sw.final["msg_types"]["1"] == sent
    for s in senders:
        assert s.stats()["duplicate_acks"] == s.stats()["unexpected_acks"] == 0


def run_processes(procs: dict[str, subprocess.Popen], timeout: float) -> dict[str, str]:
    outputs = {}
    for name, proc in procs.items():
        try:
            out, err = proc.communicate(timeout=timeout)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == 0, (name, err)
        outputs[name] = out
    return outputs


def test_olaf_worker_and_ps_processes_over_udp() -> None:
    with running_switch("--listen", "127.0.0.1:0", "--values", str(V)) as sw:
        target = f"{sw.address[0]}:{sw.address[1]}"
        ps = subprocess.Popen(
            olaf_command("ps", "--switch", target, "--values", str(V), "--params", "4096",
                         "--pull-rate", "3000", "--stats-interval", "0.3", "--workers", "2"),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
        workers = {
            f"worker{w}": subprocess.Popen(
                olaf_command("worker", "--switch", target, "--worker-id", str(w), "--values",
                             str(V), "--params", "4096", "--rate", "40", "--count", "30",
                             "--stats-interval", "0.3", "--seed", str(w)),
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
            for w in range(2)
        }
        # A third worker has no end of its own: SIGINT stops it.
        endless = subprocess.Popen(
            olaf_command("worker", "--switch", target, "--worker-id", "2", "--values", str(V),
                         "--params", "640", "--rate", "20", "--stats-interval", "0"),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
        try:
            outputs = run_processes(workers, timeout=60)
        finally:
            endless.send_signal(signal.SIGINT)
        try:
            endless_out = run_processes({"endless": endless}, timeout=30)["endless"]
            time.sleep(1.0)  # the PS drains what is left (generously: CI may be loaded)
        finally:
            ps.send_signal(signal.SIGTERM)
        ps_out = run_processes({"ps": ps}, timeout=30)["ps"]
    endless_final = final_line(endless_out)
    assert endless_final["sent_updates"] > 0
    assert endless_final["acked_blocks"] == endless_final["sent_blocks"] == 10 * endless_final[
        "sent_updates"]
    assert sw.proc.returncode == 0, sw.stderr
    for name, out in outputs.items():
        final = final_line(out)
        assert final["sent_updates"] + final["skipped_updates"] == 30, name
        assert final["acked_blocks"] == final["sent_blocks"] == 64 * final["sent_updates"]
        assert any(line.startswith("worker ") and " p_s=" in line for line in out.splitlines())
    ps_final = final_line(ps_out)
    switch = sw.final["outcomes"]
    assert ps_final["data_blocks"] == switch["ENQUEUED"] > 0
    assert ps_final["aggregated_updates"] == switch["ENQUEUED"] + switch["MERGED"]
    assert ps_final["applied"] == ps_final["data_blocks"] and ps_final["model_norm"] > 0
    assert ps_final["aom"]["received"] == ps_final["data_blocks"]
    sent = sum(final_line(o)["sent_blocks"] for o in outputs.values())
    assert sent + endless_final["sent_blocks"] == sum(switch.values())
    stats_lines = [line for line in ps_out.splitlines() if line.startswith("ps t=")]
    assert len(stats_lines) >= 2 and "aom_mean=" in stats_lines[0]


namespaces = can_create_namespaces()
MAC_W, MAC_P = "02:00:00:0e:00:01", "02:00:00:0e:00:02"
IP_W, IP_P = "10.214.0.1", "10.214.0.2"


@pytest.mark.skipif(namespaces is not None, reason=namespaces or "")
def test_interface_mode_ps_on_raw_ethernet_workers_on_udp_and_ethernet() -> None:
    """Hosts w and p in ``olaf-`` namespaces, the switch between them on AF_PACKET ports.
    Worker 0 uses UDP (to the PS's address: the switch intercepts port 20300), worker 1
    raw Ethernet frames, and the PS pulls with raw Ethernet frames."""
    hosts = Hosts()
    try:
        port_w = hosts.add("w", f"{IP_W}/24", MAC_W)
        port_p = hosts.add("p", f"{IP_P}/24", MAC_P)
        with running_switch("-i", f"1@{port_w}", "-i", f"2@{port_p}", "--values", str(V),
                            "--route", f"{IP_W}/32=1,{MAC_W}",
                            "--route", f"{IP_P}/32=2,{MAC_P}") as sw:

            def olaf_in(host: str, *args: str) -> subprocess.Popen:
                return subprocess.Popen(
                    ["ip", "netns", "exec", hosts.namespace(host), *olaf_command(*args)],
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)

            ps = olaf_in("p", "ps", "--iface", "eth0", "--src-ip", IP_P, "--dst-mac", MAC_W,
                         "--switch", f"{IP_W}:20300", "--values", str(V), "--pull-rate", "1000",
                         "--stats-interval", "0", "--workers", "2")
            common = ("--values", str(V), "--params", "1024", "--rate", "20", "--count", "20",
                      "--stats-interval", "0", "--policy", "always", "--ack-timeout", "5")
            workers = {
                "udp": olaf_in("w", "worker", "--switch", f"{IP_P}:20300", "--worker-id", "0",
                               *common),
                "eth": olaf_in("w", "worker", "--iface", "eth0", "--src-ip", IP_W,
                               "--src-port", "40001", "--dst-mac", MAC_P, "--switch",
                               f"{IP_P}:20300", "--worker-id", "1", *common),
            }
            try:
                outputs = run_processes(workers, timeout=60)
                time.sleep(1.5)  # the PS drains what is left (generously: CI may be loaded)
                ps.send_signal(signal.SIGTERM)
                ps_out = run_processes({"ps": ps}, timeout=60)["ps"]
            finally:
                for proc in (ps, *workers.values()):
                    if proc.poll() is None:
                        proc.kill()
        assert sw.proc.returncode == 0, sw.stderr
    finally:
        hosts.close()
    assert not hosts.leftovers()
    switch = sw.final["outcomes"]
    finals = {name: final_line(out) for name, out in outputs.items()}
    ps_final = final_line(ps_out)
    # Frames through veths and AF_PACKET sockets can be lost when a loaded machine starves
    # the switch process (its socket buffer overflows). Every block must still end as
    # answered or lost, and what was answered must agree with the switch's counters;
    # without loss, the accounting is exact.
    for name, final in finals.items():
        assert final["sent_updates"] == 20, name
        assert final["acked_blocks"] + final["lost_blocks"] == final["sent_blocks"] == 16 * 20
        assert final["acked_blocks"] >= 0.9 * final["sent_blocks"], (name, final)
        assert final["duplicate_acks"] == final["unexpected_acks"] == 0, (name, final)
        for outcome, n in final["outcomes"].items():
            assert n <= switch[outcome], (name, outcome)
    acked = sum(f["acked_blocks"] for f in finals.values())
    assert acked <= sum(switch.values()) <= 2 * 16 * 20
    assert ps_final["bad_data"] == 0 and ps_final["empty"] > 0 and sw.final["occupied"] == 0
    assert 0.9 * switch["ENQUEUED"] <= ps_final["data_blocks"] <= switch["ENQUEUED"]
    assert ps_final["aggregated_updates"] <= switch["ENQUEUED"] + switch["MERGED"]
    if acked == 2 * 16 * 20:
        assert ps_final["data_blocks"] == switch["ENQUEUED"] > 0
        assert ps_final["aggregated_updates"] == switch["ENQUEUED"] + switch["MERGED"]
    # Both workers' bits reached the PS: a bit never refreshed would be as old as the run.
    elapsed_ms = ps_final["elapsed_s"] * 1000
    assert all(last < elapsed_ms - 50 for last in ps_final["aom"]["per_worker"]["last"])


def test_olaf_port_constant_matches_protocol() -> None:
    from olaf.commands.worker import OLAF_PORT as cli_port
    from worker_transport.protocol import OLAF_PORT

    assert cli_port == OLAF_PORT
    assert sys.executable  # the subprocesses above ran with this interpreter
