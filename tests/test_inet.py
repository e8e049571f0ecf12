"""worker_transport.inet: the one IPv4 checksum and MAC parser that every layer uses."""

from __future__ import annotations

import numpy as np
import pytest

from worker_transport.inet import ipv4_checksum, ipv4_checksums, mac_bytes

# The classic example header (Wikipedia, "IPv4 header checksum"), checksum bytes zeroed: 0xB861.
KNOWN = bytes.fromhex("450000730000400040110000c0a80001c0a800c7")


def test_ipv4_checksum_of_a_known_header() -> None:
    rows = np.frombuffer(KNOWN * 3, np.uint8).reshape(3, 20)
    assert ipv4_checksums(rows).tolist() == [0xB861] * 3
    assert ipv4_checksum(KNOWN) == 0xB861
    # A header carrying its checksum sums to 0xFFFF, so its checksum comes out 0.
    assert ipv4_checksum(KNOWN[:10] + (0xB861).to_bytes(2, "big") + KNOWN[12:]) == 0


def test_checksums_of_a_column_slice_of_frames_equal_those_of_copies() -> None:
    rng = np.random.default_rng(7)
    frames = rng.integers(0, 256, (50, 42), dtype=np.uint8)
    frames[:, 24:26] = 0
    sliced = frames[::2, 14:34]  # neither rows nor the slice are contiguous
    want = [ipv4_checksum(bytes(row)) for row in sliced]
    assert ipv4_checksums(sliced).tolist() == want
    assert ipv4_checksums(np.ascontiguousarray(sliced)).tolist() == want
    # A strided last axis is copied rather than misread.
    assert ipv4_checksums(np.repeat(sliced, 2, axis=1)[:, ::2]).tolist() == want


def test_checksum_folds_the_carry_back_in_twice() -> None:
    # Words ffff ffff ffff 0002 sum to 0x2ffff; one fold leaves 0x10001, the second 0x0002.
    header = bytes.fromhex("ffffffffffff0002") + bytes(12)
    assert ipv4_checksum(header) == ~0x0002 & 0xFFFF
    # Options (a 24-byte header) count like the rest.
    assert ipv4_checksum(KNOWN + bytes.fromhex("00000001")) == 0xB861 - 1


@pytest.mark.parametrize("bad", [np.zeros(20, np.uint8), np.zeros((2, 19), np.uint8)])
def test_checksum_rejects_what_is_not_rows_of_16_bit_words(bad: np.ndarray) -> None:
    with pytest.raises(ValueError, match="IPv4 headers"):
        ipv4_checksums(bad)


@pytest.mark.parametrize("text", ["0a:00:00:00:01:ff", "0A-00-00-00-01-FF", "a:0:0:0:1:ff"])
def test_mac_bytes_parses_either_separator_and_case(text: str) -> None:
    assert mac_bytes(text) == bytes([0x0A, 0, 0, 0, 1, 0xFF])


def test_mac_bytes_passes_six_bytes_through() -> None:
    assert mac_bytes(b"\x02\x00\x00\x00\x00\x01") == b"\x02\x00\x00\x00\x00\x01"
    with pytest.raises(ValueError, match="6 bytes"):
        mac_bytes(b"\x02\x00\x00")


@pytest.mark.parametrize("text", ["", "08:00:00:00:01", "08:00:00:00:01:11:22", "08:00:00:00:01:zz",
                                  "08:00:00:00:01:100", "08:00:00:00:01:"])
def test_mac_bytes_names_a_bad_address(text: str) -> None:
    with pytest.raises(ValueError, match="bad MAC address"):
        mac_bytes(text)
