"""Multi-tenant abuse of the data plane (issue 18, docs/security.md): each attack replayed
against the software switch (UDP mode on loopback, one 127.0.0.x address per host) and
against simple_switch (pcap-file replay), first with the source checks off, showing what
DESIGN.md allows today, then with them on, showing it refused and counted.

Hosts: worker A (cluster 0), worker B (cluster 1), the PS, an attacker; with the checks
on, cluster 0 accepts UPDATEs only from A, cluster 1 only from B, PULLs only from the PS.
"""

from __future__ import annotations

import ipaddress
import socket
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from bmv2_topologies.simple_switch import missing_tools
from dataplane.acl import AclRule, Refusal, SourceAcl, parse_cluster_source, parse_prefix
from dataplane.queue import OlafQueue, QueueConfig
from dataplane.switch import Pipeline, UdpSwitch
from tests import p4_replay
from worker_transport.protocol import HEADER_LEN, MsgType, Outcome

V = 64
A, B, PS, ATTACKER = "A", "B", "PS", "ATTACKER"
LOOPBACK = {A: "127.0.0.2", B: "127.0.0.3", PS: "127.0.0.100", ATTACKER: "127.0.0.66"}
RACK = {A: "10.0.0.2", B: "10.0.0.3", PS: "10.0.0.100", ATTACKER: "10.0.0.66"}


def update(cluster: int = 0, worker: int = 1, block: int = 0, seq: int = 1, value: int = 7,
           values: int = V) -> bytes:
    return p4_replay.olaf_message(values, [value] * values, msg_type=MsgType.UPDATE, cluster_id=cluster,
                                  worker_id=worker, block_id=block, seq=seq, contributors=1 << worker)


def pull() -> bytes:
    return p4_replay.olaf_message(V, msg_type=MsgType.PULL, num_values=0)


def acl_for(hosts: dict[str, str]) -> SourceAcl:
    return SourceAcl([(0, parse_prefix(f"{hosts[A]}/32")), (1, parse_prefix(f"{hosts[B]}/32"))],
                     [parse_prefix(f"{hosts[PS]}/32")])


@dataclass
class Attack:
    name: str
    steps: list[tuple[str, bytes]]
    """(host, datagram) in the order they reach the switch."""


CAPACITY = 64
ATTACKS = [
    # Another cluster's DATA: the attacker PULLs first, the real PS gets EMPTY.
    Attack("pull_steals_data", [(A, update(value=7)), (ATTACKER, pull()), (PS, pull())]),
    # A spoofed worker id: the same id replaces A's gradient, another id merges into it.
    Attack("spoofed_worker_id", [(A, update(value=7)), (ATTACKER, update(worker=1, seq=99, value=-1000)),
                                 (ATTACKER, update(worker=2, seq=99, value=-1000)), (PS, pull())]),
    # A replayed older seq supersedes the newer one.
    Attack("replayed_seq", [(A, update(seq=1, value=1)), (A, update(seq=2, value=2)),
                            (ATTACKER, update(seq=1, value=1)), (PS, pull())]),
    # One tenant's id space (and an unused cluster's) fills the queue; cluster 0 is then full.
    Attack("queue_flood", [*((ATTACKER, update(cluster=1 + b % 2 * 4, block=b)) for b in range(CAPACITY)),
                           (A, update(value=7))]),
]


def answers_of(payload_lists: list[bytes | None]) -> list[dict]:
    """Decoded header fields of each step's answer (None: no answer)."""
    from worker_transport.codec import decode

    out = []
    for payload in payload_lists:
        if payload is None:
            out.append(None)
            continue
        h = decode([payload], V).headers[0]
        out.append({"type": MsgType(int(h["msg_type"])), "outcome": Outcome(int(h["outcome"])),
                    "seq": int(h["seq"]), "worker": int(h["worker_id"]),
                    "value": int(np.frombuffer(payload[HEADER_LEN:HEADER_LEN + 4], ">i4")[0])
                    if len(payload) > HEADER_LEN else None})
    return out


