"""Transports (frames, checksums, loopback UDP, raw Ethernet on lo) and the Sender and
Receiver against an in-process reference OlafQueue."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections import deque

import numpy as np
import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from dataplane.queue import OlafQueue, QueueConfig
from worker_transport.codec import decode, encode
from worker_transport.inet import mac_bytes
from worker_transport.policy import AlwaysSend, OlafPolicy
from worker_transport.protocol import OLAF_PORT, MsgType, Olaf, Outcome
from worker_transport.receiver import DataBatch, ReceivedBlock, Receiver, pull_packet
from worker_transport.sender import Sender, as_float32_vector
from worker_transport.transport import (
    EthernetTransport,
    FrameBuilder,
    Packets,
    Transport,
    UdpTransport,
    parse_hostport,
    udp_payload,
)

SRC_MAC, DST_MAC = "02:00:00:00:00:01", "02:00:00:00:00:02"


# -- frames ---------------------------------------------------------------------------
def test_frames_agree_with_scapy() -> None:
    rng = np.random.default_rng(1)
    builder = FrameBuilder(src_mac=mac_bytes(SRC_MAC), dst_mac=mac_bytes(DST_MAC),
                           src_ip="10.0.0.1", dst_ip="10.0.1.254", src_port=40000)
    builder.next_id = 0xFFFE  # the identification wraps inside the batch
    for length in (36, 36 + 4 * 64, 36 + 4 * 255):
        payloads = rng.integers(0, 256, (5, length), dtype=np.uint8)
        frames = builder.build(payloads)
        for i, frame in enumerate(frames):
            pkt = Ether(frame.tobytes())
            assert (pkt.src, pkt.dst) == (SRC_MAC, DST_MAC)
            ip = pkt[IP]
            assert (ip.src, ip.dst, ip.ttl, ip.flags, ip.len) == (
                "10.0.0.1", "10.0.1.254", 64, "DF", 28 + length)
            udp = pkt[UDP]
            assert (udp.sport, udp.dport, udp.len, udp.chksum) == (40000, OLAF_PORT, 8 + length, 0)
            assert bytes(udp.payload) == payloads[i].tobytes()
        ids = [Ether(f.tobytes())[IP].id for f in frames]
        assert ids == [(builder.next_id - 5 + k) & 0xFFFF for k in range(5)]


def test_frame_checksum_matches_scapy_recomputation() -> None:
    builder = FrameBuilder(src_mac=mac_bytes(SRC_MAC), dst_mac=mac_bytes(DST_MAC),
                           src_ip="192.168.7.9", dst_ip="172.16.0.254")
    frames = builder.build(np.zeros((40, 36), np.uint8))
    for frame in frames:
        ip = Ether(frame.tobytes())[IP]
        ours = ip.chksum
        ip.chksum = None
        assert IP(bytes(ip)).chksum == ours


def test_udp_payload_filters_and_trims_padding() -> None:
    base = Ether(src=SRC_MAC, dst=DST_MAC) / IP(src="10.0.0.2", dst="10.0.0.1")
    olaf = bytes(Olaf(msg_type=MsgType.EMPTY))
    frame = bytes(base / UDP(sport=OLAF_PORT, dport=OLAF_PORT) / olaf)
    me = socket.inet_aton("10.0.0.1")
    assert udp_payload(frame, dst_ip=me, dst_port=OLAF_PORT) == olaf
    # Ethernet padding after a short datagram is not payload.
    short = bytes(base / UDP(dport=OLAF_PORT) / b"abc")
    assert len(short) < 60
    assert udp_payload(short + b"\0" * (60 - len(short)), dst_ip=me, dst_port=OLAF_PORT) == b"abc"
    assert udp_payload(frame, dst_ip=socket.inet_aton("10.0.0.3"), dst_port=OLAF_PORT) is None
    assert udp_payload(frame, dst_ip=me, dst_port=1234) is None
    assert udp_payload(frame, dst_ip=None, dst_port=None) == olaf
    frag = bytearray(frame)
    frag[14 + 6] |= 0x20  # more fragments
    assert udp_payload(bytes(frag), dst_ip=me, dst_port=OLAF_PORT) is None
    tcp = bytearray(frame)
    tcp[14 + 9] = 6
    assert udp_payload(bytes(tcp), dst_ip=me, dst_port=OLAF_PORT) is None
    assert udp_payload(frame[:30], dst_ip=me, dst_port=OLAF_PORT) is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [("127.0.0.1:5000", ("127.0.0.1", 5000)), ("10.0.0.1", ("10.0.0.1", OLAF_PORT)),
     ("[::1]:7", ("::1", 7)), ("h1:0", ("h1", 0))],
)
def test_parse_hostport(text: str, expected: tuple[str, int]) -> None:
    assert parse_hostport(text) == expected


@pytest.mark.parametrize("text", [":80", "h:99999", "h:x"])
def test_parse_hostport_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        parse_hostport(text)


# -- UDP on loopback ------------------------------------------------------------------
def test_udp_transport_batches_on_loopback() -> None:
    server = UdpTransport(("127.0.0.1", 9), bind=("127.0.0.1", 0), connect=False)
    client = UdpTransport(server.local_address, gso=False)
    try:
        rows = np.arange(50 * 40, dtype=np.uint32).astype(np.uint8).reshape(50, 40)
        assert client.send(rows) == 50
        with UdpTransport(server.local_address) as auto:
            assert auto.gso and not client.gso  # default: GSO on for a loopback peer
        assert client.send([b"one", bytearray(b"two"), memoryview(b"three")]) == 3
        got: list[bytes] = []
        deadline = time.monotonic() + 2
        while len(got) < 53 and time.monotonic() < deadline:
            got += server.recv(0.5, max_count=16)  # max_count bounds a single read
        assert got == [r.tobytes() for r in rows] + [b"one", b"two", b"three"]
        t = time.monotonic()
        assert server.recv(0.05) == []
        assert time.monotonic() - t >= 0.04
        assert server.recv(0) == []
    finally:
        client.close()
        server.close()
    assert client.recv(0.1) == []  # closed: returns at once, no exception


@pytest.mark.parametrize("length", [36 + 4 * 64, 36 + 4 * 255])
def test_udp_gso_delivers_the_same_datagrams(length: int) -> None:
    server = UdpTransport(("127.0.0.1", 9), bind=("127.0.0.1", 0), connect=False)
    client = UdpTransport(server.local_address, gso=True)
    try:
        rows = np.random.default_rng(2).integers(0, 256, (150, length), dtype=np.uint8)
        assert client.send(rows) == 150
        assert client.gso  # the kernel took it (else it fell back, which is fine but untested)
        got: list[bytes] = []
        deadline = time.monotonic() + 2
        while len(got) < 150 and time.monotonic() < deadline:
            got += server.recv(0.2)
        assert got == [r.tobytes() for r in rows]
        assert client.send(rows[:1]) == 1 and server.recv(1.0) == [rows[0].tobytes()]
    finally:
        client.close()
        server.close()


def test_connected_udp_transport_ignores_other_sources() -> None:
    peer = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    other = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    peer.bind(("127.0.0.1", 0))
    transport = UdpTransport(peer.getsockname())
    loose = UdpTransport(peer.getsockname(), connect=False)
    try:
        for t in (transport, loose):
            other.sendto(b"stranger", t.local_address)
            peer.sendto(b"switch", t.local_address)
        assert transport.recv(1.0) == [b"switch"]
        got = loose.recv(1.0)
        if len(got) < 2:
            got += loose.recv(1.0)
        assert got == [b"stranger", b"switch"]
    finally:
        for s in (peer, other):
            s.close()
        transport.close()
        loose.close()


def test_a_refused_datagram_is_counted_as_a_loss_not_raised() -> None:
    """Nobody listens on the port: the kernel's ICMP answer makes a later send on the
    connected socket fail with ECONNREFUSED, which the transport counts and survives."""
    closed = _free_udp_port()
    with UdpTransport(("127.0.0.1", closed), gso=False) as transport:
        calls = sent = 0
        while transport.send_errors == 0 and calls < 200:
            sent += transport.send([b"hello"])
            calls += 1
            time.sleep(0.005)
        assert transport.send_errors == 1
        assert sent == calls - 1


def _raw_sockets_allowed() -> bool:
    try:
        socket.socket(socket.AF_PACKET, socket.SOCK_RAW).close()
        return True
    except (PermissionError, OSError, AttributeError):
        return False


def _free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.skipif(not _raw_sockets_allowed(), reason="needs CAP_NET_RAW for AF_PACKET")
def test_ethernet_transports_talk_over_lo_and_the_kernel_filters_the_rest() -> None:
    """Two raw-Ethernet ends on lo (frames to 127.0.0.1 stay on loopback: the IP layer
    discards them as martians, but AF_PACKET sockets see them first). The BPF filter
    passes only our port: a frame for another port never reaches Python."""
    port_a, port_b, port_c = _free_udp_port(), _free_udp_port(), _free_udp_port()
    zero = "00:00:00:00:00:00"

    def end(src: int, dst: int) -> EthernetTransport:
        return EthernetTransport("lo", src_ip="127.0.0.1", dst_ip="127.0.0.1", dst_mac=zero,
                                 src_port=src, dst_port=dst)

    a, b, to_c = end(port_a, port_b), end(port_b, port_a), end(port_a, port_c)
    try:
        rows = np.random.default_rng(4).integers(0, 256, (20, 36 + 4 * 64), dtype=np.uint8)
        assert a.send(rows) == 20
        assert to_c.send([b"not for b" * 4]) == 1
        assert b.send([b"reply" * 8]) == 1
        got: list[bytes] = []
        deadline = time.monotonic() + 2
        while len(got) < 20 and time.monotonic() < deadline:
            got += b.recv(0.2)
        assert got == [r.tobytes() for r in rows]  # in order, once each (not as outgoing)
        assert a.recv(1.0) == [b"reply" * 8]
        assert b.recv(0.1) == [] and b.ignored_frames == 0  # filtered in the kernel
    finally:
        for t in (a, b, to_c):
            t.close()


def test_bpf_program_layout() -> None:
    from worker_transport.transport import udp_filter_program

    program = udp_filter_program(socket.inet_aton("10.0.0.1"), OLAF_PORT)
    assert len(program) == 13 and program[-1] == (0x06, 0, 0, 0)
    # Every jump lands inside the program, and every failing branch on the final drop.
    for i, (code, jt, jf, _) in enumerate(program):
        if code & 0x07 == 0x05:  # BPF_JMP
            assert i + 1 + jt < len(program) and i + 1 + jf < len(program)
            if code == 0x15:
                assert i + 1 + jf == len(program) - 1
    assert (0x15, 0, 1, 0x0A000001) in program and (0x15, 0, 3, OLAF_PORT) in program


# -- Sender and Receiver against the reference queue ----------------------------------
class QueueTransport(Transport):
    """An in-process switch: every send goes through a shared OlafQueue at once, and
    its answers wait in this endpoint's inbox. ``drop`` loses every k-th datagram."""

    def __init__(self, queue: OlafQueue, lock: threading.Lock, *, drop_every: int = 0) -> None:
        self.queue, self.lock = queue, lock
        self.inbox: deque[bytes] = deque()
        self.ready = threading.Condition()
        self.drop_every, self.count = drop_every, 0
        self.closed = False

    def send(self, packets: Packets) -> int:
        rows = [bytes(r) for r in (packets if not isinstance(packets, np.ndarray)
                                   else [r.tobytes() for r in packets])]
        if self.drop_every:
            kept = []
            for r in rows:
                self.count += 1
                if self.count % self.drop_every:
                    kept.append(r)
            rows = kept
        with self.lock:
            responses, _, _ = self.queue.process(decode(rows, self.queue.config.values))
        with self.ready:
            self.inbox.extend(encode(responses))
            self.ready.notify_all()
        return len(rows)

    def recv(self, timeout: float | None, max_count: int = 4096) -> list[bytes]:
        with self.ready:
            if not self.inbox and not self.closed:
                self.ready.wait(timeout)
            out = []
            while self.inbox and len(out) < max_count:
                out.append(self.inbox.popleft())
            return out

    def close(self) -> None:
        self.closed = True


