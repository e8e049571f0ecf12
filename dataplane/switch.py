"""The software switch as a packet processor: sockets in, OlafQueue, sockets out.

Two front ends share one pipeline (``Pipeline.handle``: decode a batch, run the
queue, encode the responses):

* ``UdpSwitch``: datagrams carry the OLAF header and values; every response goes
  back to the address the message came from.
* ``EthernetSwitch`` (``dataplane.ethernet``): AF_PACKET ports, as a Mininet node
  uses them.

Packets move a batch at a time: ``recvmmsg``/``sendmmsg`` (through ctypes, see
``dataplane.mmsg``) in UDP mode, a drained non-blocking AF_PACKET socket in
interface mode; everything between runs per batch in numpy.
"""

from __future__ import annotations

import json
import select
import socket
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path

import numpy as np

from dataplane.acl import SourceAcl
from dataplane.forwarding import ForwardingTable
from dataplane.impairment import Impairment
from dataplane.mmsg import SOCKADDR_IN, PlainSocket, from_sockaddr, open_batch_socket
from dataplane.pcap import LINKTYPE_RAW, PcapWriter, ipv4_udp
from dataplane.queue import OlafQueue
from worker_transport.codec import Batch, decode, decode_rows, encode, encode_array, packet_lengths
from worker_transport.protocol import Outcome


class Pipeline:
    """The queue plus the bookkeeping every front end shares: counters and a lock.

    Hold ``lock`` to change ``queue.mode``/``threshold`` from another thread (the
    controller loop, the P4Runtime service); it is taken once per batch.
    """

    def __init__(self, queue: OlafQueue, acl: SourceAcl | None = None) -> None:
        self.queue = queue
        self.acl = acl or SourceAcl()
        self.lock = threading.Lock()
        self.received = 0
        self.sent = 0
        self.batches = 0

    def handle_batch(
        self, batch: Batch, sources: np.ndarray | None = None
    ) -> tuple[Batch, np.ndarray, np.ndarray]:
        """Responses, the input index each answers, and every input's verdict.

        ``sources`` (each message's IPv4 source as uint32) lets the ``SourceAcl`` refuse
        messages before the queue sees them: they get no answer, and their verdict is OK
        (the queue never judged them); without it nothing is refused.
        """
        with self.lock:
            if sources is not None and self.acl.enabled:
                refused = self.acl.refuse(batch.headers, sources)
                if refused.any():
                    kept = np.flatnonzero(~refused)
                    lengths = None if batch.lengths is None else batch.lengths[kept]
                    responses, source, verdicts = self.queue.process(
                        Batch(batch.headers[kept], batch.values[kept], lengths)
                    )
                    all_verdicts = np.zeros(len(batch), verdicts.dtype)
                    all_verdicts[kept] = verdicts
                    source, verdicts = kept[source], all_verdicts
                else:
                    responses, source, verdicts = self.queue.process(batch)
            else:
                responses, source, verdicts = self.queue.process(batch)
        self.received += len(batch)
        self.batches += 1
        return responses, source, verdicts

    def handle(
        self, payloads: list[bytes], sources: np.ndarray | None = None
    ) -> tuple[list[bytes], np.ndarray, np.ndarray]:
        """``handle_batch`` for datagrams as ``bytes``, with the responses encoded."""
        responses, source, verdicts = self.handle_batch(decode(payloads, self.queue.config.values), sources)
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
            "refused": self.acl.snapshot(),
        }


class FrontEnd(ABC):
    """What every front end has around its ``Pipeline``: the queue and lock it guards, and
    the serving loop. A front end sets ``pipeline`` and ``impairment`` and says how it
    handles one batch (``poll``)."""

    pipeline: Pipeline
    impairment: Impairment

    @property
    def queue(self) -> OlafQueue:
        return self.pipeline.queue

    @property
    def lock(self) -> threading.Lock:
        return self.pipeline.lock

    @abstractmethod
    def poll(self, timeout: float) -> int:
        """Wait up to ``timeout`` s for traffic, process one batch; returns messages handled."""

    def _wait_limit(self, timeout: float) -> float:
        """``timeout``, shortened so that a packet the impairment holds leaves when due."""
        due = self.impairment.next_due()
        return timeout if due is None else max(0.0, min(timeout, due - time.monotonic()))

    def serve(self, stop: threading.Event, stats: StatsLine | None = None) -> None:
        while not stop.is_set():
            self.poll(0.05)
            if stats is not None:
                stats.tick(time.monotonic())


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
            [f"{o.name.lower()}={q.counters.outcomes[o]}" for o in Outcome if q.counters.outcomes[o]]
            + [f"refused_{name.lower()}={n}" for name, n in p.acl.snapshot().items() if n]
        )
        self.emit(
            f"pps={pps:.0f} occupied={q.occupied}/{q.config.capacity} "
            f"active_clusters={q.active_clusters} {outcomes}".rstrip()
        )


