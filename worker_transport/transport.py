"""How OLAF payloads reach the switch: UDP sockets, or raw Ethernet frames on an interface.

Both transports move *OLAF payloads* (the 36-byte header and its values) and hide
everything below, behind one small interface:

* ``send(packets)``: a batch, either an ``(n, L)`` uint8 array (one packet per row,
  as ``codec.encode_array`` makes them) or a sequence of bytes-like objects;
* ``recv(timeout, max_count)``: waits up to ``timeout`` seconds for the first packet,
  then takes whatever else is already waiting, without blocking, up to ``max_count``;
* ``close()``.

``UdpTransport`` talks to the software switch in UDP mode (payload = datagram, replies
come back to the sending socket) and to any host across Mininet. ``EthernetTransport``
writes complete Ethernet/IPv4/UDP frames on an ``AF_PACKET`` socket, for a P4 switch
doing L2/L3 or the software switch in interface mode. Its frames are built for the
whole batch at once with numpy (header template, per-row lengths, IPv4 checksum); no
per-packet scapy.

Sending and receiving may run on different threads (the ``Sender`` drains ACKs on a
background thread while the learner sends); ``close()`` should come after both stop.
"""

from __future__ import annotations

import argparse
import ctypes
import errno
import ipaddress
import select
import socket
import struct
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from types import TracebackType

import numpy as np

from worker_transport.inet import ipv4_checksums, mac_bytes
from worker_transport.protocol import OLAF_PORT

Packets = np.ndarray | Sequence[bytes | bytearray | memoryview]

ETH_P_IP = 0x0800
ETH_HEADER_LEN = 14
IPV4_HEADER_LEN = 20
UDP_HEADER_LEN = 8
FRAME_OVERHEAD = ETH_HEADER_LEN + IPV4_HEADER_LEN + UDP_HEADER_LEN
PACKET_OUTGOING = 4
"""``sll_pkttype`` of frames this host sent, which an AF_PACKET socket also sees."""
DEFAULT_TTL = 64
SOCKET_BUFFER = 8 << 20
"""Requested SO_RCVBUF/SO_SNDBUF; the kernel caps it at net.core.[rw]mem_max."""
MAX_DATAGRAM = 65535
SOL_UDP = 17
UDP_SEGMENT = 103
"""Linux UDP GSO option (``linux/udp.h``); Python's socket module has no name for it."""
GSO_MAX_SEGMENTS = 64
"""Datagrams per GSO call: UDP_MAX_SEGMENTS is 64 on older kernels, 128 on newer ones."""
GSO_MAX_BYTES = 65000
GSO_REFUSED = frozenset({errno.EINVAL, errno.EIO, errno.ENOPROTOOPT, errno.EOPNOTSUPP})


class Transport(ABC):
    """Send and receive batches of OLAF payloads."""

    @abstractmethod
    def send(self, packets: Packets) -> int:
        """Put a batch on the wire; returns how many packets the kernel accepted."""

    @abstractmethod
    def recv(self, timeout: float | None, max_count: int = 4096) -> list[bytes]:
        """Payloads that arrived: waits up to ``timeout`` s (None: forever) for the first."""

    @abstractmethod
    def close(self) -> None:
        """Release the socket. Idempotent."""

    send_errors = 0
    """Packets the kernel refused (ENOBUFS, ECONNREFUSED after an ICMP error, ...)."""

    def _send_each(self, send: Callable[[memoryview | bytes | bytearray], object],
                   rows: Iterable[memoryview | bytes | bytearray]) -> int:
        """``send`` each row, one call per packet; returns how many the kernel accepted."""
        sent = 0
        for row in rows:
            try:
                send(row)
                sent += 1
            except (ConnectionRefusedError, BlockingIOError, InterruptedError):
                self.send_errors += 1
            except OSError as e:
                # ENOBUFS: the local queue is full. UDP may drop: count it like a loss.
                if e.errno != errno.ENOBUFS:
                    raise
                self.send_errors += 1
        return sent

    def __enter__(self) -> Transport:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def rows_of(packets: Packets) -> list[memoryview | bytes | bytearray]:
    """One zero-copy buffer per packet, from either accepted batch form."""
    if isinstance(packets, np.ndarray):
        if packets.ndim != 2 or packets.dtype != np.uint8:
            raise ValueError("a packet array must be 2-D uint8, one packet per row")
        if not packets.flags.c_contiguous:
            packets = np.ascontiguousarray(packets)
        stride = packets.shape[1]
        flat = memoryview(packets.reshape(-1))
        return [flat[i : i + stride] for i in range(0, len(flat), stride)]
    return list(packets)