def make_switch(**config: int) -> tuple[OlafQueue, threading.Lock]:
    return OlafQueue(QueueConfig(**config)), threading.Lock()


def test_sender_blocks_acks_and_outcomes() -> None:
    queue, lock = make_switch(capacity=8, values=4, max_blocks=16)
    sender = Sender(QueueTransport(queue, lock), cluster_id=2, worker_id=37, values=4,
                    policy=AlwaysSend(), ack_thread=False, record_acks=True)
    grad = np.arange(10, dtype=np.float32) / 4  # 3 blocks, the last half padding
    assert sender.send_gradient(grad, reward=-1.5, model_version=9)
    assert sender.poll(0.1) == 3
    # Same worker again: each of its 3 slots is REPLACED.
    assert sender.send_gradient(grad * 2, reward=-1.0, model_version=10)
    sender.poll(0.1)
    # 4 blocks now: 3 replace, the 4th is new.
    assert sender.send_gradient(np.ones(13), reward=0.5, model_version=11)
    sender.poll(0.1)
    stats = sender.stats()
    assert stats["outcomes"]["ENQUEUED"] == 4 and stats["outcomes"]["REPLACED"] == 6
    assert stats["sent_blocks"] == stats["acked_blocks"] == 10
    assert stats["outstanding_blocks"] == stats["duplicate_acks"] == stats["unexpected_acks"] == 0
    # Feedback revision 3: the one cluster's 4 slots and the 4 free ones are all its room.
    assert stats["queue_util"] == 0 and stats["active_clusters"] == 1
    assert stats["rtt_ms"] is not None and stats["rtt_ms"] >= 0
    log = sender.ack_log
    assert [(a.seq, a.block_id) for a in log] == [(s, b) for s, n in ((0, 3), (1, 3), (2, 4))
                                                  for b in range(n)]
    # What the queue holds is exactly the last update, with the header the sender wrote.
    slot = queue.read_ptr
    assert queue.slots["worker_id"][slot] == 37 and queue.slots["cluster_id"][slot] == 2
    assert queue.slots["contributors"][slot] == 1 << (37 % 32)
    assert queue.slots["seq"][slot] == 2 and queue.slots["model_version"][slot] == 11
    assert queue.slots["reward"][slot] == 0.5 * 2**16
    assert queue.values[slot].tolist() == [1 << 16] * 4
    sender.close()


