"""The PS link's kernel bottleneck (bmv2_topologies.shaping): units, and HTB + FIFO on a real veth.

The veth test builds two namespaces of its own (``olaf-tc...``) joined by a veth pair that
never exists in the root namespace, shapes one end with the same ``tc`` commands the
testbed uses, sends a paced UDP burst at twice the rate through it and checks the
receiver's throughput against the rate, the FIFO's drops against what was offered
(``tc -s qdisc show``), and the queueing delay against ``B / C``. Needs root and tc.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator

import pytest

from bmv2_topologies import shaping
from bmv2_topologies.netns import can_create_namespaces
from bmv2_topologies.topology import load

NO_NETNS = can_create_namespaces() or (None if shutil.which("tc") else "tc is not installed")

# -- units --------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "bytes_per_s"), [
    ("10mbit", 1_250_000), ("4mbit", 500_000), ("800kbit", 100_000), ("1gbit", 125_000_000),
    ("500kbps", 500_000), ("1.25mbps", 1_250_000), ("2000bps", 2000), ("10MBit", 1_250_000)])
def test_rates_are_tc_units_in_bytes_per_second(text: str, bytes_per_s: float) -> None:
    assert shaping.parse_rate(text) == pytest.approx(bytes_per_s)


@pytest.mark.parametrize(("text", "limit"), [
    ("64kb", shaping.Limit(65536, False)), ("65536", shaping.Limit(65536, False)),
    ("1500b", shaping.Limit(1500, False)), ("1mb", shaping.Limit(1 << 20, False)),
    ("100p", shaping.Limit(100, True)), ("20packets", shaping.Limit(20, True))])
def test_limits_are_bytes_or_packets(text: str, limit: shaping.Limit) -> None:
    assert shaping.parse_limit(text) == limit


@pytest.mark.parametrize("text", ["10", "10mb", "fast", "0.1bit", "-3mbit"])
def test_bad_rates_are_refused(text: str) -> None:
    with pytest.raises(shaping.ShapingError, match="rate"):
        shaping.parse_rate(text)


@pytest.mark.parametrize("text", ["1.5p", "0", "0p", "lots", "10kbit"])
def test_bad_limits_are_refused(text: str) -> None:
    with pytest.raises(shaping.ShapingError, match="limit"):
        shaping.parse_limit(text)


def test_derived_numbers_follow_design_section_7() -> None:
    d = shaping.LinkShape.parse("10mbit", "64kb").derived(64)
    assert d["rate_bytes_per_s"] == 1_250_000
    assert d["data_message_bytes"] == 36 + 4 * 64
    assert d["design_blocks_per_s"] == pytest.approx(1_250_000 / 292)
    assert d["design_slots"] == 65536 // 292
    assert d["wire_data_frames_per_s"] == pytest.approx(1_250_000 / 334)
    assert d["max_queueing_delay_ms"] == pytest.approx(65536 / 1_250_000 * 1e3)
    p = shaping.LinkShape.parse("10mbit", "100p").derived(64)
    assert p["design_slots"] == 100 and p["buffer_bytes"] == 100 * 292


def test_tc_commands_put_htb_then_the_fifo_on_the_root() -> None:
    cmds = shaping.LinkShape.parse("4mbit", "20000").tc_commands("eth9")
    assert cmds[0][:6] == ["qdisc", "add", "dev", "eth9", "root", "handle"]
    assert "4000000bit" in cmds[1]
    assert cmds[2][-3:] == ["bfifo", "limit", "20000"]


@pytest.mark.parametrize(("name", "switch", "port"), [("star2", "s1", 3), ("two_level", "s3", 1)])
def test_the_shaped_end_is_the_switch_port_facing_the_ps(name: str, switch: str, port: int) -> None:
    """The testbed shapes the switch-side end of the PS's link (where DATA leaves the switch)."""
    from bmv2_topologies.testbed import Testbed

    topo = load(name)
    assert topo.switch_of(topo.ps.name, 0) == (switch, port)
    tb = Testbed(topo, "/nonexistent", tag="abc", ps_link=shaping.LinkShape.parse("10mbit"))
    assert tb.ps_link_interface() == f"olafabc{switch}p{port}"


