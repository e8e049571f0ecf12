"""``olaf switch -i PORT@IFACE``: two hosts in ``olaf-`` namespaces talk through the switch."""

from __future__ import annotations

import os
import time

import pytest
from scapy.layers.l2 import Ether
from scapy.utils import rdpcap

from bmv2_topologies.netns import Hosts, can_create_namespaces
from tests.switch_process import REPO, running_switch
from tests.vectors.generate import update
from worker_transport.protocol import MsgType, Olaf, Outcome

reason = can_create_namespaces()
pytestmark = pytest.mark.skipif(reason is not None, reason=reason or "")

MAC_A, MAC_B = "02:00:00:0a:00:01", "02:00:00:0a:00:02"
IP_A, IP_B = "10.213.0.1", "10.213.0.2"

ASK = f"""
import socket, sys
sys.path.insert(0, {REPO!r})
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("0.0.0.0", int(sys.argv[2])))
s.settimeout(5)
s.sendto(bytes.fromhex(sys.argv[3]), (sys.argv[1], 20300))
data, peer = s.recvfrom(65535)
print(peer[0], peer[1], data.hex())
"""

LISTEN = """
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("0.0.0.0", int(sys.argv[1])))
s.settimeout(8)
print("ready", flush=True)
data, peer = s.recvfrom(65535)
print(peer[0], data.hex(), flush=True)
"""

# Hosts' UDP checksums are left to (veth) offload; the switch forwards frames as captured,
# so the sender here opts out of the UDP checksum (SO_NO_CHECK) as ethtool -K tx off would.
SEND = """
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, 11, 1)
s.bind(("0.0.0.0", int(sys.argv[3])))
s.sendto(bytes.fromhex(sys.argv[4]), (sys.argv[1], int(sys.argv[2])))
"""


@pytest.fixture(scope="module")
def topology(tmp_path_factory):
    hosts = Hosts()
    pcap = tmp_path_factory.mktemp("pcap")
    try:
        port_a = hosts.add("a", f"{IP_A}/24", MAC_A)
        port_b = hosts.add("b", f"{IP_B}/24", MAC_B)
        with running_switch(
            "-i",
            f"1@{port_a}",
            "-i",
            f"2@{port_b}",
            "--capacity",
            "4",
            "--route",
            f"{IP_A}/32=1,{MAC_A}",
            "--route",
            f"{IP_B}/32=2,{MAC_B}",
            "--pcap",
            str(pcap),
        ) as sw:
            yield hosts, sw, pcap, port_a
        assert sw.proc.returncode == 0, sw.stderr
        assert sw.final["forwarded"] >= 2 and sw.final["outcomes"]["ENQUEUED"] >= 3
    finally:
        hosts.close()
    assert hosts.leftovers() == []


def ask(hosts: Hosts, host: str, dst: str, sport: int, raw: bytes) -> tuple[str, int, Olaf]:
    r = hosts.python(host, ASK, dst, str(sport), raw.hex())
    assert r.returncode == 0, r.stderr
    peer_ip, peer_port, data = r.stdout.split()
    return peer_ip, int(peer_port), Olaf(bytes.fromhex(data))


def test_update_is_answered_with_an_ack_from_the_ps_address(topology) -> None:
    hosts, _, _, _ = topology
    # No static ARP: the first datagram also checks that ARP is flooded between the ports.
    peer, port, ack = ask(hosts, "a", IP_B, 40001, update(4, block=2, seq=11))
    assert (peer, port) == (IP_B, 20300)
    assert ack.msg_type == MsgType.ACK and ack.outcome == Outcome.ENQUEUED
    assert (ack.worker_id, ack.block_id, ack.seq) == (4, 2, 11)


def test_pull_from_the_ps_host_returns_data(topology) -> None:
    hosts, _, _, _ = topology
    ask(hosts, "a", IP_B, 40002, update(5, block=9))
    peer, _, data = ask(hosts, "b", IP_A, 40003, bytes(Olaf(msg_type=MsgType.PULL)))
    assert peer == IP_A
    while data.msg_type == MsgType.DATA and data.block_id != 9:
        _, _, data = ask(hosts, "b", IP_A, 40003, bytes(Olaf(msg_type=MsgType.PULL)))
    assert data.msg_type == MsgType.DATA and data.values == [5000 + i for i in range(64)]


def forwarded(
    hosts: Hosts, sender: str, receiver: str, dst: str, dport: int, payload: bytes
) -> tuple[str, bytes]:
    listener = hosts.popen(receiver, LISTEN, str(dport))
    try:
        assert listener.stdout.readline().strip() == "ready"
        r = hosts.python(sender, SEND, dst, str(dport), "41000", payload.hex())
        assert r.returncode == 0, r.stderr
        out, err = listener.communicate(timeout=15)
    finally:
        if listener.poll() is None:
            listener.kill()
            listener.wait()
    assert listener.returncode == 0, err
    peer, data = out.split()
    return peer, bytes.fromhex(data)


def test_other_traffic_is_forwarded_by_the_table(topology) -> None:
    hosts, _, _, _ = topology
    assert forwarded(hosts, "a", "b", IP_B, 5000, b"hello") == (IP_A, b"hello")


def test_model_messages_are_forwarded_not_queued(topology) -> None:
    hosts, _, _, _ = topology
    model = bytes(Olaf(msg_type=MsgType.MODEL, block_id=3, values=[7] * 64))
    assert forwarded(hosts, "b", "a", IP_A, 20300, model) == (IP_B, model)


def test_pcap_captures_frames_per_interface(topology) -> None:
    hosts, sw, pcap, port_a = topology
    ask(hosts, "a", IP_B, 40004, update(6, block=1))
    time.sleep(0.2)
    frames = rdpcap(str(pcap / f"{port_a}_out.pcap"))
    acks = [f for f in frames if f.haslayer(Olaf) and f[Olaf].msg_type == MsgType.ACK]
    assert acks and acks[-1][Ether].dst == MAC_A
    assert os.path.getsize(pcap / f"{port_a}_in.pcap") > 24
