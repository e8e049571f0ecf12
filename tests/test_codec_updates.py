"""The learner's ends of the codec: a gradient as UPDATE blocks, DATA values as the mean.

The sender, the receiver and the in-process path all use these, so the bytes are
checked against the wire format written out from DESIGN.md §2 by hand, and the
sender's bytes against the in-process ones.
"""

from __future__ import annotations

import struct

import numpy as np
import pytest

from worker_transport.codec import encode, gradient_updates, mean_values, stamp_update, update_batch
from worker_transport.fixedpoint import from_fixed
from worker_transport.policy import AlwaysSend
from worker_transport.protocol import HEADER_DTYPE, WIRE_DTYPE
from worker_transport.sender import Sender

V, FRAC = 4, 16


def _update_by_hand(block_id: int, values: list[int], *, worker: int, seq: int, version: int,
                    reward: int, gen: int) -> bytes:
    """One UPDATE laid out field by field as DESIGN.md §2 has them (cluster 2)."""
    header = struct.pack(
        "!BBHHHHBBBBBBIIiII", 0x11, 0, 2, worker, block_id, 1, 0, 0, 0, len(values), FRAC, 0,
        seq, version, reward, gen, 1 << (worker % 32),
    )
    return header + struct.pack(f"!{len(values)}i", *values)


def test_gradient_updates_are_the_wire_format_of_design_md() -> None:
    flat = np.array([1.0, -0.5, 2**-16, 3.0, -1.25], np.float32)  # two blocks, the last padded
    wire = encode(gradient_updates(flat, values=V, frac_bits=FRAC, cluster_id=2, worker_id=37,
                                   seq=2**32 + 5, model_version=-1, reward=-2.5, gen_time_us=2**33 + 9))
    common = {"worker": 37, "seq": 5, "version": 0xFFFFFFFF, "reward": -5 * 2**15, "gen": 9}
    assert wire == [
        _update_by_hand(0, [1 << 16, -(1 << 15), 1, 3 << 16], **common),
        _update_by_hand(1, [-(5 << 14), 0, 0, 0], **common),
    ]


def test_the_sender_sends_the_bytes_of_gradient_updates() -> None:
    sent: list[bytes] = []

    class Capture:
        def send(self, packets: np.ndarray) -> int:
            sent.extend(bytes(row) for row in packets)
            return len(packets)

        def recv(self, timeout: float | None, max_count: int = 4096) -> list[bytes]:
            return []

        def close(self) -> None:
            pass

    flat = np.random.default_rng(3).normal(0, 0.1, 3 * V + 1).astype(np.float32)
    clock = 2**32 + 1234
    sender = Sender(Capture(), cluster_id=2, worker_id=7, values=V, frac_bits=FRAC, policy=AlwaysSend(),
                    ack_thread=False, clock=lambda: clock)
    for seq in range(2):  # the second update reuses the sender's buffer
        assert sender.send_gradient(flat * (seq + 1), reward=12.75, model_version=40 + seq)
        want = encode(gradient_updates(flat * (seq + 1), values=V, frac_bits=FRAC, cluster_id=2, worker_id=7,
                                       seq=seq, model_version=40 + seq, reward=12.75, gen_time_us=clock))
        assert sent == want
        sent.clear()
    sender.close()


def test_stamp_update_writes_host_and_wire_records_alike() -> None:
    host = update_batch(3, values=V, frac_bits=FRAC, cluster_id=1, worker_id=33).headers
    wire = np.zeros(3, WIRE_DTYPE)
    for headers in (host, wire):
        stamp_update(headers, seq=-1, model_version=2**32, reward=0.5, gen_time_us=7, frac_bits=8)
        assert headers["seq"].tolist() == [0xFFFFFFFF] * 3
        assert headers["model_version"].tolist() == [0] * 3
        assert headers["reward"].tolist() == [128] * 3
        assert headers["gen_time_us"].tolist() == [7] * 3
    assert host.dtype == HEADER_DTYPE
    assert host["block_id"].tolist() == [0, 1, 2] and (host["contributors"] == 2).all()


def test_mean_values_is_the_exact_mean_of_the_fixed_point_sums() -> None:
    # 3 contributions of 1.0: exactly 1.0 (multiplying by a rounded 1/3 would miss by an ulp).
    sums = np.array([[3 << 16, -(3 << 16), 1, 0], [4 << 16, 2, -2, 7]], np.int32)
    got = mean_values(sums, np.array([3, 2], np.uint16), FRAC)
    assert got.dtype == np.float32
    assert got[0].tolist() == [1.0, -1.0, np.float32(2**-16) / np.float32(3), 0.0]
    assert got[1].tolist() == [2.0, 2**-16, -(2**-16), 3.5 * 2**-16]
    # One block with a scalar count; a malformed count of 0 is taken as 1, not as inf.
    assert mean_values(sums[1], 2, FRAC).tolist() == got[1].tolist()
    assert mean_values(sums[1], 0, FRAC).tolist() == from_fixed(sums[1], FRAC).tolist()


@pytest.mark.parametrize("frac_bits", [0, 16, 31])
def test_mean_values_rounds_like_converting_then_dividing(frac_bits: int) -> None:
    rng = np.random.default_rng(frac_bits)
    sums = rng.integers(-(2**31), 2**31, (500, 8)).astype(np.int32)
    counts = rng.integers(1, 2**16, 500).astype(np.uint16)
    want = np.stack([from_fixed(s, frac_bits) / np.float32(c) for s, c in zip(sums, counts, strict=True)])
    assert mean_values(sums, counts, frac_bits).tobytes() == want.tobytes()