def _wait_readable(sock: socket.socket, timeout: float | None) -> bool:
    if timeout is not None and timeout <= 0:
        return True
    readable, _, _ = select.select([sock], [], [], timeout)
    return bool(readable)


def parse_hostport(text: str, default_port: int = OLAF_PORT) -> tuple[str, int]:
    """``HOST:PORT``, ``HOST`` or ``[v6]:PORT`` -> (host, port)."""
    text = text.strip()
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port = rest.removeprefix(":") or str(default_port)
    elif text.count(":") == 1:
        host, port = text.split(":")
    else:
        host, port = text, str(default_port)
    if not host:
        raise ValueError(f"no host in address {text!r}")
    try:
        number = int(port)
    except ValueError:
        raise ValueError(f"bad port in address {text!r}") from None
    if not 0 <= number <= 65535:
        raise ValueError(f"port out of range in address {text!r}")
    return host, number


class UdpTransport(Transport):
    """OLAF payloads as UDP datagrams to ``remote``.

    By default the socket is *connected* to ``remote``: sending skips the per-datagram
    route lookup (about a quarter of the cost of a 1563-block update on loopback), and
    the kernel delivers only datagrams whose source is ``remote``. Both the software
    switch (it answers from the address it was reached at) and a P4 switch bouncing the
    packet (it swaps the addresses) reply from there. Pass ``connect=False`` to accept
    replies from any source (a switch bound to 0.0.0.0 on a multi-homed host may answer
    from another of its addresses).

    ``gso=True`` hands equal-length batches to the kernel as UDP GSO super-datagrams
    (``UDP_SEGMENT``, Linux >= 4.18): up to 64 datagrams per system call, cut apart by
    the kernel, 2-6x cheaper per update on loopback. Use it only where the datagrams are
    segmented before anyone looks at them: a UDP socket on the same host (the software
    switch in UDP mode) or a NIC with segmentation offload. A veth into a raw-socket
    switch (bmv2, ``olaf switch -i``, Mininet) would see the unsegmented super-packet.
    ``gso=None`` (the default) turns it on exactly when ``remote`` is a loopback address.
    If the kernel refuses GSO, the transport falls back to one datagram per call.
    """

    def __init__(
        self,
        remote: tuple[str, int],
        *,
        bind: tuple[str, int] | None = None,
        connect: bool = True,
        gso: bool | None = None,
        buffer_bytes: int = SOCKET_BUFFER,
    ) -> None:
        infos = socket.getaddrinfo(remote[0], remote[1], type=socket.SOCK_DGRAM)
        if not infos:
            raise ValueError(f"cannot resolve {remote!r}")
        family, _, _, _, sockaddr = infos[0]
        self.remote = sockaddr
        self.sock = socket.socket(family, socket.SOCK_DGRAM)
        try:
            for option in (socket.SO_RCVBUF, socket.SO_SNDBUF):
                self.sock.setsockopt(socket.SOL_SOCKET, option, buffer_bytes)
            if bind is not None:
                self.sock.bind(bind)
            else:
                self.sock.bind(("::" if family == socket.AF_INET6 else "0.0.0.0", 0))
            if connect:
                self.sock.connect(sockaddr)
        except OSError:
            self.sock.close()
            raise
        self.connected = connect
        self.gso = ipaddress.ip_address(sockaddr[0]).is_loopback if gso is None else gso

    @property
    def local_address(self) -> tuple[str, int]:
        return self.sock.getsockname()[:2]

    def send(self, packets: Packets) -> int:
        if (self.gso and isinstance(packets, np.ndarray) and packets.ndim == 2
                and len(packets) > 1 and packets.dtype == np.uint8):
            sent = self._send_gso(np.ascontiguousarray(packets))
            if sent is not None:
                return sent
            # No UDP GSO here (old kernel, no checksum offload): one datagram per call
            # from now on. The refused first call sent nothing, so the whole batch follows.
            self.gso = False
        if self.connected:
            send = self.sock.send
        else:
            sendto, remote = self.sock.sendto, self.remote

            def send(row: memoryview | bytes | bytearray) -> int:
                return sendto(row, remote)

        return self._send_each(send, rows_of(packets))

    def _send_gso(self, rows: np.ndarray) -> int | None:
        """Datagrams sent, or None if the kernel refused GSO on the first call."""
        n, length = rows.shape
        per_call = max(1, min(GSO_MAX_SEGMENTS, GSO_MAX_BYTES // length))
        control = [(SOL_UDP, UDP_SEGMENT, struct.pack("H", length))]
        address = () if self.connected else (self.remote,)
        flat = memoryview(rows.reshape(-1))
        sent = 0
        for start in range(0, n, per_call):
            count = min(per_call, n - start)
            try:
                self.sock.sendmsg([flat[start * length : (start + count) * length]], control,
                                  0, *address)
                sent += count
            except (ConnectionRefusedError, BlockingIOError, InterruptedError):
                self.send_errors += count
            except OSError as e:
                if start == 0 and e.errno in GSO_REFUSED:
                    return None
                if e.errno != errno.ENOBUFS:
                    raise
                self.send_errors += count
        return sent

    def recv(self, timeout: float | None, max_count: int = 4096) -> list[bytes]:
        sock = self.sock
        if sock.fileno() < 0 or not _wait_readable(sock, timeout):
            return []
        out: list[bytes] = []
        recv = sock.recv
        while len(out) < max_count:
            try:
                out.append(recv(MAX_DATAGRAM, socket.MSG_DONTWAIT))
            except (BlockingIOError, InterruptedError):
                break
            except ConnectionRefusedError:
                # An ICMP port-unreachable for an earlier datagram: the switch is not up
                # yet or went away. The datagram is lost; keep reading.
                continue
        return out

    def close(self) -> None:
        self.sock.close()

    def __repr__(self) -> str:
        return f"UdpTransport(remote={self.remote!r})"


def interface_mac(interface: str) -> bytes:
    """The interface's own MAC, from sysfs."""
    path = Path("/sys/class/net") / interface / "address"
    try:
        return mac_bytes(path.read_text().strip())
    except FileNotFoundError:
        raise ValueError(f"no network interface {interface!r}") from None


class FrameBuilder:
    """Ethernet/IPv4/UDP frames around OLAF payloads, a whole batch per numpy pass.

    Every frame gets the same addresses and ports; the per-frame fields (IPv4 total
    length and identification, UDP length, IPv4 checksum) are computed as columns.
    The UDP checksum is 0 ("none"), which IPv4 allows and every target accepts.
    """

    def __init__(
        self,
        *,
        src_mac: bytes,
        dst_mac: bytes,
        src_ip: str,
        dst_ip: str,
        src_port: int = OLAF_PORT,
        dst_port: int = OLAF_PORT,
        ttl: int = DEFAULT_TTL,
    ) -> None:
        for port in (src_port, dst_port):
            if not 0 <= port <= 65535:
                raise ValueError(f"UDP port out of range: {port}")
        template = np.zeros(FRAME_OVERHEAD, np.uint8)
        template[0:6] = np.frombuffer(dst_mac, np.uint8)
        template[6:12] = np.frombuffer(src_mac, np.uint8)
        template[12:14] = (ETH_P_IP >> 8, ETH_P_IP & 0xFF)
        ip = ETH_HEADER_LEN
        template[ip] = 0x45  # version 4, 5 words
        template[ip + 6] = 0x40  # DF: OLAF packets are never fragmented
        template[ip + 8] = ttl
        template[ip + 9] = socket.IPPROTO_UDP
        template[ip + 12 : ip + 16] = np.frombuffer(ipaddress.IPv4Address(src_ip).packed, np.uint8)
        template[ip + 16 : ip + 20] = np.frombuffer(ipaddress.IPv4Address(dst_ip).packed, np.uint8)
        udp = ip + IPV4_HEADER_LEN
        template[udp : udp + 2] = (src_port >> 8, src_port & 0xFF)
        template[udp + 2 : udp + 4] = (dst_port >> 8, dst_port & 0xFF)
        self.template = template
        self.next_id = 0

    def build(self, payloads: np.ndarray) -> np.ndarray:
        """``(n, L)`` uint8 payloads -> ``(n, 42 + L)`` uint8 frames."""
        n, length = payloads.shape
        if IPV4_HEADER_LEN + UDP_HEADER_LEN + length > 0xFFFF:
            raise ValueError(f"payload of {length} bytes does not fit in an IPv4 packet")
        frames = np.empty((n, FRAME_OVERHEAD + length), np.uint8)
        frames[:, :FRAME_OVERHEAD] = self.template
        frames[:, FRAME_OVERHEAD:] = payloads
        ip = ETH_HEADER_LEN
        total = IPV4_HEADER_LEN + UDP_HEADER_LEN + length
        frames[:, ip + 2] = total >> 8
        frames[:, ip + 3] = total & 0xFF
        ids = (self.next_id + np.arange(n, dtype=np.uint32)) & 0xFFFF
        self.next_id = (self.next_id + n) & 0xFFFF
        frames[:, ip + 4] = ids >> 8
        frames[:, ip + 5] = ids & 0xFF
        checksum = ipv4_checksums(frames[:, ip : ip + IPV4_HEADER_LEN])
        frames[:, ip + 10] = checksum >> 8
        frames[:, ip + 11] = checksum & 0xFF
        udp_len = UDP_HEADER_LEN + length
        frames[:, ip + IPV4_HEADER_LEN + 4] = udp_len >> 8
        frames[:, ip + IPV4_HEADER_LEN + 5] = udp_len & 0xFF
        return frames


def udp_payload(frame: bytes, *, dst_ip: bytes | None, dst_port: int | None) -> bytes | None:
    """The UDP payload of an Ethernet/IPv4/UDP frame addressed to us, else None.

    Uses the UDP length, so Ethernet padding of short frames is cut off.
    """
    if len(frame) < FRAME_OVERHEAD or frame[12:14] != b"\x08\x00":
        return None
    ihl = (frame[ETH_HEADER_LEN] & 0x0F) * 4
    if frame[ETH_HEADER_LEN] >> 4 != 4 or ihl < IPV4_HEADER_LEN:
        return None
    if frame[ETH_HEADER_LEN + 9] != socket.IPPROTO_UDP:
        return None
    # Fragments carry no usable UDP header (offset != 0) or only part of the payload (MF).
    if int.from_bytes(frame[ETH_HEADER_LEN + 6 : ETH_HEADER_LEN + 8], "big") & 0x3FFF:
        return None
    if dst_ip is not None and frame[ETH_HEADER_LEN + 16 : ETH_HEADER_LEN + 20] != dst_ip:
        return None
    udp = ETH_HEADER_LEN + ihl
    if len(frame) < udp + UDP_HEADER_LEN:
        return None
    if dst_port is not None and int.from_bytes(frame[udp + 2 : udp + 4], "big") != dst_port:
        return None
    length = int.from_bytes(frame[udp + 4 : udp + 6], "big")
    end = udp + length
    if length < UDP_HEADER_LEN or end > len(frame):
        return None
    return frame[udp + UDP_HEADER_LEN : end]


SO_ATTACH_FILTER = 26


def udp_filter_program(dst_ip: bytes, dst_port: int) -> list[tuple[int, int, int, int]]:
    """Classic BPF: accept IPv4/UDP frames to ``dst_ip``:``dst_port`` (not later fragments).

    As ``tcpdump -dd 'ip and udp dst port P and dst host A and not ip[6:2] & 0x1fff != 0'``
    would write it: ``(code, jt, jf, k)``; jumps count instructions after the next one.
    """
    accept, drop = 0x40000, 0
    return [
        (0x28, 0, 0, 12),  # ldh [12]: ethertype
        (0x15, 0, 10, ETH_P_IP),  # jeq IPv4, else drop
        (0x30, 0, 0, 23),  # ldb [23]: IP protocol
        (0x15, 0, 8, socket.IPPROTO_UDP),  # jeq UDP, else drop
        (0x28, 0, 0, 20),  # ldh [20]: flags and fragment offset
        (0x45, 6, 0, 0x1FFF),  # jset offset: a later fragment, drop
        (0xB1, 0, 0, 14),  # ldxb 4*([14]&0xf): IP header length
        (0x48, 0, 0, 16),  # ldh [x+16]: UDP destination port
        (0x15, 0, 3, dst_port),  # jeq port, else drop
        (0x20, 0, 0, 30),  # ld [30]: IP destination
        (0x15, 0, 1, int.from_bytes(dst_ip, "big")),  # jeq address, else drop
        (0x06, 0, 0, accept),  # ret: the whole frame
        (0x06, 0, 0, drop),  # ret 0: drop
    ]


def attach_udp_filter(sock: socket.socket, dst_ip: bytes, dst_port: int) -> ctypes.Array:
    """Let the kernel drop frames that are not for us, before Python sees them.

    Returns the program's buffer, which must live as long as the socket is configured
    (the kernel copies it, but keeping it costs nothing and avoids doubt).
    """
    program = udp_filter_program(dst_ip, dst_port)
    buffer = ctypes.create_string_buffer(
        b"".join(struct.pack("HBBI", *insn) for insn in program)
    )
    fprog = struct.pack("HP", len(program), ctypes.addressof(buffer))
    sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, fprog)
    return buffer


class EthernetTransport(Transport):
    """OLAF payloads in Ethernet/IPv4/UDP frames on ``interface`` (needs CAP_NET_RAW).

    Frames go from ``src_mac``/``src_ip``:``src_port`` to ``dst_mac``/``dst_ip``:``dst_port``.
    Received frames are kept when they are IPv4/UDP to ``src_ip``:``src_port`` (our end)
    and were not sent by this host. ``src_mac`` defaults to the interface's MAC.

    The kernel sees the received frames too; with no UDP socket on ``src_port`` it may
    answer each with an ICMP port-unreachable. Pass ``hold_port=True`` to bind a UDP
    socket there that silently absorbs them (its buffer is tiny and never read).
    """

    def __init__(
        self,
        interface: str,
        *,
        src_ip: str,
        dst_ip: str,
        dst_mac: str | bytes,
        src_mac: str | bytes | None = None,
        src_port: int = OLAF_PORT,
        dst_port: int = OLAF_PORT,
        hold_port: bool = False,
        buffer_bytes: int = SOCKET_BUFFER,
    ) -> None:
        self.interface = interface
        src = interface_mac(interface) if src_mac is None else mac_bytes(src_mac)
        self.builder = FrameBuilder(
            src_mac=src,
            dst_mac=mac_bytes(dst_mac),
            src_ip=src_ip,
            dst_ip=dst_ip,
            src_port=src_port,
            dst_port=dst_port,
        )
        self.local_ip = ipaddress.IPv4Address(src_ip).packed
        self.local_port = src_port
        self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_IP))
        self._holder: socket.socket | None = None
        try:
            for option in (socket.SO_RCVBUF, socket.SO_SNDBUF):
                self.sock.setsockopt(socket.SOL_SOCKET, option, buffer_bytes)
            self._filter = attach_udp_filter(self.sock, self.local_ip, src_port)
            self.sock.bind((interface, ETH_P_IP))
            if hold_port:
                self._holder = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                self._holder.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1)
                self._holder.bind((src_ip, src_port))
        except OSError:
            self.close()
            raise
        self.ignored_frames = 0
        """Frames seen on the interface that were not OLAF traffic for us."""

    def send(self, packets: Packets) -> int:
        return sum(self._send_each(self.sock.send, rows_of(self.builder.build(payloads)))
                   for payloads in _equal_length_groups(packets))

    def recv(self, timeout: float | None, max_count: int = 4096) -> list[bytes]:
        sock = self.sock
        if sock.fileno() < 0 or not _wait_readable(sock, timeout):
            return []
        out: list[bytes] = []
        ip, port = self.local_ip, self.local_port
        # Bound the frames read per call, so unrelated traffic cannot keep us here.
        for _ in range(4 * max_count):
            if len(out) >= max_count:
                break
            try:
                frame, address = sock.recvfrom(MAX_DATAGRAM, socket.MSG_DONTWAIT)
            except (BlockingIOError, InterruptedError):
                break
            payload = None
            if address[2] != PACKET_OUTGOING:
                payload = udp_payload(frame, dst_ip=ip, dst_port=port)
            if payload is None:
                self.ignored_frames += 1
            else:
                out.append(payload)
        return out

    def close(self) -> None:
        self.sock.close()
        if self._holder is not None:
            self._holder.close()

    def __repr__(self) -> str:
        return f"EthernetTransport(interface={self.interface!r})"


