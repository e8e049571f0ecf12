"""The software switch as a packet processor: sockets in, OlafQueue, sockets out.

Two front ends share one pipeline (``Pipeline.handle``: decode a batch, run the
queue, encode the responses):

* ``UdpSwitch``: datagrams carry the OLAF header and values; every response goes
  back to the address the message came from.
* ``EthernetSwitch`` (``dataplane.ethernet``): AF_PACKET ports, as a Mininet node
  uses them.

Python has no ``recvmmsg``; the closest it gets is draining a non-blocking socket
in a tight loop into a batch, then doing everything else per batch in numpy.
"""

from __future__ import annotations

import json
import select
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from dataplane.forwarding import ForwardingTable
from dataplane.impairment import Impairment
from dataplane.pcap import LINKTYPE_RAW, PcapWriter, ipv4_udp
from dataplane.queue import OlafQueue
from worker_transport.codec import decode, encode
from worker_transport.protocol import Outcome


class Pipeline:
    """The queue plus the bookkeeping every front end shares: counters and a lock.

    Hold ``lock`` to change ``queue.mode``/``threshold`` from another thread (the
    controller loop, the P4Runtime service); it is taken once per batch.
    """

    def __init__(self, queue: OlafQueue) -> None:
        self.queue = queue
        self.lock = threading.Lock()
        self.received = 0
        self.sent = 0
        self.batches = 0

    def handle(self, payloads: list[bytes]) -> tuple[list[bytes], np.ndarray, np.ndarray]:
        """Responses (encoded), the input index each answers, and every input's verdict."""
        batch = decode(payloads, self.queue.config.values)
        with self.lock:
            responses, source, verdicts = self.queue.process(batch)
        self.received += len(payloads)
        self.batches += 1
        return encode(responses), source, verdicts

    def snapshot(self) -> dict:
        q = self.queue
        c = q.counters
        return {
            "received": self.received,
            "sent": self.sent,
            "batches": self.batches,
            "occupied": q.occupied,
            "active_clusters": q.active_clusters,
            "outcomes": {o.name: c.outcomes[o] for o in Outcome},
            "msg_types": {str(t): n for t, n in enumerate(c.msg_types) if n},
            "invalid": {str(v): n for v, n in enumerate(c.invalid) if n},
        }


class StatsLine:
    """Periodic one-line stats: packet rate since the last line, occupancy, outcomes."""

    def __init__(self, pipeline: Pipeline, interval: float, emit: Callable[[str], None]) -> None:
        self.pipeline, self.interval, self.emit = pipeline, interval, emit
        self._last_time = time.monotonic()
        self._last_received = 0

    def tick(self, now: float) -> None:
        if self.interval <= 0 or now - self._last_time < self.interval:
            return
        p = self.pipeline
        pps = (p.received - self._last_received) / (now - self._last_time)
        self._last_time, self._last_received = now, p.received
        q = p.queue
        outcomes = " ".join(
            f"{o.name.lower()}={q.counters.outcomes[o]}" for o in Outcome if q.counters.outcomes[o]
        )
        self.emit(
            f"pps={pps:.0f} occupied={q.occupied}/{q.config.capacity} "
            f"active_clusters={q.active_clusters} {outcomes}".rstrip()
        )


class UdpSwitch:
    """OLAF over plain UDP: ``--listen HOST:PORT``."""

    def __init__(
        self,
        queue: OlafQueue,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        impairment: Impairment | None = None,
        pcap_dir: Path | None = None,
        batch_size: int = 512,
    ) -> None:
        self.pipeline = Pipeline(queue)
        self.impairment = impairment or Impairment()
        # Kept so that every front end serves the same P4Runtime tables; UDP traffic never uses it.
        self.table = ForwardingTable()
        self.batch_size = batch_size
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
        self.sock.bind((host, port))
        self.sock.setblocking(False)
        self.address: tuple[str, int] = self.sock.getsockname()
        self._pcap_in = self._pcap_out = None
        if pcap_dir is not None:
            pcap_dir.mkdir(parents=True, exist_ok=True)
            self._pcap_in = PcapWriter(pcap_dir / "udp_in.pcap", LINKTYPE_RAW)
            self._pcap_out = PcapWriter(pcap_dir / "udp_out.pcap", LINKTYPE_RAW)

    @property
    def queue(self) -> OlafQueue:
        return self.pipeline.queue

    @property
    def lock(self) -> threading.Lock:
        return self.pipeline.lock

    def _drain(self) -> tuple[list[bytes], list[tuple[str, int]]]:
        payloads: list[bytes] = []
        senders: list[tuple[str, int]] = []
        recv = self.sock.recvfrom
        try:
            while len(payloads) < self.batch_size:
                data, addr = recv(65535)
                payloads.append(data)
                senders.append(addr)
        except (BlockingIOError, InterruptedError):
            pass
        except ConnectionRefusedError:
            # An ICMP port unreachable for an earlier reply; the sender is gone.
            pass
        return payloads, senders

    def _send(self, items: list[tuple[bytes, tuple[str, int]]]) -> None:
        sendto = self.sock.sendto
        for data, addr in items:
            try:
                sendto(data, addr)
                self.pipeline.sent += 1
            except (BlockingIOError, ConnectionRefusedError, OSError):
                # A full send buffer or a vanished peer loses this reply, as a wire would.
                pass
        if self._pcap_out is not None and items:
            self._pcap_out.write([ipv4_udp(self.address, addr, data) for data, addr in items])

    def poll(self, timeout: float) -> int:
        """Wait up to ``timeout`` s for traffic, process one batch; returns messages handled."""
        now = time.monotonic()
        due = self.impairment.next_due()
        if due is not None:
            timeout = max(0.0, min(timeout, due - now))
        readable, _, _ = select.select([self.sock], [], [], timeout)
        self._send(self.impairment.due(time.monotonic()))
        if not readable:
            return 0
        payloads, senders = self._drain()
        if not payloads:
            return 0
        if self._pcap_in is not None:
            captured = zip(payloads, senders, strict=True)
            self._pcap_in.write([ipv4_udp(a, self.address, p) for p, a in captured])
        responses, source, _ = self.pipeline.handle(payloads)
        ports = np.zeros(len(responses), np.int64)
        keep = self.impairment.keep(ports)
        items = [(r, senders[s]) for r, s, k in zip(responses, source.tolist(), keep, strict=True) if k]
        self._send(self.impairment.schedule(ports[keep], items, time.monotonic()))
        return len(payloads)

    def serve(self, stop: threading.Event, stats: StatsLine | None = None) -> None:
        while not stop.is_set():
            self.poll(0.05)
            if stats is not None:
                stats.tick(time.monotonic())

    def start(self) -> tuple[threading.Thread, threading.Event]:
        """Serve in a daemon thread (the embedded mode); set the event to stop it."""
        stop = threading.Event()
        thread = threading.Thread(target=self.serve, args=(stop,), name="olaf-switch", daemon=True)
        thread.start()
        return thread, stop

    def close(self) -> None:
        self.sock.close()
        for writer in (self._pcap_in, self._pcap_out):
            if writer is not None:
                writer.close()

    def final_line(self) -> str:
        return "final " + json.dumps(self.pipeline.snapshot(), sort_keys=True)