def test_sender_counts_duplicates_foreign_and_lost() -> None:
    queue, lock = make_switch(capacity=8, values=4)
    transport = QueueTransport(queue, lock)
    now = [10**12]
    # AlwaysSend: this is about accounting; P_s < 1 at util 63 would skip now and then.
    sender = Sender(transport, cluster_id=0, worker_id=1, values=4, ack_thread=False,
                    ack_timeout=0.5, clock=lambda: now[0], policy=AlwaysSend())
    sender.send_gradient(np.zeros(8), reward=0.0, model_version=0)  # 2 blocks
    acks = list(transport.inbox)
    transport.inbox.extend(acks[:1])  # a duplicate of block 0's ACK
    transport.inbox.append(bytes(Olaf(msg_type=MsgType.ACK, worker_id=2)))  # someone else's
    transport.inbox.append(bytes(Olaf(msg_type=MsgType.DATA, worker_id=1, values=[1, 2, 3, 4])))
    transport.inbox.append(b"\x12")  # a runt
    sender.poll(0.1)
    s = sender.stats()
    # The duplicate came in the same read as the original.
    assert (s["acked_blocks"], s["duplicate_acks"], s["foreign_packets"]) == (2, 1, 3)
    assert s["unexpected_acks"] == 0 and s["outstanding_blocks"] == 0
    # Once seq 0 is complete, another copy answers nothing the sender is waiting for.
    transport.inbox.extend(acks[1:2])
    sender.poll(0.1)
    assert sender.stats()["unexpected_acks"] == 1 and sender.stats()["acked_blocks"] == 2
    # An update whose ACKs never come is written off after ack_timeout.
    sender.transport = QueueTransport(queue, lock, drop_every=1)
    sender.send_gradient(np.zeros(8), reward=0.0, model_version=0)
    assert sender.outstanding_blocks == 2
    now[0] += 600_000
    sender.poll(0)
    s = sender.stats()
    assert s["lost_blocks"] == 2 and s["outstanding_blocks"] == 0