def check_attack(name: str, got: list[dict | None], acl_on: bool) -> None:
    """What each attack achieves without the checks, and that it achieves nothing with them."""
    if name == "pull_steals_data":
        if acl_on:
            assert got[1] is None and got[2]["type"] == MsgType.DATA and got[2]["value"] == 7
        else:
            assert got[1]["type"] == MsgType.DATA and got[1]["value"] == 7 and got[2]["type"] == MsgType.EMPTY
    elif name == "spoofed_worker_id":
        if acl_on:
            assert got[1] is None and got[2] is None and got[3]["value"] == 7
        else:
            assert got[1]["outcome"] == Outcome.REPLACED and got[2]["outcome"] == Outcome.MERGED
            assert got[3]["value"] == -2000 and got[3]["seq"] == 99
    elif name == "replayed_seq":
        assert got[1]["outcome"] == Outcome.REPLACED
        if acl_on:
            assert got[2] is None and got[3]["seq"] == 2
        else:
            assert got[2]["outcome"] == Outcome.REPLACED and got[3]["seq"] == 1
    elif name == "queue_flood":
        if acl_on:
            assert all(g is None for g in got[:-1]) and got[-1]["outcome"] == Outcome.ENQUEUED
        else:
            assert all(g["outcome"] == Outcome.ENQUEUED for g in got[:-1])
            assert got[-1]["outcome"] == Outcome.DROPPED_FULL


def refusals(attack: Attack) -> list[int]:
    """Refused messages by ``Refusal``: every attacker UPDATE or PULL."""
    counts = [0] * len(Refusal)
    for host, payload in attack.steps:
        if host == ATTACKER:
            counts[Refusal.PULL_SOURCE if payload[0] & 0x0F == MsgType.PULL else Refusal.UPDATE_SOURCE] += 1
    return counts


# -- the source checks themselves ---------------------------------------------------------


def test_prefix_parsing_refuses_what_is_not_a_prefix() -> None:
    assert parse_cluster_source("3=10.1.0.0/16") == (3, ipaddress.IPv4Network("10.1.0.0/16"))
    assert parse_prefix("10.0.0.7") == ipaddress.IPv4Network("10.0.0.7/32")
    for bad in ("10.0.0.1/24", "10.0.0.0/33", "fe80::/64", "x"):
        with pytest.raises(ValueError):
            parse_prefix(bad)
    for bad in ("10.0.0.0/8", "=10.0.0.0/8", "a=10.0.0.0/8", "-1=10.0.0.0/8", "70000=10.0.0.0/8"):
        with pytest.raises(ValueError):
            parse_cluster_source(bad)


def test_prefixes_match_by_length_and_unlisted_clusters_are_closed() -> None:
    acl = SourceAcl([(0, parse_prefix("10.1.0.0/16")), (0, parse_prefix("10.9.9.9/32")),
                     (2, parse_prefix("0.0.0.0/0"))])
    sources = np.array([int(ipaddress.IPv4Address(a)) for a in
                        ("10.1.255.1", "10.2.0.1", "10.9.9.9", "10.9.9.8", "1.2.3.4", "1.2.3.4", "1.2.3.4")],
                       np.uint32)
    payloads = [update(0), update(0), update(0), update(0), update(1), update(2), pull()]
    from worker_transport.codec import decode

    refused = acl.refuse(decode(payloads, V).headers, sources)
    # Cluster 1 has no prefix while others do: closed. A PULL passes: no PS prefix is set.
    assert refused.tolist() == [False, True, False, True, True, False, False]
    assert acl.snapshot() == {"UPDATE_SOURCE": 3, "PULL_SOURCE": 0}


