"""Interface mode: the switch on AF_PACKET ports, as a Mininet node runs it.

Frames carrying IPv4/UDP to port 20300 with an OLAF message other than MODEL go
through the OlafQueue; the response leaves by the port the message came in on,
with Ethernet and IPv4 addresses and UDP ports swapped (as the P4 program does).
Everything else IPv4 is forwarded by the ``ForwardingTable`` (longest prefix
match, destination MAC rewritten, TTL decremented, like p4lang/tutorials'
``ipv4_forward``); frames that are not IPv4 (ARP) are flooded to the other ports.

Header rewriting is done for the whole batch at once on an ``(n, 42)`` byte array.
"""

from __future__ import annotations

import json
import select
import socket
import time
from pathlib import Path

import numpy as np

from dataplane.acl import SourceAcl
from dataplane.forwarding import ForwardingTable
from dataplane.impairment import Impairment
from dataplane.pcap import LINKTYPE_ETHERNET, PcapWriter
from dataplane.queue import OlafQueue
from dataplane.switch import FrontEnd, Pipeline
from worker_transport.inet import ipv4_checksum, ipv4_checksums
from worker_transport.protocol import OLAF_PORT, MsgType

ETH_P_ALL = 0x0003
ETH_P_IPV4 = 0x0800
PACKET_OUTGOING = 4
L2L3L4 = 42
"""Ethernet (14) + IPv4 without options (20) + UDP (8): the headers OLAF frames carry."""


def _set_u16(rows: np.ndarray, at: int, values: np.ndarray) -> None:
    rows[:, at] = values >> 8
    rows[:, at + 1] = values & 0xFF


def _u16(rows: np.ndarray, at: int) -> np.ndarray:
    return rows[:, at].astype(np.int64) << 8 | rows[:, at + 1]


def response_headers(requests: np.ndarray, payload_lengths: np.ndarray) -> np.ndarray:
    """Ethernet/IPv4/UDP headers of the answers to ``requests`` (``(n, 42)`` rows)."""
    h = requests.copy()
    h[:, 0:6], h[:, 6:12] = requests[:, 6:12], requests[:, 0:6]
    h[:, 26:30], h[:, 30:34] = requests[:, 30:34], requests[:, 26:30]
    h[:, 34:36], h[:, 36:38] = requests[:, 36:38], requests[:, 34:36]
    _set_u16(h, 16, 28 + payload_lengths)
    _set_u16(h, 38, 8 + payload_lengths)
    h[:, 40:42] = 0
    h[:, 24:26] = 0
    _set_u16(h, 24, ipv4_checksums(h[:, 14:34]))
    return h


