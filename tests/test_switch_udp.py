"""``olaf switch --listen``: a real process exchanging real UDP datagrams on loopback."""

from __future__ import annotations

import json
import socket
import subprocess
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scapy.layers.inet import UDP
from scapy.utils import rdpcap

from tests.switch_process import olaf_command, running_switch
from tests.vectors.generate import update
from worker_transport.protocol import FLAG_CONGESTED, MsgType, Olaf, Outcome

PULL = bytes(Olaf(msg_type=MsgType.PULL))
VECTORS = Path(__file__).parent / "vectors"


def client(timeout: float = 2.0) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    s.settimeout(timeout)
    return s


def ask(sock: socket.socket, address: tuple[str, int], raw: bytes) -> Olaf:
    sock.sendto(raw, address)
    data, peer = sock.recvfrom(65535)
    assert peer == address
    return Olaf(data)


def test_update_ack_pull_data_empty() -> None:
    with running_switch("--listen", "127.0.0.1:0", "--capacity", "4") as sw, client() as s:
        ack = ask(s, sw.address, update(3, block=7, reward=2.0, seq=42))
        assert ack.msg_type == MsgType.ACK and ack.outcome == Outcome.ENQUEUED
        assert (ack.worker_id, ack.block_id, ack.seq, ack.num_values) == (3, 7, 42, 0)
        # Feedback revision 3 (the default): the cluster's 1 slot and the 3 free are its room.
        assert ack.queue_util == 0 and ack.active_clusters == 1
        data = ask(s, sw.address, PULL)
        assert data.msg_type == MsgType.DATA and data.block_id == 7 and len(data.values) == 64
        assert data.values == [3000 + i for i in range(64)]
        assert ask(s, sw.address, PULL).msg_type == MsgType.EMPTY
    assert sw.proc.returncode == 0
    assert sw.final["outcomes"]["ENQUEUED"] == 1 and sw.final["received"] == 3


def test_replies_go_to_each_sender_and_feedback_tracks_the_queue() -> None:
    with (
        running_switch("--listen", "127.0.0.1:0", "--capacity", "4", "--congestion-threshold", "128",
                       "--feedback", "2") as sw,
        client() as a,
        client() as b,
    ):
        assert ask(a, sw.address, update(1, block=0)).outcome == Outcome.ENQUEUED
        assert ask(b, sw.address, update(2, block=0)).outcome == Outcome.MERGED
        ack = ask(b, sw.address, update(2, block=1, cluster=3))
        assert ack.active_clusters == 2 and ack.queue_util == 127 and not ack.flags & FLAG_CONGESTED
        ack = ask(a, sw.address, update(1, block=2))
        assert ack.queue_util == 191 and ack.flags & FLAG_CONGESTED
        data = ask(b, sw.address, PULL)
        assert data.agg_count == 2 and data.contributors == 0b110


@pytest.mark.parametrize(
    "name", ["11_full_queue", "18_invalid_answered", "19_invalid_silent", "50_random_long",
             "rtl_pending/24_cluster_quota_reached", "rtl_pending/51_random_quota",
             "28_feedback3_own_queue_full", "30_feedback3_quota", "53_random_feedback3_quota"]
)
def test_vectors_over_udp(name: str) -> None:
    """The process answers a vector file exactly as the reference model does, datagram by datagram."""
    doc = json.loads((VECTORS / f"{name}.json").read_text())
    c = doc["config"]
    args = [
        "--listen",
        "127.0.0.1:0",
        "--capacity",
        str(c["capacity"]),
        "--values",
        str(c["values"]),
        "--max-clusters",
        str(c["max_clusters"]),
        "--max-blocks",
        str(c["max_blocks"]),
        "--mode",
        c["mode"],
        "--congestion-threshold",
        str(c["congestion_threshold"]),
        "--frac-bits",
        str(c["frac_bits"]),
        "--threshold",
        repr(c["threshold"] / 2 ** c["frac_bits"]),
    ]
    if "cluster_quota" in c:
        args += ["--cluster-quota", str(c["cluster_quota"])]
    args += ["--feedback", str(c.get("feedback", 2))]  # absent: revision 2 (tests/vectors/README.md)
    with running_switch(*args) as sw, client() as s:
        for k, step in enumerate(doc["steps"]):
            s.sendto(bytes.fromhex(step["in"]), sw.address)
            if step["out"] is not None:
                data, _ = s.recvfrom(65535)
                assert data.hex() == step["out"], f"step {k}: {step['note']}"
        s.sendto(PULL, sw.address)
        tail = Olaf(s.recvfrom(65535)[0])
        assert tail.msg_type in (MsgType.DATA, MsgType.EMPTY)


mutations = st.one_of(
    st.binary(max_size=400),
    st.builds(
        lambda raw, at, b: raw[:at] + bytes([b]) + raw[at + 1 :],
        st.sampled_from([update(1), PULL, update(2, cluster=1)]),
        st.integers(0, 60),
        st.integers(0, 255),
    ),
    st.builds(lambda raw, n: raw[:n], st.sampled_from([update(1), PULL]), st.integers(0, 300)),
)


