"""``recvmmsg``/``sendmmsg`` for UDP sockets, through ctypes (Linux).

Python's socket module has no batch system calls, so a Python switch pays one
syscall and one ``bytes`` object per datagram. Here a whole batch moves in one
call, straight into (and out of) numpy arrays: ``recv`` fills an ``(n, MTU)``
uint8 array plus lengths and peer addresses; ``send`` takes an ``(m, stride)``
array of encoded responses, their lengths and the peers to send them to.

Addresses stay in their kernel form (``sockaddr_in`` records), so answering a
datagram is a gather of the sender's record, never a Python tuple per packet.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import socket
import sys

import numpy as np

MSG_DONTWAIT = 0x40
SOCKADDR_IN = np.dtype([("family", "<u2"), ("port", ">u2"), ("addr", ">u4"), ("zero", "V8")])
"""``struct sockaddr_in`` (16 bytes), the family in host order, port and address in network order."""
_IOVEC = np.dtype([("base", "<u8"), ("len", "<u8")])
_MMSGHDR = np.dtype(
    [
        ("name", "<u8"),
        ("namelen", "<u4"),
        ("pad0", "<u4"),
        ("iov", "<u8"),
        ("iovlen", "<u8"),
        ("control", "<u8"),
        ("controllen", "<u8"),
        ("flags", "<i4"),
        ("pad1", "<u4"),
        ("msg_len", "<u4"),
        ("pad2", "<u4"),
    ]
)
"""``struct mmsghdr`` on LP64 Linux: the 56-byte ``msghdr``, then ``msg_len``, padded to 64."""
assert _MMSGHDR.itemsize == 64 and _MMSGHDR.fields["msg_len"][1] == 56


def available() -> str | None:
    """None when batch syscalls can be used here, else why not."""
    if not sys.platform.startswith("linux"):
        return "recvmmsg/sendmmsg are Linux system calls"
    if ctypes.sizeof(ctypes.c_void_p) != 8:
        return "only the LP64 struct layout is implemented"
    if _libc() is None:
        return "libc not found"
    return None


def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    libc = ctypes.CDLL(name, use_errno=True)
    for fn in (libc.recvmmsg, libc.sendmmsg):
        fn.restype = ctypes.c_int
    libc.recvmmsg.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_uint, ctypes.c_int, ctypes.c_void_p]
    libc.sendmmsg.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_uint, ctypes.c_int]
    return libc


class BatchSocket:
    """A non-blocking UDP socket moved a batch at a time.

    ``recv()`` returns views into buffers that the next ``recv()`` overwrites.
    """

    def __init__(self, sock: socket.socket, batch: int = 512, mtu: int = 2048) -> None:
        reason = available()
        if reason is not None:
            raise OSError(reason)
        self.sock, self.batch, self.mtu = sock, batch, mtu
        self._libc = _libc()
        self._rx = np.zeros((batch, mtu), np.uint8)
        self._rx_addr = np.zeros(batch, SOCKADDR_IN)
        self._rx_iov = np.zeros(batch, _IOVEC)
        self._rx_iov["base"] = self._rx.ctypes.data + np.arange(batch, dtype=np.uint64) * mtu
        self._rx_iov["len"] = mtu
        self._rx_hdr = _headers(self._rx_addr, self._rx_iov)
        # Transmit descriptors are built once; a send only fills in lengths, bases and peers.
        self._tx_addr = np.zeros(batch, SOCKADDR_IN)
        self._tx_iov = np.zeros(batch, _IOVEC)
        self._tx_hdr = _headers(self._tx_addr, self._tx_iov)
        self._offsets = np.arange(batch, dtype=np.uint64)

    def recv(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Up to ``batch`` waiting datagrams: ``(rows, lengths, peers)``; empty when none wait."""
        self._rx_hdr["msg_len"] = 0
        n = self._libc.recvmmsg(self.sock.fileno(), self._rx_hdr.ctypes.data, self.batch, MSG_DONTWAIT, None)
        if n < 0:
            err = ctypes.get_errno()
            if err in (11, 4, 111):  # EAGAIN, EINTR, ECONNREFUSED (ICMP for an earlier reply)
                n = 0
            else:
                raise OSError(err, os.strerror(err))
        lengths = self._rx_hdr["msg_len"][:n].astype(np.int64)
        return self._rx[:n], lengths, self._rx_addr[:n]

    def send(self, rows: np.ndarray, lengths: np.ndarray, peers: np.ndarray) -> int:
        """Send ``rows[i][:lengths[i]]`` to ``peers[i]``; returns how many the kernel took."""
        m = len(rows)
        if m == 0:
            return 0
        if m > self.batch:
            return sum(
                self.send(rows[k : k + self.batch], lengths[k : k + self.batch], peers[k : k + self.batch])
                for k in range(0, m, self.batch)
            )
        rows = np.ascontiguousarray(rows, np.uint8)
        self._tx_addr[:m] = peers
        self._tx_iov["base"][:m] = rows.ctypes.data + self._offsets[:m] * np.uint64(rows.shape[1])
        self._tx_iov["len"][:m] = lengths
        hdr = self._tx_hdr
        sent = 0
        while sent < m:
            k = self._libc.sendmmsg(
                self.sock.fileno(), hdr.ctypes.data + sent * _MMSGHDR.itemsize, m - sent, MSG_DONTWAIT
            )
            if k <= 0:
                # A full send buffer or an unreachable peer costs this reply, as a wire would.
                sent += 1
                continue
            sent += k
        return sent