def test_sender_rejects_bad_input_without_state_change() -> None:
    queue, lock = make_switch(values=4)
    transport = QueueTransport(queue, lock)
    sender = Sender(transport, cluster_id=0, worker_id=0, values=4, ack_thread=False)
    with pytest.raises(ValueError, match="NaN"):
        sender.send_gradient(np.array([1.0, np.nan]), reward=0.0, model_version=0)
    with pytest.raises(ValueError, match="NaN"):
        sender.send_gradient(np.ones(3), reward=float("nan"), model_version=0)
    with pytest.raises(ValueError, match="1..65536"):
        sender.send_gradient(np.zeros(0, np.float32), reward=0.0, model_version=0)
    with pytest.raises(ValueError, match="65536"):
        sender.send_gradient(np.zeros(4 * 65536 + 1, np.float32), reward=0.0, model_version=0)
    s = sender.stats()
    assert s["updates"] == s["sent_blocks"] == 0 and queue.counters.msg_types[MsgType.UPDATE] == 0
    for bad in ({"cluster_id": 70000}, {"worker_id": -1}, {"values": 0}, {"frac_bits": 40}):
        kwargs = {"cluster_id": 0, "worker_id": 0} | bad
        with pytest.raises(ValueError):
            Sender(transport, ack_thread=False, **kwargs)


