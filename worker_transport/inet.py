"""Internet helpers every layer that builds or rewrites frames needs: the IPv4 header
checksum (RFC 1071) and MAC addresses.

They live at the bottom floor so that the host transport, the software switch and
its pcap writer share one definition (DESIGN.md §6: ``dataplane`` may import
``worker_transport``, never the other way round).
"""

from __future__ import annotations

import numpy as np


def ipv4_checksums(headers: np.ndarray) -> np.ndarray:
    """RFC 1071 checksum of each row of an ``(n, L)`` uint8 array of IPv4 headers.

    ``L`` is the header length (20, or more with options; even). The checksum field
    itself must be zero in the input. Rows may be a column slice of wider frames.
    """
    rows = np.asarray(headers, np.uint8)
    if rows.ndim != 2 or rows.shape[1] % 2:
        raise ValueError(f"IPv4 headers are (n, even length) bytes, not shape {rows.shape}")
    # Viewing pairs of bytes as big-endian words needs only the last axis contiguous,
    # which a column slice of frames is: no copy on the batch paths.
    if rows.strides[1] != 1:
        rows = np.ascontiguousarray(rows)
    total = rows.view(">u2").sum(axis=1, dtype=np.uint32)
    # Two folds suffice: a 60-byte header sums to less than 2**21.
    total = (total & 0xFFFF) + (total >> 16)
    total = (total & 0xFFFF) + (total >> 16)
    return (~total & 0xFFFF).astype(np.uint16)


def ipv4_checksum(header: bytes | bytearray | memoryview) -> int:
    """RFC 1071 checksum of one IPv4 header (checksum field zero), as an int."""
    return int(ipv4_checksums(np.frombuffer(header, np.uint8).reshape(1, -1))[0])


def mac_bytes(mac: str | bytes) -> bytes:
    """A MAC address as 6 bytes, from ``08:00:00:00:01:11`` (``-`` also separates) or bytes.

    Raises ``ValueError`` naming the address when it is not six hex octets.
    """
    if isinstance(mac, bytes):
        if len(mac) != 6:
            raise ValueError("a MAC address has 6 bytes")
        return mac
    parts = mac.replace("-", ":").split(":")
    if len(parts) != 6:
        raise ValueError(f"bad MAC address {mac!r}")
    try:
        return bytes(int(p, 16) for p in parts)
    except ValueError:  # not hex, or an octet above 0xff
        raise ValueError(f"bad MAC address {mac!r}") from None
