"""The Wireshark dissector (docs/wireshark/olaf.lua): current, and it agrees with the codec.

The Lua file is generated from ``worker_transport.protocol``'s field table; the first
test fails when the committed copy is stale. The others run ``tshark`` with the plugin on
a pcap that ``olaf switch --pcap`` wrote, and check every field of every packet against
``worker_transport.codec.decode`` of the same bytes (skipped where tshark is missing).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
from scapy.layers.inet import UDP
from scapy.utils import rdpcap

from dataplane.pcap import LINKTYPE_RAW, PcapWriter, ipv4_udp
from tests.switch_process import REPO, running_switch
from worker_transport.codec import decode
from worker_transport.dissector import FEEDBACK_FIELDS, field_layout, generate
from worker_transport.protocol import HEADER_FIELDS, OLAF_PORT, MsgType, Olaf, Outcome

LUA = Path(REPO) / "docs" / "wireshark" / "olaf.lua"
V = 8
TSHARK = shutil.which("tshark")
needs_tshark = pytest.mark.skipif(TSHARK is None, reason="tshark is not installed")
FIELDS = [name for name, _ in HEADER_FIELDS]


def test_committed_dissector_is_what_the_field_table_generates() -> None:
    assert LUA.read_text() == generate(), (
        "docs/wireshark/olaf.lua is stale: python -m worker_transport.dissector > "
        "docs/wireshark/olaf.lua")


def test_layout_follows_the_field_table() -> None:
    layout = field_layout()
    assert [name for name, *_ in layout] == FIELDS
    assert layout[0] == ("version", 0, 1, 0xF0) and layout[1] == ("msg_type", 0, 1, 0x0F)
    assert dict((n, (o, s)) for n, o, s, _ in layout)["reward"] == (24, 4)
    assert set(FEEDBACK_FIELDS) <= set(FIELDS)
    lua = generate()
    for name in FIELDS:
        assert f'"olaf.{name}"' in lua, name
    for member in (*MsgType, *Outcome):
        assert f'"{member.name}"' in lua


def tshark_rows(pcap: Path, decode_as_port: int | None = None) -> list[dict[str, str]]:
    """One dict per OLAF packet: every header field, CONGESTED, the values, the Info column."""
    columns = ["frame.number", *(f"olaf.{n}" for n in FIELDS), "olaf.congested", "olaf.value",
               "_ws.col.Info"]
    cmd = [TSHARK, "-n", "-X", f"lua_script:{LUA}", "-r", str(pcap), "-Y", "olaf",
           "-T", "fields", "-E", "separator=\t", "-E", "occurrence=a", "-E", "aggregator=,"]
    if decode_as_port is not None:
        cmd += ["-d", f"udp.port=={decode_as_port},olaf"]
    for c in columns:
        cmd += ["-e", c]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "Lua" not in result.stderr and "error" not in result.stderr.lower(), result.stderr
    return [dict(zip(columns, line.split("\t"), strict=True))
            for line in result.stdout.splitlines() if line]


def as_int(text: str) -> int:
    return int(text, 0)


def as_bool(text: str) -> bool:
    return {"1": True, "True": True, "0": False, "False": False}[text]


def check_against_codec(pcap: Path, rows: list[dict[str, str]]) -> list[str]:
    """Every field of every packet equals the codec's decode; returns the Info column."""
    payloads = [bytes(p[UDP].payload) for p in rdpcap(str(pcap))]
    assert len(rows) == len(payloads) > 0
    batch = decode(payloads, V)
    for i, row in enumerate(rows):
        h = batch.headers[i]
        for name in FIELDS:
            assert as_int(row[f"olaf.{name}"]) == int(h[name]), (i, name, row)
        assert as_bool(row["olaf.congested"]) == bool(h["flags"] & 1)
        n = int(h["num_values"])
        values = [int(v) for v in row["olaf.value"].split(",")] if row["olaf.value"] else []
        assert values == batch.values[i][:n].tolist(), (i, row)
        name = MsgType(int(h["msg_type"])).name
        assert row["_ws.col.Info"].startswith(name), row
        if h["msg_type"] == MsgType.ACK:
            assert Outcome(int(h["outcome"])).name in row["_ws.col.Info"], row
    return [row["_ws.col.Info"] for row in rows]