def open_acl(hosts: dict[str, str]) -> SourceAcl:
    """The P4 recipe that closes only the listed clusters: {c, prefix} -> permit and
    {c, 0.0.0.0/0} -> deny, default permit; a denied /32 inside a permitted /8 for the PS."""
    acl = SourceAcl()
    acl.configure(
        [AclRule(parse_prefix(f"{hosts[A]}/32"), True, 0), AclRule(parse_prefix("0.0.0.0/0"), False, 0),
         AclRule(parse_prefix(f"{hosts[B]}/32"), True, 1), AclRule(parse_prefix("0.0.0.0/0"), False, 1)],
        [AclRule(parse_prefix(f"{hosts[PS].split('.')[0]}.0.0.0/8"), True),
         AclRule(parse_prefix(f"{hosts[ATTACKER]}/32"), False)],
        pull_default_permit=False,
    )
    return acl


def test_table_form_longest_prefix_decides_and_defaults_apply() -> None:
    acl = open_acl(RACK)
    hosts = [A, ATTACKER, ATTACKER, B, PS, ATTACKER]
    payloads = [update(0), update(0), update(7), pull(), pull(), pull()]
    from worker_transport.codec import decode

    sources = np.array([int(ipaddress.IPv4Address(RACK[h])) for h in hosts], np.uint32)
    refused = acl.refuse(decode(payloads, V).headers, sources)
    # Cluster 7 has no entry: default permit. B's PULL is inside 10/8; the attacker's /32 is denied.
    assert refused.tolist() == [False, True, False, False, False, True]
    assert acl.snapshot() == {"UPDATE_SOURCE": 1, "PULL_SOURCE": 1}
    with pytest.raises(ValueError):
        acl.configure([AclRule(parse_prefix("10.0.0.0/8"), True)], [])


def test_refusals_show_in_the_stats_line_and_the_final_snapshot() -> None:
    from dataplane.switch import StatsLine

    pipeline = Pipeline(OlafQueue(), acl_for(RACK))
    sources = np.array([int(ipaddress.IPv4Address(RACK[h])) for h in (ATTACKER, ATTACKER, PS)], np.uint32)
    responses, answered, _ = pipeline.handle([pull(), update(1), pull()], sources)
    assert answered.tolist() == [2] and len(responses) == 1
    lines: list[str] = []
    StatsLine(pipeline, 1e-9, lines.append).tick(float("inf"))
    assert lines[0].endswith("refused_update_source=1 refused_pull_source=1")
    assert pipeline.snapshot()["refused"] == {"UPDATE_SOURCE": 1, "PULL_SOURCE": 1}
    assert pipeline.snapshot()["received"] == 3


def test_without_prefixes_nothing_changes() -> None:
    """Off by default: the same answers and state with or without an (empty) SourceAcl."""
    steps = [step for attack in ATTACKS for step in attack.steps] + [(A, b"\x10" * 10), (ATTACKER, b"")]
    payloads = [p for _, p in steps]
    sources = np.array([int(ipaddress.IPv4Address(RACK[h])) for h, _ in steps], np.uint32)
    plain, checked = Pipeline(OlafQueue()), Pipeline(OlafQueue(), SourceAcl())
    assert plain.handle(payloads)[0] == checked.handle(payloads, sources)[0]
    assert plain.snapshot() == checked.snapshot()


# -- the software switch, UDP mode on loopback --------------------------------------------


def _loopback_hosts_usable() -> bool:
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.bind((LOOPBACK[ATTACKER], 0))
        return True
    except OSError:
        return False


class Hosts:
    """One UDP socket per host, bound to its loopback address; a marker socket on A's address."""

    def __init__(self, switch: tuple[str, int]) -> None:
        self.switch = switch
        self.socks = {}
        for host, ip in LOOPBACK.items():
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.bind((ip, 0))
            self.socks[host] = s
        self.marker = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.marker.bind((LOOPBACK[A], 0))
        self.marker.settimeout(10)

    def send(self, host: str, payload: bytes) -> bytes | None:
        """Send, then a marker the switch always answers (an UPDATE with the wrong frac_bits
        from A): once its ACK is back the switch has answered the step, or never will."""
        self.socks[host].sendto(payload, self.switch)
        marker = p4_replay.olaf_message(V, msg_type=MsgType.UPDATE, frac_bits=3, seq=0xE0D)
        self.marker.sendto(marker, self.switch)
        self.marker.recv(65535)
        try:
            return self.socks[host].recv(65535, socket.MSG_DONTWAIT)
        except BlockingIOError:
            return None

    def close(self) -> None:
        for s in [*self.socks.values(), self.marker]:
            s.close()