def test_torch_gradients_are_accepted() -> None:
    torch = pytest.importorskip("torch")
    t = torch.arange(6, dtype=torch.float64, requires_grad=True) * 0.5
    assert as_float32_vector(t).tolist() == [0, 0.5, 1, 1.5, 2, 2.5]
    assert as_float32_vector(torch.ones(2, 3)).shape == (6,)


def test_feedback_from_a_full_queue_throttles_the_olaf_policy_until_it_expires() -> None:
    # Feedback revision 2: the global occupancy, which one cluster's own blocks fill.
    queue, lock = make_switch(capacity=4, values=4, max_blocks=64, feedback=2)
    now = [10**12]
    sender = Sender(QueueTransport(queue, lock), cluster_id=0, worker_id=0, values=4,
                    policy=OlafPolicy(alpha=0.2, beta=0.05, feedback_ttl_ms=100), seed=3,
                    ack_thread=False, clock=lambda: now[0])
    assert sender.send_gradient(np.zeros(4 * 8), reward=0.0, model_version=0)  # 8 blocks
    sender.poll(0.1)
    s = sender.stats()
    assert s["outcomes"]["ENQUEUED"] == 4 and s["outcomes"]["DROPPED_FULL"] == 4
    assert s["queue_util"] == 255 and s["congested"]
    assert s["p_s"] == pytest.approx(0.2)
    now[0] += 90_000  # 90 ms: Q_free = 0, the bonus 0.2 e^-4.5 = 0.0022 is nearly gone
    assert sender.stats()["p_s"] == pytest.approx(0.2 * np.exp(-4.5))
    # Each update that goes out is answered "full" again, so P_s stays at or below 0.2:
    # Binomial(50, <= 0.2) is below 25 with a margin of 5 sd.
    assert sum(sender.send_gradient(np.zeros(4), reward=0.0, model_version=0)
               for _ in range(50)) < 25
    now[0] += 100_001  # the latest feedback has expired; the next update probes
    assert sender.stats()["p_s"] == 1.0
    assert sender.send_gradient(np.zeros(4), reward=0.0, model_version=1)
    assert sender.stats()["probe_updates"] == 1