class PlainSocket:
    """The same interface as ``BatchSocket`` with one ``recvfrom``/``sendto`` per datagram:
    the fallback where batch syscalls are unavailable, and the baseline they are measured against."""

    def __init__(self, sock: socket.socket, batch: int = 512, mtu: int = 2048) -> None:
        self.sock, self.batch, self.mtu = sock, batch, mtu
        self._rx = np.zeros((batch, mtu), np.uint8)

    def recv(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        lengths: list[int] = []
        peers = np.zeros(self.batch, SOCKADDR_IN)
        try:
            while len(lengths) < self.batch:
                data, addr = self.sock.recvfrom(self.mtu)
                k = len(lengths)
                self._rx[k, : len(data)] = np.frombuffer(data, np.uint8)
                peers[k] = to_sockaddr(addr)[0]
                lengths.append(len(data))
        except (BlockingIOError, InterruptedError, ConnectionRefusedError):
            pass
        n = len(lengths)
        return self._rx[:n], np.asarray(lengths, np.int64), peers[:n]

    def send(self, rows: np.ndarray, lengths: np.ndarray, peers: np.ndarray) -> int:
        sent = 0
        for row, length, peer in zip(rows, lengths.tolist(), peers, strict=True):
            try:
                self.sock.sendto(row[:length].tobytes(), from_sockaddr(peer))
                sent += 1
            except OSError:
                pass
        return sent


def open_batch_socket(sock: socket.socket, batch: int = 512, mtu: int = 2048) -> BatchSocket | PlainSocket:
    """``BatchSocket`` where the batch syscalls exist, else ``PlainSocket``."""
    return BatchSocket(sock, batch, mtu) if available() is None else PlainSocket(sock, batch, mtu)


def _headers(addrs: np.ndarray, iov: np.ndarray) -> np.ndarray:
    hdr = np.zeros(len(addrs), _MMSGHDR)
    hdr["name"] = addrs.ctypes.data + np.arange(len(addrs), dtype=np.uint64) * SOCKADDR_IN.itemsize
    hdr["namelen"] = SOCKADDR_IN.itemsize
    hdr["iov"] = iov.ctypes.data + np.arange(len(iov), dtype=np.uint64) * _IOVEC.itemsize
    hdr["iovlen"] = 1
    return hdr


def to_sockaddr(address: tuple[str, int]) -> np.ndarray:
    record = np.zeros(1, SOCKADDR_IN)
    record["family"] = socket.AF_INET
    record["port"] = address[1]
    record["addr"] = int.from_bytes(socket.inet_aton(address[0]), "big")
    return record


def from_sockaddr(record: np.void) -> tuple[str, int]:
    return socket.inet_ntoa(int(record["addr"]).to_bytes(4, "big")), int(record["port"])