@needs_tshark
@pytest.mark.timeout(120)
def test_tshark_decodes_a_switch_capture_exactly_as_the_codec(tmp_path: Path) -> None:
    pcap_dir = tmp_path / "pcap"
    rng = np.random.default_rng(3)
    with running_switch("--listen", "127.0.0.1:0", "--capacity", "3", "--values", str(V),
                        "--max-blocks", "8", "--pcap", str(pcap_dir)) as sw, \
            socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(5)
        s.connect(sw.address)
        port = sw.address[1]

        def exchange(pkt: Olaf, answers: int = 1) -> None:
            s.send(bytes(pkt))
            for _ in range(answers):
                s.recv(2048)

        def update(worker: int, block: int, reward: float, **kw: int) -> Olaf:
            values = rng.integers(-(2**31), 2**31, V).tolist()
            return Olaf(msg_type=MsgType.UPDATE, cluster_id=0, worker_id=worker,
                        block_id=block, seq=worker * 10 + block, model_version=7,
                        reward=int(reward * 2**16), gen_time_us=int(rng.integers(0, 2**32)),
                        contributors=1 << worker, values=values, **kw)

        exchange(update(1, 0, -3.5))            # ENQUEUED, reward negative
        exchange(update(2, 0, -3.25))           # MERGED (threshold not set: all merge)
        exchange(update(3, 1, 10.0))            # ENQUEUED
        exchange(update(3, 1, 11.0))            # REPLACED
        exchange(update(4, 2, 1.0))             # ENQUEUED: the queue is full (CONGESTED)
        exchange(update(5, 3, 1.0))             # DROPPED_FULL
        exchange(update(6, 4, 1.0, frac_bits=8))  # DROPPED_INVALID
        for _ in range(4):                      # three DATA, then EMPTY
            exchange(Olaf(msg_type=MsgType.PULL, num_values=0))
        time.sleep(0.2)
    assert sw.proc.returncode == 0, sw.stderr
    infos = []
    for way in ("in", "out"):
        pcap = pcap_dir / f"udp_{way}.pcap"
        infos += check_against_codec(pcap, tshark_rows(pcap, decode_as_port=port))
    text = "\n".join(infos)
    for outcome in ("ENQUEUED", "MERGED", "REPLACED", "DROPPED_FULL", "DROPPED_INVALID"):
        assert "ACK cluster=" in text and outcome in text, (outcome, text)
    for kind in ("UPDATE", "PULL", "DATA", "EMPTY"):
        assert any(i.startswith(kind) for i in infos), (kind, text)
    # CONGESTED, active_clusters and queue_util as three fields of the feedback.
    out_rows = tshark_rows(pcap_dir / "udp_out.pcap", decode_as_port=port)
    assert any(as_bool(r["olaf.congested"]) and r["olaf.queue_util"] == "255" for r in out_rows)
    assert any(r["olaf.active_clusters"] == "1" for r in out_rows)


@needs_tshark
def test_the_dissector_claims_udp_port_20300_by_itself(tmp_path: Path) -> None:
    pcap = tmp_path / "port.pcap"
    packets = [bytes(Olaf(msg_type=MsgType.UPDATE, worker_id=9, block_id=2, values=[1, -2, 3])),
               bytes(Olaf(msg_type=MsgType.ACK, worker_id=9, block_id=2, outcome=Outcome.MERGED,
                          flags=1, active_clusters=3, queue_util=200, num_values=0)),
               bytes(Olaf(msg_type=MsgType.MODEL, block_id=1, values=[5] * 4))]
    writer = PcapWriter(pcap, LINKTYPE_RAW)
    writer.write([ipv4_udp(("10.0.0.1", 40000), ("10.0.0.2", OLAF_PORT), packets[0]),
                  ipv4_udp(("10.0.0.2", OLAF_PORT), ("10.0.0.1", 40000), packets[1]),
                  ipv4_udp(("10.0.0.2", OLAF_PORT), ("10.0.0.3", 40001), packets[2])])
    writer.close()
    rows = tshark_rows(pcap)  # no decode-as: the port alone selects OLAF
    assert len(rows) == 3
    assert rows[0]["olaf.value"] == "1,-2,3" and rows[0]["_ws.col.Info"].startswith("UPDATE")
    ack = rows[1]
    assert (as_bool(ack["olaf.congested"]), ack["olaf.active_clusters"], ack["olaf.queue_util"]) \
        == (True, "3", "200")
    assert "MERGED" in ack["_ws.col.Info"]
    assert rows[2]["_ws.col.Info"].startswith("MODEL") and rows[2]["olaf.value"] == "5,5,5,5"