def udp_switch(acl: SourceAcl | None, values: int = V) -> tuple[UdpSwitch, Callable[[], None]]:
    switch = UdpSwitch(OlafQueue(QueueConfig(values=values, capacity=CAPACITY)), "127.0.0.1", 0, acl=acl)
    thread, stop = switch.start()

    def close() -> None:
        stop.set()
        thread.join(5)
        switch.close()

    return switch, close


needs_loopback = pytest.mark.skipif(not _loopback_hosts_usable(), reason="cannot bind 127.0.0.66")


@needs_loopback
@pytest.mark.parametrize("acl_on", [False, True], ids=["acl_off", "acl_on"])
@pytest.mark.parametrize("attack", ATTACKS, ids=[a.name for a in ATTACKS])
def test_attack_on_the_software_switch(attack: Attack, acl_on: bool) -> None:
    switch, close = udp_switch(acl_for(LOOPBACK) if acl_on else None)
    hosts = Hosts(switch.address)
    try:
        got = answers_of([hosts.send(host, payload) for host, payload in attack.steps])
    finally:
        hosts.close()
        close()
    check_attack(attack.name, got, acl_on)
    refused = switch.pipeline.snapshot()["refused"]
    assert refused == {r.name: (refusals(attack)[r] if acl_on else 0) for r in Refusal}


@needs_loopback
def test_olaf_switch_command_refuses_and_reports() -> None:
    """The command line: --cluster-source/--ps-source, and "refused" in the final JSON line."""
    from tests.switch_process import running_switch

    with running_switch("--listen", "127.0.0.1:0", "--cluster-source", f"0={LOOPBACK[A]}/32",
                        "--ps-source", f"{LOOPBACK[PS]}/32") as sw:
        hosts = Hosts(sw.address)
        try:
            got = answers_of([hosts.send(host, payload) for host, payload in ATTACKS[0].steps])
        finally:
            hosts.close()
    check_attack(ATTACKS[0].name, got, acl_on=True)
    assert sw.final["refused"] == {"UPDATE_SOURCE": 0, "PULL_SOURCE": 1}


@needs_loopback
@pytest.mark.parametrize(("values", "ratio"), [(64, 292 / 36), (255, 1056 / 36)])
def test_amplification_toward_a_spoofed_source(values: int, ratio: float) -> None:
    """PULLs sent with the victim's address as source: the switch answers the victim with
    DATA, 36 + 4V bytes for 36 (8.1x at V = 64, 29.3x at V = 255); a spoofed UPDATE gets a
    36-byte ACK for 36 + 4V bytes, no amplification. With a PS prefix: nothing answered."""
    victim = LOOPBACK[ATTACKER]  # the address the attacker writes as source
    for acl_on in (False, True):
        switch, close = udp_switch(acl_for(LOOPBACK) if acl_on else None, values)
        hosts = Hosts(switch.address)
        try:
            for block in range(8):
                hosts.send(A, update(block=block, values=values))
            sent = answered = 0
            for _ in range(8):
                answer = hosts.send(ATTACKER, pull())
                sent += HEADER_LEN
                answered += len(answer) if answer is not None else 0
            ack = hosts.send(ATTACKER, update(cluster=0, block=99, values=values))
        finally:
            hosts.close()
            close()
        update_len = HEADER_LEN + 4 * values
        print(f"V={values} acl={'on' if acl_on else 'off'} {victim}: PULL bytes answered per byte "
              f"received {answered / sent:.2f}, spoofed UPDATE {len(ack or b'')} per {update_len}")
        if acl_on:
            assert answered == 0 and ack is None
            assert switch.pipeline.snapshot()["refused"] == {"UPDATE_SOURCE": 1, "PULL_SOURCE": 8}
        else:
            assert answered / sent == pytest.approx(ratio)
            assert ack is not None and len(ack) == HEADER_LEN < HEADER_LEN + 4 * values