@pytest.mark.parametrize(("argv", "message"), [
    (["--ps-link-limit", "64kb"], "--ps-link-limit needs --ps-link-rate"),
    (["--ps-link-rate", "10mb"], "rate '10mb'"),
    (["--ps-link-rate", "10mbit", "--ps-link-limit", "lots"], "limit 'lots'"),
    (["--bmv2", "debug"], "--bmv2 picks the bmv2 build and needs --switch bmv2"),
])
def test_olaf_testbed_refuses_bad_bottleneck_and_build_options(
        argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    """One line on stderr and exit code 2, before anything is built."""
    from olaf.cli import main

    assert main(["testbed", "run", "star2", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err


# -- on a veth ----------------------------------------------------------------------------

RECEIVER = r"""
import json, select, socket, struct, sys, time
sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
sock.bind(("0.0.0.0", 9999))
print("ready", flush=True)
arrivals = []
deadline = time.monotonic() + float(sys.argv[1])
while time.monotonic() < deadline:
    if not select.select([sock], [], [], 0.5)[0]:
        if arrivals:
            break  # the burst is over (the queue drains in well under 0.5 s)
        continue
    data = sock.recv(4096)
    now = time.monotonic()
    arrivals.append((now, len(data), now - struct.unpack("!d", data[:8])[0]))
print(json.dumps(arrivals), flush=True)
"""

SENDER = r"""
import socket, struct, sys, time
address, payload, pps, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
sent, start = 0, time.monotonic()
while (now := time.monotonic()) - start < seconds:
    # Paced: catch up to pps * elapsed, then sleep 2 ms; a late wake-up only makes a burst.
    while sent < pps * (now - start):
        sock.sendto(struct.pack("!d", time.monotonic()) + bytes(payload - 8), (address, 9999))
        sent += 1
    time.sleep(0.002)
print(sent, flush=True)
"""


def _run(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True)


@pytest.fixture
def veth_pair() -> Iterator[tuple[str, str]]:
    """Namespaces ``olaf-tcA<pid>`` (10.77.0.1, eth0) and ``olaf-tcB<pid>`` (10.77.0.2), one veth."""
    a, b = f"olaf-tcA{os.getpid()}", f"olaf-tcB{os.getpid()}"
    try:
        _run("ip", "netns", "add", a)
        _run("ip", "netns", "add", b)
        _run("ip", "-n", a, "link", "add", "eth0", "type", "veth", "peer", "name", "eth0", "netns", b)
        for ns, addr, mac, peer, peer_mac in ((a, "10.77.0.1", "02:77:00:00:00:01", "10.77.0.2",
                                               "02:77:00:00:00:02"),
                                              (b, "10.77.0.2", "02:77:00:00:00:02", "10.77.0.1",
                                               "02:77:00:00:00:01")):
            # No IPv6 and a static neighbour: nothing but the burst crosses the shaped egress.
            _run("ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1",
                 "net.ipv6.conf.default.disable_ipv6=1")
            _run("ip", "-n", ns, "link", "set", "eth0", "address", mac)
            _run("ip", "-n", ns, "addr", "add", f"{addr}/24", "dev", "eth0")
            _run("ip", "-n", ns, "link", "set", "eth0", "up")
            _run("ip", "-n", ns, "neigh", "replace", peer, "lladdr", peer_mac, "dev", "eth0")
        yield a, b
    finally:
        for ns in (a, b):  # deleting a namespace deletes its end of the veth, and so the pair
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        assert a not in left and b not in left


RATE, FRAME, HEADERS = "4mbit", 1000, 14 + 20 + 8
"""500,000 B/s of 1000-byte frames: 500 frames/s; the sender offers 1000/s."""


@pytest.mark.skipif(NO_NETNS is not None, reason=str(NO_NETNS))
@pytest.mark.parametrize("limit", ["20000", "20p"])
def test_htb_paces_a_burst_to_the_rate_and_the_fifo_drops_the_excess(
        veth_pair: tuple[str, str], limit: str) -> None:
    a, b = veth_pair
    shape = shaping.LinkShape.parse(RATE, limit)
    shaping.apply("eth0", shape, netns=a)
    assert {"htb", "bfifo" if limit.isdigit() else "pfifo"} <= set(shaping.qdisc_stats("eth0", a))
    rate = shape.rate
    seconds, offered_pps = 1.5, 2 * rate / FRAME
    receiver = subprocess.Popen(["ip", "netns", "exec", b, sys.executable, "-c", RECEIVER, "10"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert receiver.stdout is not None and receiver.stdout.readline().strip() == "ready"
        sender = subprocess.run(["ip", "netns", "exec", a, sys.executable, "-c", SENDER, "10.77.0.2",
                                 str(FRAME - HEADERS), str(offered_pps), str(seconds)],
                                capture_output=True, text=True, timeout=20, check=True)
        out, err = receiver.communicate(timeout=20)
    finally:
        if receiver.poll() is None:
            receiver.kill()
            receiver.wait()
    offered = int(sender.stdout)
    arrivals = json.loads(out)
    leaf = shaping.leaf_stats("eth0", a)

    # Everything offered either left through the FIFO or was dropped by it, and what left arrived.
    assert leaf.sent_packets + leaf.dropped == offered, (leaf, offered)
    assert len(arrivals) == leaf.sent_packets
    assert leaf.dropped > 0.3 * offered  # twice the rate offered: about half must go
    assert leaf.backlog_packets == 0

    # Throughput over the burst, in frame bytes (what HTB counts), near the rate.
    t0, t1 = arrivals[0][0], arrivals[-1][0]
    wire = sum(size + HEADERS for _, size, _ in arrivals[1:])
    measured = wire / (t1 - t0)
    assert 0.85 * rate < measured < 1.1 * rate, f"{measured:.0f} B/s through a {rate:.0f} B/s HTB"

    # The FIFO held a full queue (B / C = 40 ms for both limits) and no more.
    bound_ms = (20000 if limit.isdigit() else 20 * FRAME) / rate * 1e3
    delays = sorted(d * 1e3 for _, _, d in arrivals[len(arrivals) // 3:])
    median = delays[len(delays) // 2]
    assert 0.6 * bound_ms < median < bound_ms + 30, \
        f"median queueing delay {median:.1f} ms, B/C {bound_ms:.0f}"