def test_receiver_averages_merged_blocks_and_records_aom() -> None:
    queue, lock = make_switch(capacity=16, values=4, max_blocks=8)
    senders = [Sender(QueueTransport(queue, lock), cluster_id=0, worker_id=w, values=4,
                      policy=AlwaysSend(), ack_thread=False) for w in range(3)]
    for w, sender in enumerate(senders):  # 3 workers, 2 blocks each: merged per block
        sender.send_gradient(np.full(8, w + 1, np.float32), reward=float(w), model_version=5 - w)
    blocks: list[ReceivedBlock] = []
    batches: list[DataBatch] = []
    receiver = Receiver(QueueTransport(queue, lock), values=4, pull_rate=None, window=4,
                        on_block=blocks.append, on_batch=batches.append, sample_interval_us=1000,
                        workers=3)
    receiver.start()
    deadline = time.monotonic() + 5
    while receiver.stats()["empty_streak"] < 8 and time.monotonic() < deadline:
        time.sleep(0.01)
    receiver.stop()
    assert [b.block_id for b in blocks] == [0, 1]
    for b in blocks:
        assert b.agg_count == 3 and b.contributors == 0b111 and b.worker_id == 0
        assert b.values.dtype == np.float32 and b.values.tolist() == [2.0] * 4  # (1+2+3)/3
        assert b.reward == 2.0 and b.model_version == 3
    assert sum(len(b) for b in batches) == 2
    s = receiver.stats()
    assert s["data_blocks"] == 2 and s["aggregated_updates"] == 6 and s["bad_data"] == 0
    assert s["pulls_sent"] >= s["data_blocks"] + s["empty"] and s["queue_util"] == 0
    summary = receiver.aom.summary()
    assert summary["received"] == 2 and summary["samples"] > 0
    assert summary["update_age"]["count"] == 2 and summary["update_age"]["max"] >= 0
    assert receiver.aom.last_worker_us.min() > receiver.aom.start_us  # all 3 bits refreshed


def test_receiver_survives_losing_pulls_and_data() -> None:
    queue, lock = make_switch(capacity=64, values=4, max_blocks=64)
    sender = Sender(QueueTransport(queue, lock), cluster_id=0, worker_id=0, values=4,
                    policy=AlwaysSend(), ack_thread=False)
    sender.send_gradient(np.ones(4 * 60), reward=0.0, model_version=0)
    received: list[ReceivedBlock] = []
    # Every 3rd PULL vanishes on the way: the window must not shrink to nothing.
    receiver = Receiver(QueueTransport(queue, lock, drop_every=3), values=4, pull_rate=None,
                        window=8, pull_timeout=0.02, on_block=received.append)
    receiver.start()
    deadline = time.monotonic() + 10
    while len(received) < 60 and time.monotonic() < deadline:
        time.sleep(0.01)
    receiver.stop()
    assert sorted(b.block_id for b in received) == list(range(60))
    assert receiver.stats()["expired_pulls"] > 0


def test_paced_receiver_pulls_at_the_configured_rate() -> None:
    queue, lock = make_switch(values=4)
    receiver = Receiver(QueueTransport(queue, lock), values=4, pull_rate=500.0)
    t0 = time.monotonic()
    receiver.start()
    time.sleep(0.4)
    receiver.stop()
    elapsed = time.monotonic() - t0
    pulls = receiver.stats()["pulls_sent"]
    # Never ahead of the schedule (one PULL is due at the start); behind it only by
    # what a loaded machine's scheduling delays cost (it catches up in bursts).
    assert 0.5 * 500 * elapsed <= pulls <= 500 * elapsed + 1
    assert receiver.stats()["empty"] == pulls  # every PULL on an empty queue is EMPTY


