"""A minimal pcap writer, so ``olaf switch --pcap DIR`` needs no scapy in its data path.

UDP mode records LINKTYPE_RAW (IPv4 packets synthesised from the socket
addresses); interface mode records the Ethernet frames as they were.
"""

from __future__ import annotations

import struct
import time
from pathlib import Path
from typing import BinaryIO

from worker_transport.inet import ipv4_checksum

LINKTYPE_ETHERNET = 1
LINKTYPE_RAW = 101
_UDP = 17


class PcapWriter:
    def __init__(self, path: Path, linktype: int) -> None:
        self._file: BinaryIO = open(path, "wb")  # noqa: SIM115 - closed in close()
        self._file.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, linktype))

    def write(self, packets: list[bytes], when: float | None = None) -> None:
        when = time.time() if when is None else when
        sec, usec = int(when), int((when % 1) * 1e6)
        self._file.write(
            b"".join(struct.pack("<IIII", sec, usec, len(p), len(p)) + p for p in packets)
        )
        # Flushed per batch so that a capture can be read (or tailed by Wireshark) while running.
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def ipv4_udp(src: tuple[str, int], dst: tuple[str, int], payload: bytes) -> bytes:
    """An IPv4/UDP packet around ``payload`` (UDP checksum 0), for LINKTYPE_RAW captures."""
    import socket

    length = 28 + len(payload)
    header = struct.pack(
        "!BBHHHBBH4s4s", 0x45, 0, length, 0, 0, 64, _UDP, 0,
        socket.inet_aton(src[0]), socket.inet_aton(dst[0]),
    )
    header = header[:10] + struct.pack("!H", ipv4_checksum(header)) + header[12:]
    return header + struct.pack("!HHHH", src[1], dst[1], 8 + len(payload), 0) + payload