class UdpSwitch(FrontEnd):
    """OLAF over plain UDP: ``--listen HOST:PORT``.

    One ``recvmmsg`` fills a batch, the queue answers it, one ``sendmmsg`` sends the
    answers back to each datagram's sender (``dataplane.mmsg``).
    """

    def __init__(
        self,
        queue: OlafQueue,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        impairment: Impairment | None = None,
        pcap_dir: Path | None = None,
        batch_size: int = 512,
        batch_syscalls: bool = True,
        acl: SourceAcl | None = None,
    ) -> None:
        self.pipeline = Pipeline(queue, acl)
        self.impairment = impairment or Impairment()
        # Kept so that every front end serves the same P4Runtime tables; UDP traffic never uses it.
        self.table = ForwardingTable()
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
        try:
            self.sock.bind((host, port))
        except OSError:
            self.sock.close()
            raise
        self.sock.setblocking(False)
        self.address: tuple[str, int] = self.sock.getsockname()
        self._busy = False
        self.io = (
            open_batch_socket(self.sock, batch_size) if batch_syscalls else PlainSocket(self.sock, batch_size)
        )
        self._pcap_in = self._pcap_out = None
        if pcap_dir is not None:
            pcap_dir.mkdir(parents=True, exist_ok=True)
            self._pcap_in = PcapWriter(pcap_dir / "udp_in.pcap", LINKTYPE_RAW)
            self._pcap_out = PcapWriter(pcap_dir / "udp_out.pcap", LINKTYPE_RAW)

    def _capture(self, writer: PcapWriter | None, rows, lengths, peers, inbound: bool) -> None:
        if writer is None or not len(rows):
            return
        packets = []
        for row, length, peer in zip(rows, lengths.tolist(), peers, strict=True):
            ends = (from_sockaddr(peer), self.address)
            src, dst = ends if inbound else ends[::-1]
            packets.append(ipv4_udp(src, dst, row[:length].tobytes()))
        writer.write(packets)

    def _send(self, rows: np.ndarray, lengths: np.ndarray, peers: np.ndarray) -> None:
        self.pipeline.sent += self.io.send(rows, lengths, peers)
        self._capture(self._pcap_out, rows, lengths, peers, inbound=False)

    def _send_held(self, items: list[tuple[bytes, np.void]]) -> None:
        if items:
            width = max(len(data) for data, _ in items)
            rows = np.zeros((len(items), width), np.uint8)
            for row, (data, _) in zip(rows, items, strict=True):
                row[: len(data)] = np.frombuffer(data, np.uint8)
            lengths = np.array([len(data) for data, _ in items], np.int64)
            self._send(rows, lengths, np.array([peer for _, peer in items], SOCKADDR_IN))

    def poll(self, timeout: float) -> int:
        # After a full batch more is likely waiting: skip the select() and read at once.
        if not self._busy:
            readable, _, _ = select.select([self.sock], [], [], self._wait_limit(timeout))
            if not readable:
                self._send_held(self.impairment.due(time.monotonic()))
                return 0
        self._send_held(self.impairment.due(time.monotonic()))
        rows, lengths, peers = self.io.recv()
        self._busy = len(rows) == self.io.batch
        if not len(rows):
            return 0
        self._capture(self._pcap_in, rows, lengths, peers, inbound=True)
        batch = decode_rows(rows, lengths, self.queue.config.values)
        if self.impairment.type_drop:  # loss on the way in (e.g. worker -> switch UPDATEs)
            arrived = self.impairment.keep_types(batch.headers["msg_type"])
            if not arrived.all():
                lengths_in = None if batch.lengths is None else batch.lengths[arrived]
                batch = Batch(batch.headers[arrived], batch.values[arrived], lengths_in)
                peers = peers[arrived]
                if not len(batch):
                    return len(rows)
        responses, source, _ = self.pipeline.handle_batch(batch, peers["addr"])
        out_rows, out_lengths, out_peers = (
            encode_array(responses),
            packet_lengths(responses.headers),
            peers[source],
        )
        keep = self.impairment.keep(np.zeros(len(source), np.int64))
        if self.impairment.type_drop:  # loss on the way out (e.g. switch -> PS DATA)
            keep &= self.impairment.keep_types(responses.headers["msg_type"])
        if not keep.all():
            out_rows, out_lengths, out_peers = out_rows[keep], out_lengths[keep], out_peers[keep]
        if self.impairment.delay_ms:
            items = [
                (row[:n].tobytes(), peer)
                for row, n, peer in zip(out_rows, out_lengths.tolist(), out_peers, strict=True)
            ]
            self._send_held(self.impairment.schedule(np.zeros(len(items), np.int64), items, time.monotonic()))
        else:
            self._send(out_rows, out_lengths, out_peers)
        return len(rows)

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