def _equal_length_groups(packets: Packets) -> list[np.ndarray]:
    """Payloads as ``(n, L)`` arrays, one per distinct length, order kept within a length."""
    if isinstance(packets, np.ndarray):
        if packets.ndim != 2 or packets.dtype != np.uint8:
            raise ValueError("a packet array must be 2-D uint8, one packet per row")
        return [packets] if len(packets) else []
    by_length: dict[int, list[bytes]] = {}
    for p in packets:
        by_length.setdefault(len(p), []).append(bytes(p))
    return [
        np.frombuffer(b"".join(group), np.uint8).reshape(len(group), length)
        for length, group in by_length.items()
    ]


# -- command-line plumbing: the flags live in olaf.commands.worker (kept light) -------------
def transport_from_args(args: argparse.Namespace) -> Transport:
    """The transport that ``olaf.commands.worker.add_transport_arguments``'s flags describe."""
    host, port = parse_hostport(args.switch)
    if args.iface is None:
        bind = parse_hostport(args.bind, 0) if args.bind else None
        gso = {"auto": None, "on": True, "off": False}[args.gso]
        return UdpTransport((host, port), bind=bind, connect=not args.any_source, gso=gso)
    if args.src_ip is None or args.dst_mac is None:
        raise ValueError("--iface needs --src-ip and --dst-mac")
    return EthernetTransport(
        args.iface,
        src_ip=args.src_ip,
        dst_ip=host,
        dst_mac=args.dst_mac,
        src_mac=args.src_mac,
        src_port=args.src_port,
        dst_port=port,
        hold_port=True,
    )