@pytest.mark.parametrize("acl_on", [False, True], ids=["acl_off", "acl_on"])
@pytest.mark.parametrize("attack", ATTACKS, ids=[a.name for a in ATTACKS])
def test_attack_on_the_switch_in_interface_mode(attack: Attack, acl_on: bool) -> None:
    """Interface mode judges the IPv4 source of each frame (the whole batch at once)."""
    from dataplane.ethernet import EthernetSwitch
    from dataplane.forwarding import ForwardingTable

    switch = EthernetSwitch(OlafQueue(QueueConfig(capacity=CAPACITY)), {}, ForwardingTable(),
                            acl=acl_for(RACK) if acl_on else None)
    frames = [host_frame(payload, host, i) for i, (host, payload) in enumerate(attack.steps)]
    out = switch.handle(frames, [0] * len(frames))
    by_step: list[bytes | None] = [None] * len(frames)
    for port, frame in out:
        assert port == 0
        step = struct.unpack("!H", frame[18:20])[0]
        assert frame[30:34] == ipaddress.IPv4Address(RACK[attack.steps[step][0]]).packed
        by_step[step] = p4_replay.udp_payload(frame)
    check_attack(attack.name, answers_of(by_step), acl_on)
    assert switch.pipeline.acl.refused == (refusals(attack) if acl_on else [0, 0])


# -- simple_switch (pcap-file replay, table entries by simple_switch_CLI) ------------------

def acl_commands(acl: SourceAcl) -> list[str]:
    """The simple_switch_CLI lines that give the P4 tables ``acl``'s rules and defaults."""
    lines = []
    for table, (rules, default_permit) in acl.tables().items():
        for r in rules:
            key = str(r.prefix) if r.cluster is None else f"{r.cluster} {r.prefix}"
            action = "permit" if r.permit else "deny"
            lines.append(f"table_add OlafIngress.{table} OlafIngress.{action} {key} =>")
        if not default_permit:
            lines.append(f"table_set_default OlafIngress.{table} OlafIngress.deny")
    return lines


def host_frame(payload: bytes, host: str, step: int, reply: bool = False) -> bytes:
    ends = (bytes(ipaddress.IPv4Address(RACK[host]).packed), p4_replay.PS_IP)
    macs = (p4_replay.HOST_MAC, p4_replay.SWITCH_MAC)
    ports = (p4_replay.HOST_PORT, p4_replay.OLAF_PORT)
    if reply:
        ends, macs, ports = ends[::-1], macs[::-1], ports[::-1]
    return p4_replay.frame(payload, eth_src=macs[0], eth_dst=macs[1], ip_src=ends[0], ip_dst=ends[1],
                           sport=ports[0], dport=ports[1], ident=step)