def test_receiver_counts_bad_data_and_surfaces_callback_errors() -> None:
    queue, lock = make_switch(values=4)
    transport = QueueTransport(queue, lock)
    other_frac = bytes(Olaf(msg_type=MsgType.DATA, frac_bits=8, values=[1, 2, 3, 4]))
    good = bytes(Olaf(msg_type=MsgType.DATA, agg_count=2, values=[2 << 16, 0, 0, -(4 << 16)]))
    transport.inbox.extend([other_frac, good, bytes(Olaf(msg_type=MsgType.ACK))])

    def explode(block: ReceivedBlock) -> None:
        assert block.values.tolist() == [1.0, 0.0, 0.0, -2.0]
        raise RuntimeError("apply failed")

    receiver = Receiver(transport, values=4, pull_rate=None, on_block=explode)
    receiver.start()
    deadline = time.monotonic() + 5
    while receiver.running and time.monotonic() < deadline:
        time.sleep(0.01)
    with pytest.raises(RuntimeError, match="apply failed"):
        receiver.stop()
    s = receiver.stats()
    assert s["bad_data"] == 1 and s["data_blocks"] == 1 and s["foreign_packets"] == 1


def test_pull_packet_is_a_valid_36_byte_pull() -> None:
    row = pull_packet()
    assert row.shape == (1, 36)
    pkt = Olaf(row.tobytes())
    assert pkt.msg_type == MsgType.PULL and pkt.num_values == 0 and pkt.version == 1
    assert Outcome(pkt.outcome) == Outcome.ENQUEUED


def test_environment_has_no_leftover_threads() -> None:
    # Every Sender/Receiver above joined its thread; a leak would show here.
    assert not [t for t in threading.enumerate() if t.name.startswith("olaf-")], os.getpid()


def test_scatter_add_matches_add_at_with_and_without_repeated_blocks() -> None:
    from worker_transport.receiver import scatter_add

    rng = np.random.default_rng(9)
    for ids in (rng.permutation(50)[:20], rng.integers(0, 8, 40), np.array([], np.int64)):
        values = rng.standard_normal((len(ids), 6)).astype(np.float32)
        model = rng.standard_normal((50, 6)).astype(np.float32)
        expected = model.copy()
        np.add.at(expected, ids, -0.5 * values)
        scatter_add(model, ids, values, -0.5)
        np.testing.assert_allclose(model, expected, rtol=1e-6, atol=1e-6)


def test_a_failing_ack_thread_surfaces_in_send_gradient() -> None:
    class Broken(QueueTransport):
        def recv(self, timeout: float | None, max_count: int = 4096) -> list[bytes]:
            raise OSError("interface went away")

    queue, lock = make_switch(values=4)
    sender = Sender(Broken(queue, lock), cluster_id=0, worker_id=0, values=4)
    deadline = time.monotonic() + 5
    while sender.error is None and time.monotonic() < deadline:
        time.sleep(0.01)
    with pytest.raises(RuntimeError, match="ACK thread failed"):
        sender.send_gradient(np.ones(4), reward=0.0, model_version=0)
    assert "interface went away" in sender.stats()["ack_thread_error"]
    sender.close()


def test_shuffled_blocks_leave_in_a_fresh_order_and_are_all_acked() -> None:
    queue, lock = make_switch(capacity=64, values=4, max_blocks=64)
    transport = QueueTransport(queue, lock)
    sent: list[list[int]] = []
    forward = transport.send

    def record(packets: Packets) -> int:
        sent.append(decode([r.tobytes() for r in packets], 4).headers["block_id"].tolist())
        return forward(packets)

    transport.send = record  # type: ignore[method-assign]
    shuffled = Sender(transport, cluster_id=0, worker_id=2, values=4, policy=AlwaysSend(), seed=7,
                      ack_thread=False, shuffle_blocks=True)
    for version in range(3):
        shuffled.send_gradient(np.ones(4 * 20, np.float32), reward=1.0, model_version=version)
        shuffled.poll(0.1)
    assert all(sorted(order) == list(range(20)) for order in sent)
    assert sent[0] != list(range(20)) and sent[0] != sent[1]
    stats = shuffled.stats()
    assert stats["sent_blocks"] == stats["acked_blocks"] == 60 and stats["outstanding_blocks"] == 0
    # The permutations come from their own stream: the P_s stream (untouched by AlwaysSend)
    # is where an unshuffled sender's would be.
    assert shuffled.rng.random() == np.random.default_rng(7).random()
    shuffled.close()
