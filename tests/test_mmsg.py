"""Batch syscalls: recvmmsg/sendmmsg through ctypes, and the per-datagram fallback."""

from __future__ import annotations

import socket

import numpy as np
import pytest

from dataplane.mmsg import BatchSocket, PlainSocket, available, from_sockaddr, to_sockaddr
from dataplane.queue import OlafQueue, QueueConfig
from dataplane.switch import UdpSwitch
from tests.vectors.generate import update
from worker_transport.protocol import MsgType, Olaf, Outcome


def pair() -> tuple[socket.socket, socket.socket]:
    a = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    a.bind(("127.0.0.1", 0))
    a.setblocking(False)
    b = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    b.bind(("127.0.0.1", 0))
    b.settimeout(2)
    return a, b


@pytest.mark.parametrize("kind", [BatchSocket, PlainSocket])
def test_batch_round_trip(kind) -> None:
    if kind is BatchSocket and available() is not None:
        pytest.skip(available())
    a, b = pair()
    with a, b:
        io = kind(a, batch=4, mtu=64)
        assert len(io.recv()[0]) == 0
        for i in range(6):
            b.sendto(bytes([i]) * (5 + i), a.getsockname())
        rows, lengths, peers = io.recv()
        assert lengths.tolist() == [5, 6, 7, 8]  # at most one batch
        assert [bytes(r[:n]) for r, n in zip(rows, lengths, strict=True)] == [
            bytes([i]) * (5 + i) for i in range(4)
        ]
        assert all(from_sockaddr(p) == b.getsockname() for p in peers)
        assert io.recv()[1].tolist() == [9, 10]
        out = np.arange(30, dtype=np.uint8).reshape(3, 10)
        assert io.send(out, np.array([3, 10, 1]), np.repeat(to_sockaddr(b.getsockname()), 3)) == 3
        assert [b.recvfrom(100)[0] for _ in range(3)] == [bytes([0, 1, 2]), bytes(range(10, 20)), bytes([20])]


def test_switch_without_batch_syscalls_answers_the_same() -> None:
    switch = UdpSwitch(OlafQueue(QueueConfig(capacity=2)), batch_syscalls=False)
    thread, stop = switch.start()
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.settimeout(2)
            s.sendto(update(1), switch.address)
            assert Olaf(s.recvfrom(2048)[0]).outcome == Outcome.ENQUEUED
            s.sendto(bytes(Olaf(msg_type=MsgType.PULL)), switch.address)
            assert Olaf(s.recvfrom(2048)[0]).msg_type == MsgType.DATA
    finally:
        stop.set()
        thread.join(5)
        switch.close()
    assert isinstance(switch.io, PlainSocket)