@pytest.fixture(scope="module")
def acl_build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A build folder with the default program compiled (``compiled/olaf.json``, where
    ``p4_replay.compiled_program`` looks): the source checks are always in it."""
    missing = missing_tools()
    if missing:
        pytest.skip(missing)
    build = tmp_path_factory.mktemp("acl_p4")
    p4_replay.compiled_program(build)
    return build


@pytest.fixture(scope="module")
def acl_program(acl_build: Path) -> Path:
    return p4_replay.compiled_program(acl_build)


@pytest.mark.parametrize("name", ["13_fifo_mode", "18_invalid_answered", "19_invalid_silent"])
def test_vectors_unchanged_with_the_checks_compiled_in(acl_build: Path, name: str) -> None:
    """Off by default: with no table entries the program with acl.p4 answers the shared
    vectors as before, frame for frame and in its final state."""
    vector = p4_replay.load_vector(p4_replay.VECTORS_DIR / f"{name}.json")
    replay = p4_replay.replay_on_bmv2(vector, acl_build)
    assert replay.got == replay.expected
    assert p4_replay.state_differences(replay.state, replay.reference) == []
    assert replay.state.counters["OlafIngress.refused_counter"] == [0, 0]


@pytest.mark.parametrize("tables", ["off", "closed", "open"])
def test_attacks_on_simple_switch(acl_program: Path, tmp_path: Path, tables: str) -> None:
    """All attacks in one replay (each on a queue the previous one left), then an end marker
    from A. Every frame out must be the reference switch's answer (the same SourceAcl in
    front of OlafQueue), and refused_counter must count what the reference refused.

    Tables: none (off), ``olaf switch --cluster-source/--ps-source``'s closed form, and the
    open form of ``open_acl`` (its cluster 5 stays open, so only the reference decides there)."""
    acl_on = tables == "closed"
    acl = {"off": None, "closed": acl_for(RACK), "open": open_acl(RACK)}[tables]
    steps: list[tuple[str, bytes]] = []
    spans = []
    for attack in ATTACKS:
        spans.append((attack, len(steps)))
        steps += attack.steps
        steps += [(PS, pull())] * CAPACITY  # drain, so each attack starts on an empty queue
    marker = p4_replay.olaf_message(V, msg_type=MsgType.UPDATE, frac_bits=3, seq=0xE0D)
    steps.append((A, marker))
    reference = Pipeline(OlafQueue(QueueConfig(capacity=CAPACITY)), acl)
    sources = np.array([int(ipaddress.IPv4Address(RACK[h])) for h, _ in steps], np.uint32)
    responses, answered, _ = reference.handle([p for _, p in steps], sources)
    expected = [host_frame(r, steps[i][0], i, reply=True) for r, i in zip(responses, answered.tolist(),
                                                                            strict=True)]
    run = p4_replay.run_simple_switch(
        acl_program, tmp_path, [host_frame(p, h, i) for i, (h, p) in enumerate(steps)], len(expected),
        read_back=True, commands=acl_commands(acl) if acl is not None else None,
    )
    assert run.port0 == expected
    assert run.port1 == []
    by_step: list[bytes | None] = [None] * len(steps)
    for frame in run.port0:
        by_step[struct.unpack("!H", frame[18:20])[0]] = p4_replay.udp_payload(frame)
    if tables != "open":
        for attack, start in spans:
            check_attack(attack.name, answers_of(by_step[start:start + len(attack.steps)]), acl_on)
    assert run.state is not None
    refused = run.state.counters["OlafIngress.refused_counter"]
    assert refused == [reference.acl.refused[r] for r in Refusal]
    if tables != "open":
        assert refused == [sum(refusals(a)[r] for a in ATTACKS) if acl_on else 0 for r in Refusal]
    else:
        assert 0 < refused[Refusal.UPDATE_SOURCE] < sum(refusals(a)[Refusal.UPDATE_SOURCE] for a in ATTACKS)
    assert p4_replay.state_differences(run.state, reference.queue) == []


def _switch_args(argv: list[str]):  # noqa: ANN202 - argparse.Namespace
    import argparse

    from olaf.commands import switch

    parser = argparse.ArgumentParser(prog="olaf switch")
    switch.add_arguments(parser)
    return switch, parser.parse_args(argv)


@pytest.mark.parametrize("bad", [["--cluster-source", "0=10.0.0.1/24"], ["--cluster-source", "10.0.0.0/8"],
                                 ["--ps-source", "10.0.0.0/40"], ["--ps-source", "ps"]])
def test_cli_refuses_bad_source_options(bad: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        _switch_args(["--listen", "127.0.0.1:0", *bad])
    assert exit_.value.code == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith(f"olaf switch: error: argument {bad[0]}")


def test_cli_refuses_a_cluster_beyond_max_clusters(capsys: pytest.CaptureFixture[str]) -> None:
    switch, args = _switch_args(["--listen", "127.0.0.1:0", "--max-clusters", "4",
                                 "--cluster-source", "4=10.0.0.0/8"])
    assert switch.run(args) == 2
    assert capsys.readouterr().err.strip() == (
        "olaf switch: error: --cluster-source 4=10.0.0.0/8: cluster 4 is not below --max-clusters 4")
    _, args = _switch_args(["--listen", "127.0.0.1:0", "--cluster-source", "0=10.0.0.0/8",
                            "--cluster-source", "0=192.168.1.7", "--ps-source", "10.0.0.100/32"])
    assert args.cluster_sources == [(0, parse_prefix("10.0.0.0/8")), (0, parse_prefix("192.168.1.7/32"))]
    assert args.ps_sources == [parse_prefix("10.0.0.100/32")]


# -- the controller-side path: P4Runtime on the software switch -----------------------------


@needs_loopback
def test_controller_closes_the_software_switch_over_p4runtime() -> None:
    """``Controller`` writes update_source/pull_source through the software switch's
    P4Runtime service (the same calls a bmv2 or Tofino target gets); every attack is then
    refused, refused_counter read over P4Runtime counts each one, the tables read back as
    written, and removing the entries opens the switch again."""
    from control_plane.controller import Controller
    from control_plane.service import P4RuntimeServer

    p4info = Path(__file__).resolve().parents[1] / "p4" / "olaf.p4info.txtpb"
    switch, close = udp_switch(None)
    server = P4RuntimeServer(switch, "127.0.0.1:0").start()
    hosts = Hosts(switch.address)
    try:
        with Controller(server.address) as c:
            c.push_pipeline(p4info)
            assert c.source_rules() == {"update_source": ([], True), "pull_source": ([], True)}
            c.set_cluster_sources(0, [f"{LOOPBACK[A]}/32"])
            c.set_cluster_sources(1, [f"{LOOPBACK[B]}/32"])
            c.close_unlisted_clusters()
            c.set_ps_sources([f"{LOOPBACK[PS]}/32"])
            rules = c.source_rules()
            everywhere = ipaddress.IPv4Network("0.0.0.0/0")
            assert set(rules["update_source"][0]) == {
                AclRule(parse_prefix(f"{LOOPBACK[A]}/32"), True, 0), AclRule(everywhere, False, 0),
                AclRule(parse_prefix(f"{LOOPBACK[B]}/32"), True, 1), AclRule(everywhere, False, 1)}
            assert rules["update_source"][1] is False
            assert set(rules["pull_source"][0]) == {AclRule(parse_prefix(f"{LOOPBACK[PS]}/32"), True),
                                                    AclRule(everywhere, False)}
            for attack in ATTACKS:
                check_attack(attack.name, answers_of([hosts.send(h, p) for h, p in attack.steps]), True)
                while answers_of([hosts.send(PS, pull())])[0]["type"] != MsgType.EMPTY:
                    pass  # drained: the next attack starts on an empty queue
            expected = [sum(refusals(a)[r] for a in ATTACKS) for r in Refusal]
            assert c.counters()["refused"] == {r.name: expected[r] for r in Refusal}
            assert switch.pipeline.acl.refused == expected

            # A second PS address replaces the first: only it may PULL now.
            c.set_ps_sources([f"{LOOPBACK[ATTACKER]}/32"])
            hosts.send(A, update(value=5))
            assert hosts.send(PS, pull()) is None
            assert answers_of([hosts.send(ATTACKER, pull())])[0]["value"] == 5
            # No prefixes: the entries go and the table's default (permit) applies again.
            c.set_ps_sources([])
            assert c.source_rules()["pull_source"] == ([], True)
            hosts.send(A, update(value=6))
            assert answers_of([hosts.send(PS, pull())])[0]["value"] == 6
            assert c.counters()["refused"]["PULL_SOURCE"] == expected[Refusal.PULL_SOURCE] + 1
            with pytest.raises(ValueError, match="not an IPv4 prefix"):
                c.set_ps_sources(["10.0.0.1/8"])
            with pytest.raises(ValueError, match="bit<16>"):
                c.set_cluster_sources(1 << 16, ["10.0.0.0/8"])
    finally:
        hosts.close()
        server.stop(0.5)
        close()