@pytest.fixture(scope="module")
def fuzzed_switch():
    with running_switch("--listen", "127.0.0.1:0", "--capacity", "8") as sw:
        yield sw
    assert sw.proc.returncode == 0, sw.stderr


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(mutations, min_size=10, max_size=80))
def test_fuzzed_input_never_breaks_the_switch(fuzzed_switch, buffers: list[bytes]) -> None:
    sw = fuzzed_switch
    with client(timeout=0.5) as s:
        for raw in buffers:
            s.sendto(raw, sw.address)
        # Drain whatever valid updates got in, then check the switch still follows the rules.
        for _ in range(40):
            s.sendto(PULL, sw.address)
        time.sleep(0.05)
        s.settimeout(0.2)
        try:
            while True:
                s.recvfrom(65535)
        except TimeoutError:
            pass
        s.settimeout(2.0)
        assert ask(s, sw.address, PULL).msg_type == MsgType.EMPTY
        assert ask(s, sw.address, update(5, block=3)).outcome == Outcome.ENQUEUED
        data = ask(s, sw.address, PULL)
        assert (data.msg_type, data.worker_id, data.block_id) == (MsgType.DATA, 5, 3)
    assert sw.proc.poll() is None


def test_drop_prob_one_drops_every_response() -> None:
    with running_switch("--listen", "127.0.0.1:0", "--drop-prob", "1.0") as sw, client(0.3) as s:
        s.sendto(update(1), sw.address)
        with pytest.raises(TimeoutError):
            s.recvfrom(65535)
    assert sw.final["outcomes"]["ENQUEUED"] == 1 and sw.final["sent"] == 0


def test_drop_prob_half_drops_some() -> None:
    with (
        running_switch("--listen", "127.0.0.1:0", "--drop-prob", "0:0.5", "--seed", "1") as sw,
        client(0.3) as s,
    ):
        got = 0
        for _ in range(60):
            s.sendto(PULL, sw.address)
        try:
            while True:
                s.recvfrom(65535)
                got += 1
        except TimeoutError:
            pass
    assert 10 < got < 50


def test_delay_holds_responses_back() -> None:
    with running_switch("--listen", "127.0.0.1:0", "--delay-ms", "300") as sw, client(3.0) as s:
        start = time.monotonic()
        assert ask(s, sw.address, PULL).msg_type == MsgType.EMPTY
        assert time.monotonic() - start >= 0.29


def test_pcap_records_both_directions(tmp_path: Path) -> None:
    with running_switch("--listen", "127.0.0.1:0", "--pcap", str(tmp_path)) as sw, client() as s:
        ask(s, sw.address, update(1))
        ask(s, sw.address, PULL)
    inbound, outbound = rdpcap(str(tmp_path / "udp_in.pcap")), rdpcap(str(tmp_path / "udp_out.pcap"))
    # The switch listens on a free port, not 20300, so scapy needs to be told the payload is OLAF.
    assert [Olaf(bytes(p[UDP].payload)).msg_type for p in inbound] == [MsgType.UPDATE, MsgType.PULL]
    assert [Olaf(bytes(p[UDP].payload)).msg_type for p in outbound] == [MsgType.ACK, MsgType.DATA]
    assert inbound[0][UDP].dport == sw.address[1] and outbound[0][UDP].sport == sw.address[1]


def test_stats_lines_and_sigint() -> None:
    proc = subprocess.Popen(
        olaf_command("switch", "--listen", "127.0.0.1:0", "--stats-interval", "0.2"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout.readline().startswith("listening on udp")
        time.sleep(0.7)
        proc.send_signal(2)
        out, err = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0
    assert "pps=" in err and "occupied=0/64" in err
    assert out.splitlines()[-1].startswith("final ")


@pytest.mark.parametrize(
    "args",
    [
        ["--listen", "nohost"],
        ["--capacity", "0", "--listen", "127.0.0.1:0"],
        ["--listen", "127.0.0.1:0", "--drop-prob", "2"],
        ["--listen", "127.0.0.1:0", "--mode", "lifo"],
        [],
        ["--listen", "127.0.0.1:0", "--threshold", "-1"],
        ["--listen", "127.0.0.1:0", "-i", "1@lo"],
        ["--listen", "127.0.0.1:0", "--values", "300"],
    ],
)
def test_bad_arguments_exit_2_with_one_line(args: list[str]) -> None:
    r = subprocess.run(olaf_command("switch", *args), capture_output=True, text=True, timeout=30)
    assert r.returncode == 2
    assert len(r.stderr.strip().splitlines()) == 1 and "error" in r.stderr


def test_port_in_use_is_a_clear_error() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as taken:
        taken.bind(("127.0.0.1", 0))
        port = taken.getsockname()[1]
        r = subprocess.run(
            olaf_command("switch", "--listen", f"127.0.0.1:{port}"),
            capture_output=True,
            text=True,
            timeout=30,
        )
    assert r.returncode == 2 and "cannot listen" in r.stderr


def test_help_documents_every_option() -> None:
    r = subprocess.run(olaf_command("switch", "--help"), capture_output=True, text=True, timeout=30)
    for option in (
        "--listen",
        "--interface",
        "--capacity",
        "--values",
        "--max-clusters",
        "--max-blocks",
        "--mode",
        "--threshold",
        "--congestion-threshold",
        "--frac-bits",
        "--drop-prob",
        "--delay-ms",
        "--pcap",
        "--stats-interval",
        "--forwarding",
        "--route",
    ):
        assert option in r.stdout, option