class EthernetSwitch(FrontEnd):
    """OLAF over Ethernet frames on AF_PACKET sockets: ``-i PORT@IFACE``."""

    def __init__(
        self,
        queue: OlafQueue,
        ports: dict[int, str],
        table: ForwardingTable,
        *,
        impairment: Impairment | None = None,
        pcap_dir: Path | None = None,
        batch_size: int = 512,
        acl: SourceAcl | None = None,
    ) -> None:
        self.pipeline = Pipeline(queue, acl)
        self.table = table
        self.impairment = impairment or Impairment()
        self.batch_size = batch_size
        self.forwarded = 0
        self.unrouted = 0
        self.ports = dict(ports)
        self.sockets: dict[int, socket.socket] = {}
        try:
            for port, iface in self.ports.items():
                sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
                self.sockets[port] = sock
                # Bursts from many workers outrun a Python switch for a moment; buffer, don't drop.
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
                sock.bind((iface, 0))
                sock.setblocking(False)
        except OSError as e:
            self.close()
            raise OSError(e.errno, f"cannot open interface {iface}: {e.strerror}") from None
        self._by_fd = {s.fileno(): p for p, s in self.sockets.items()}
        self._pcaps: dict[tuple[int, str], PcapWriter] = {}
        if pcap_dir is not None:
            pcap_dir.mkdir(parents=True, exist_ok=True)
            for port, iface in self.ports.items():
                for way in ("in", "out"):
                    self._pcaps[port, way] = PcapWriter(pcap_dir / f"{iface}_{way}.pcap", LINKTYPE_ETHERNET)

    def _drain(self, readable: list[socket.socket]) -> tuple[list[bytes], list[int]]:
        frames: list[bytes] = []
        in_ports: list[int] = []
        for sock in readable:
            port = self._by_fd[sock.fileno()]
            try:
                while len(frames) < self.batch_size:
                    data, addr = sock.recvfrom(65535)
                    # AF_PACKET also shows us our own transmissions; they are not input.
                    if addr[2] != PACKET_OUTGOING:
                        frames.append(data)
                        in_ports.append(port)
            except (BlockingIOError, InterruptedError):
                pass
        return frames, in_ports

    def _transmit(self, items: list[tuple[int, bytes]]) -> None:
        for port, frame in items:
            try:
                self.sockets[port].send(frame)
                self.pipeline.sent += 1
            except OSError:
                pass
            writer = self._pcaps.get((port, "out"))
            if writer is not None:
                writer.write([frame])

    def _emit(self, items: list[tuple[int, bytes]]) -> None:
        if not items:
            return
        ports = np.fromiter((p for p, _ in items), np.int64, len(items))
        keep = self.impairment.keep(ports)
        kept = [item for item, k in zip(items, keep.tolist(), strict=True) if k]
        self._transmit(self.impairment.schedule(ports[keep], kept, time.monotonic()))

    def handle(self, frames: list[bytes], in_ports: list[int]) -> list[tuple[int, bytes]]:
        """The frames to send, as ``(egress port, frame)``, for one batch of input frames."""
        n = len(frames)
        lengths = np.fromiter(map(len, frames), np.int64, n)
        # One byte past the UDP header: the OLAF version/type byte.
        slab = b"".join([f[: L2L3L4 + 1].ljust(L2L3L4 + 1, b"\0") for f in frames])
        heads = np.frombuffer(slab, np.uint8).reshape(n, L2L3L4 + 1)
        is_ipv4 = (lengths >= 34) & (_u16(heads, 12) == ETH_P_IPV4)
        udp_len = _u16(heads, 38)
        is_olaf = (
            is_ipv4 & (lengths >= L2L3L4) & (heads[:, 14] == 0x45) & (heads[:, 23] == 17)
            & (_u16(heads, 36) == OLAF_PORT) & (udp_len >= 8) & (udp_len + 34 <= lengths)
        )
        # MODEL messages travel to the workers through ordinary forwarding.
        is_model = is_olaf & (udp_len > 8) & ((heads[:, L2L3L4] & 0x0F) == MsgType.MODEL)
        to_queue = np.flatnonzero(is_olaf & ~is_model)
        out: list[tuple[int, bytes]] = []
        if len(to_queue):
            ends = (L2L3L4 - 8 + udp_len[to_queue]).tolist()
            payloads = [frames[i][L2L3L4:end] for i, end in zip(to_queue.tolist(), ends, strict=True)]
            # The IPv4 source, for the SourceAcl; rows are big-endian bytes 26..29.
            sources = np.ascontiguousarray(heads[to_queue, 26:30]).view(">u4").reshape(-1)
            responses, source, _ = self.pipeline.handle(payloads, sources)
            if responses:
                asked = to_queue[source]
                lens = np.fromiter(map(len, responses), np.int64, len(responses))
                rows = response_headers(heads[asked, :L2L3L4], lens)
                out += [
                    (in_ports[i], row.tobytes() + r)
                    for i, row, r in zip(asked.tolist(), rows, responses, strict=True)
                ]
        out += self._forward(frames, np.flatnonzero(is_ipv4 & ~(is_olaf & ~is_model)))
        for i in np.flatnonzero(~is_ipv4 & (lengths >= 14)).tolist():
            out += [(p, frames[i]) for p in self.sockets if p != in_ports[i]]
        return out

    def _forward(self, frames: list[bytes], which: np.ndarray) -> list[tuple[int, bytes]]:
        out = []
        for i in which.tolist():
            frame = bytearray(frames[i])
            ttl = frame[22]
            route = self.table.lookup(int.from_bytes(frame[30:34], "big"))
            if route is None or ttl <= 1:
                self.unrouted += 1
                continue
            frame[6:12] = frame[0:6]
            if route.mac is not None:
                frame[0:6] = route.mac
            frame[22] = ttl - 1
            frame[24:26] = b"\0\0"
            ihl = (frame[14] & 0x0F) * 4
            frame[24:26] = ipv4_checksum(bytes(frame[14 : 14 + ihl])).to_bytes(2, "big")
            out.append((route.port, bytes(frame)))
            self.forwarded += 1
        return out

    def poll(self, timeout: float) -> int:
        readable, _, _ = select.select(list(self.sockets.values()), [], [], self._wait_limit(timeout))
        self._transmit(self.impairment.due(time.monotonic()))
        if not readable:
            return 0
        frames, in_ports = self._drain(readable)
        if not frames:
            return 0
        for frame, port in zip(frames, in_ports, strict=True):
            writer = self._pcaps.get((port, "in"))
            if writer is not None:
                writer.write([frame])
        self._emit(self.handle(frames, in_ports))
        return len(frames)

    def close(self) -> None:
        for sock in self.sockets.values():
            sock.close()
        for writer in getattr(self, "_pcaps", {}).values():
            writer.close()

    def final_line(self) -> str:
        snapshot = self.pipeline.snapshot() | {"forwarded": self.forwarded, "unrouted": self.unrouted}
        return "final " + json.dumps(snapshot, sort_keys=True)

