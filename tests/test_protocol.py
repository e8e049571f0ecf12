"""The wire format: constants against DESIGN.md §2, scapy and the numpy codec agree, bad input."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scapy.layers.inet import IP, UDP

from worker_transport.codec import Batch, Verdict, classify, decode, encode
from worker_transport.protocol import (
    HEADER_FIELDS,
    HEADER_LEN,
    OLAF_PORT,
    WIRE_DTYPE,
    MsgType,
    Olaf,
    Outcome,
)

DESIGN = Path(__file__).resolve().parents[2] / "shared" / "DESIGN.md"

# DESIGN.md §2, written out so that the check also runs where shared/ is not beside the clone.
EXPECTED_FIELDS = [
    ("version", 4), ("msg_type", 4), ("flags", 8), ("cluster_id", 16), ("worker_id", 16),
    ("block_id", 16), ("agg_count", 16), ("outcome", 8), ("active_clusters", 8), ("queue_util", 8),
    ("num_values", 8), ("frac_bits", 8), ("reserved", 8), ("seq", 32), ("model_version", 32),
    ("reward", 32), ("gen_time_us", 32), ("contributors", 32),
]


def test_constants_match_design() -> None:
    assert list(HEADER_FIELDS) == EXPECTED_FIELDS
    assert HEADER_LEN == 36 and WIRE_DTYPE.itemsize == 36
    assert OLAF_PORT == 20300 == 0x4F4C
    assert [(t.name, t.value) for t in MsgType] == [
        ("UPDATE", 1), ("ACK", 2), ("PULL", 3), ("DATA", 4), ("EMPTY", 5), ("MODEL", 6)]
    assert [(o.name, o.value) for o in Outcome] == [
        ("ENQUEUED", 0), ("MERGED", 1), ("REPLACED", 2), ("DROPPED_REWARD", 3),
        ("DROPPED_FULL", 4), ("DROPPED_INVALID", 5)]


@pytest.mark.skipif(not DESIGN.exists(), reason="shared/DESIGN.md is not beside this checkout")
def test_field_table_is_the_one_in_design_md() -> None:
    text = DESIGN.read_text()
    rows = re.findall(r"^\| (\w+) \| (\d+) \|", text[text.index("## 2."):text.index("## 3.")], re.M)
    assert [(name, int(bits)) for name, bits in rows] == EXPECTED_FIELDS
    codes = re.search(r"1 UPDATE, 2 ACK, 3 PULL, 4 DATA, 5 EMPTY, 6 MODEL", text)
    assert codes is not None
    assert "0 ENQUEUED, 1 MERGED, 2 REPLACED, 3 DROPPED_REWARD, 4 DROPPED_FULL, 5 DROPPED_INVALID" in text
    assert "**20300** (0x4F4C)" in text


u8, u16, u32 = (st.integers(0, 2**b - 1) for b in (8, 16, 32))
headers = st.fixed_dictionaries({
    "msg_type": st.integers(0, 15), "flags": u8, "cluster_id": u16, "worker_id": u16,
    "block_id": u16, "agg_count": u16, "outcome": u8, "active_clusters": u8, "queue_util": u8,
    "frac_bits": u8, "reserved": u8, "seq": u32, "model_version": u32,
    "reward": st.integers(-(2**31), 2**31 - 1), "gen_time_us": u32, "contributors": u32,
})
int32s = st.integers(-(2**31), 2**31 - 1)


@settings(max_examples=300, deadline=None)
@given(fields=headers, values=st.lists(int32s, max_size=64))
def test_scapy_and_codec_agree_byte_for_byte(fields: dict, values: list[int]) -> None:
    raw = bytes(Olaf(**fields, values=values))
    assert len(raw) == HEADER_LEN + 4 * len(values)
    batch = decode([raw], len(values))
    for name, value in fields.items():
        assert int(batch.headers[name][0]) == value, name
    assert batch.values[0].tolist() == values
    assert encode(batch) == [raw]
    back = Olaf(encode(batch)[0])
    assert back.values == values and back.reward == fields["reward"]


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(headers, st.lists(int32s, min_size=8, max_size=8)), min_size=1, max_size=40))
def test_batch_round_trip(packets: list) -> None:
    raws = [bytes(Olaf(**f, values=v)) for f, v in packets]
    assert encode(decode(raws, 8)) == raws


def test_mixed_lengths_in_one_batch() -> None:
    update = bytes(Olaf(msg_type=1, values=list(range(4))))
    pull = bytes(Olaf(msg_type=3))
    batch = decode([update, pull, b"\x01", update], 4)
    assert batch.headers["msg_type"].tolist() == [1, 3, 0, 1]
    assert batch.values[3].tolist() == [0, 1, 2, 3] and batch.values[1].tolist() == [0] * 4
    assert encode(Batch(batch.headers[[0, 1]], batch.values[[0, 1]])) == [update, pull]


def test_scapy_layer_binds_to_udp_port() -> None:
    pkt = IP(bytes(IP(dst="10.0.0.1") / UDP(sport=1234, dport=OLAF_PORT) / Olaf(msg_type=3)))
    assert pkt.haslayer(Olaf) and pkt[Olaf].msg_type == MsgType.PULL
    back = IP(bytes(IP() / UDP(sport=OLAF_PORT, dport=999) / Olaf(msg_type=2, outcome=1)))
    assert back[Olaf].outcome == Outcome.MERGED


def classify_one(raw: bytes, values: int = 4) -> Verdict:
    b = decode([raw], values)
    return Verdict(classify(b, values=values, frac_bits=16, max_clusters=4, max_blocks=8)[0])


@pytest.mark.parametrize(("raw", "verdict"), [
    (bytes(Olaf(msg_type=1, values=[1, 2, 3, 4])), Verdict.OK),
    (bytes(Olaf(msg_type=3)), Verdict.OK),
    (bytes(Olaf(msg_type=6, values=[1, 2, 3, 4])), Verdict.OK),
    (b"", Verdict.SHORT),
    (bytes(Olaf(msg_type=1, values=[1, 2, 3, 4]))[:35], Verdict.SHORT),
    (bytes(Olaf(version=2, msg_type=1, values=[1, 2, 3, 4])), Verdict.BAD_VERSION),
    (bytes(Olaf(msg_type=0)), Verdict.BAD_TYPE),
    (bytes(Olaf(msg_type=9)), Verdict.BAD_TYPE),
    (bytes(Olaf(msg_type=3, values=[0])), Verdict.BAD_PULL),
    (bytes(Olaf(msg_type=3)) + b"x", Verdict.BAD_PULL),
    (bytes(Olaf(msg_type=2)), Verdict.NOT_FROM_HOST),
    (bytes(Olaf(msg_type=4, values=[1, 2, 3, 4])), Verdict.NOT_FROM_HOST),
    (bytes(Olaf(msg_type=5)), Verdict.NOT_FROM_HOST),
    (bytes(Olaf(msg_type=1, values=[1, 2, 3])), Verdict.BAD_LENGTH),
    (bytes(Olaf(msg_type=1, values=[1, 2, 3, 4]))[:-1], Verdict.BAD_LENGTH),
    (bytes(Olaf(msg_type=1, values=[1, 2, 3, 4])) + b"\0" * 4, Verdict.BAD_LENGTH),
    (bytes(Olaf(msg_type=1, frac_bits=8, values=[1, 2, 3, 4])), Verdict.BAD_FRAC_BITS),
    (bytes(Olaf(msg_type=1, cluster_id=4, values=[1, 2, 3, 4])), Verdict.CLUSTER_RANGE),
    (bytes(Olaf(msg_type=1, block_id=8, values=[1, 2, 3, 4])), Verdict.BLOCK_RANGE),
])
def test_classify_names_the_reason(raw: bytes, verdict: Verdict) -> None:
    assert classify_one(raw) == verdict


def test_only_update_problems_are_answered() -> None:
    answered = {v for v in Verdict if v.answered}
    assert answered == {Verdict.BAD_LENGTH, Verdict.BAD_FRAC_BITS, Verdict.CLUSTER_RANGE,
                        Verdict.BLOCK_RANGE}


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=300), max_size=20))
def test_any_bytes_decode_and_classify_without_exceptions(buffers: list[bytes]) -> None:
    batch = decode(buffers, 64)
    verdicts = classify(batch, values=64, frac_bits=16, max_clusters=16, max_blocks=1024)
    assert len(verdicts) == len(buffers)
    assert set(np.unique(verdicts).tolist()) <= {int(v) for v in Verdict}


@settings(max_examples=100, deadline=None)
@given(st.lists(st.one_of(st.binary(max_size=120),
                          st.builds(lambda f, v: bytes(Olaf(**f, values=v)), headers,
                                    st.lists(int32s, min_size=8, max_size=8))), max_size=30))
def test_decode_rows_equals_decode(buffers: list[bytes]) -> None:
    from worker_transport.codec import decode_rows

    rows = np.full((len(buffers), 200), 0xAB, np.uint8)  # stale bytes must not leak in
    for i, b in enumerate(buffers):
        rows[i, : len(b)] = np.frombuffer(b, np.uint8)
    lengths = np.array([len(b) for b in buffers], np.int64)
    a, b = decode(buffers, 8), decode_rows(rows, lengths, 8)
    assert (a.headers == b.headers).all() and (a.values == b.values).all()
    assert (a.lengths == b.lengths).all()
