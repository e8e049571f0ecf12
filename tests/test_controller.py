"""The controller (p4runtime-shell underneath) against a running OLAF target.

What the controller writes must show on the data path. The data-path tests run twice:
against ``olaf switch --p4runtime`` (OLAF messages over UDP on loopback) and against
bmv2's ``simple_switch_grpc`` running ``p4/olaf.p4`` compiled with p4c, whose port 1 is a
veth pair to a host in a network namespace the test creates (``olaf-`` prefix); the
test talks OLAF from a socket inside that namespace. The bmv2 runs skip with the reason
when p4c, ``simple_switch_grpc`` or root are missing.
"""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from p4runtime_sh.p4runtime import P4RuntimeClient

from bmv2_topologies import bmv2
from bmv2_topologies.netns import Hosts, can_create_namespaces
from bmv2_topologies.simple_switch import free_tcp_port, stop_process
from control_plane.controller import (
    Controller,
    ControllerError,
    Route,
    Topology,
)
from control_plane.device_config import bmv2_device_config, tofino_device_config
from control_plane.threshold import ThresholdLoop, pipeline_threshold_setter
from tests.switch_process import REPO, olaf_command, running_switch
from tests.vectors.generate import pull, update
from worker_transport.protocol import FLAG_CONGESTED, OLAF_PORT, Mode, MsgType, Olaf, Outcome

P4INFO = Path(REPO) / "p4" / "olaf.p4info.txtpb"
BMV2_MISSING = bmv2.missing() or can_create_namespaces()
needs_bmv2 = pytest.mark.skipif(BMV2_MISSING is not None, reason=f"bmv2 path: {BMV2_MISSING}")
HOST_IP, HOST_MAC = "10.215.0.1", "02:00:00:0d:00:01"
SWITCH_IP, SWITCH_MAC = "10.215.0.254", "02:00:00:0d:00:fe"


class Target:
    """A switch under test: its P4Runtime address, what a push sends, and a socket that
    talks OLAF to it (answers come back to the port the request came in on)."""

    def __init__(self, kind: str, p4runtime: str, sock: socket.socket, address: tuple[str, int],
                 port: int, p4info: Path = P4INFO, device_config: bytes = b"",
                 thrift_port: int | None = None) -> None:
        self.kind = kind
        self.p4runtime = p4runtime
        self.sock = sock
        self.address = address
        self.port = port
        """The switch port the answers leave by (drop_sim's match)."""
        self.p4info = p4info
        self.device_config = device_config
        self.thrift_port = thrift_port

    def push(self, c: Controller, action: str = "commit") -> None:
        c.push_pipeline(self.p4info, self.device_config, action=action)

    def ask(self, *messages: bytes, expect: int | None = None, timeout: float = 2.0) -> list[Olaf]:
        """Send messages one by one; collect ``expect`` answers (default one each)."""
        self.sock.settimeout(timeout)
        answers = []
        for m in messages:
            self.sock.sendto(m, self.address)
        for _ in range(len(messages) if expect is None else expect):
            answers.append(Olaf(self.sock.recv(65535)))
        return answers

    def silent(self, message: bytes, wait: float = 0.4) -> bool:
        """True when no answer comes back within ``wait`` seconds."""
        self.sock.sendto(message, self.address)
        self.sock.settimeout(wait)
        try:
            self.sock.recv(65535)
        except TimeoutError:
            return True
        return False

    def drain(self) -> None:
        while self.ask(pull())[0].msg_type != MsgType.EMPTY:
            pass


def p4runtime_address(proc: subprocess.Popen) -> str:
    line = proc.stdout.readline()
    assert line.startswith("p4runtime on "), line
    return line.split()[-1]


@contextlib.contextmanager
def soft_target() -> Iterator[Target]:
    with running_switch("--listen", "127.0.0.1:0", "--p4runtime", "127.0.0.1:0", "--seed", "7") as sw:
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.bind(("127.0.0.1", 0))
        with sock:
            yield Target("soft", p4runtime_address(sw.proc), sock, sw.address, port=0)
    assert sw.proc.returncode == 0, sw.stderr


def _start_simple_switch_grpc(work: Path, ports: dict[int, str], device_id: int
                              ) -> tuple[subprocess.Popen, str, int]:
    """One start on fresh ports; RuntimeError when the process exits before it serves
    (e.g. a port taken in the meantime by another program)."""
    grpc_address, thrift_port = f"127.0.0.1:{free_tcp_port()}", free_tcp_port()
    argv = ["simple_switch_grpc", "--device-id", str(device_id), "--thrift-port", str(thrift_port),
            "--notifications-addr", f"ipc://{work}/bmv2-notifications.ipc",
            "--log-file", str(work / "bmv2"), "--log-flush", "--log-level", "warn"]
    for number, interface in sorted(ports.items()):
        argv += ["-i", f"{number}@{interface}"]
    argv += ["--no-p4", "--", "--grpc-server-addr", grpc_address]
    output = work / "simple_switch_grpc.out"  # a file, not a pipe nobody drains
    with output.open("w") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"simple_switch_grpc exited ({proc.returncode}): {output.read_text()[-2000:]}")
        if _answers(grpc_address, device_id):
            # Still alive a moment after the answer: it came from this process, not from
            # another program that took the port while this one failed to bind it.
            time.sleep(0.3)
            if proc.poll() is None:
                return proc, grpc_address, thrift_port
            continue
        if time.monotonic() > deadline:
            stop_process(proc)
            raise ConnectionError(f"simple_switch_grpc on {grpc_address} never answered")
        time.sleep(0.3)


def _answers(address: str, device_id: int) -> bool:
    try:
        Controller(address, device_id=device_id, election_id=None, timeout=2).open().close()
    except ConnectionError:
        return False
    return True


@contextlib.contextmanager
def simple_switch_grpc(work: Path, ports: dict[int, str], device_id: int = 1) -> Iterator[tuple[str, int]]:
    """``simple_switch_grpc`` on ``ports`` (number -> interface), no program yet; yields its
    P4Runtime address and Thrift port once it serves, and stops it (by PID) afterwards."""
    for attempt in range(3):
        try:
            proc, grpc_address, thrift_port = _start_simple_switch_grpc(work, ports, device_id)
            break
        except RuntimeError:
            if attempt == 2:
                raise
    try:
        yield grpc_address, thrift_port
    finally:
        stop_process(proc)


@pytest.fixture(scope="session")
def bmv2_program(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """p4/olaf.p4 compiled with p4c: (bmv2 JSON, the P4Info p4c wrote)."""
    return bmv2.compile_program(tmp_path_factory.mktemp("p4build"))


@contextlib.contextmanager
def bmv2_target(work: Path, program: tuple[Path, Path]) -> Iterator[Target]:
    """simple_switch_grpc whose port 1 leads to host ``h`` (its own namespace)."""
    hosts = Hosts()
    try:
        port = hosts.add("h", f"{HOST_IP}/24", HOST_MAC)
        hosts.neighbour("h", SWITCH_IP, SWITCH_MAC)
        with simple_switch_grpc(work, {1: port}) as (address, thrift), hosts.udp_socket("h") as sock:
            sock.bind((HOST_IP, 0))
            yield Target("bmv2", address, sock, (SWITCH_IP, OLAF_PORT), port=1,
                         p4info=program[1], device_config=bmv2_device_config(program[0]), thrift_port=thrift)
    finally:
        hosts.close()
    assert hosts.leftovers() == []


@pytest.fixture(scope="module", params=["soft", pytest.param("bmv2", marks=needs_bmv2)])
def target(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    if request.param == "soft":
        with soft_target() as t:
            yield t
    else:
        program = request.getfixturevalue("bmv2_program")
        with bmv2_target(tmp_path_factory.mktemp("bmv2"), program) as t:
            yield t


@pytest.fixture(scope="module")
def elections() -> Iterator[Target]:
    """A switch of its own for the tests that raise the highest election id it has seen."""
    with soft_target() as t:
        with Controller(t.p4runtime, election_id=(5, 0)) as c:
            c.push_pipeline(P4INFO)
        yield t


@pytest.fixture
def ctl(target: Target) -> Iterator[Controller]:
    """A primary controller with a freshly committed pipeline (routes, drops, settings reset)."""
    with Controller(target.p4runtime) as c:
        target.push(c)
        target.drain()
        yield c


def outcomes(answers: list[Olaf]) -> list[int]:
    return [a.outcome for a in answers]


def test_fifo_mode_written_by_the_controller_stops_merges(target: Target, ctl: Controller) -> None:
    assert outcomes(target.ask(update(1), update(2))) == [Outcome.ENQUEUED, Outcome.MERGED]
    (data,) = target.ask(pull())
    assert data.msg_type == MsgType.DATA and data.agg_count == 2
    settings = ctl.configure(mode="fifo")
    assert settings.mode == Mode.FIFO and ctl.settings() == settings
    assert outcomes(target.ask(update(1), update(2))) == [Outcome.ENQUEUED, Outcome.ENQUEUED]
    assert [a.agg_count for a in target.ask(pull(), pull())] == [1, 1]
    ctl.configure(mode=Mode.OLAF)
    assert outcomes(target.ask(update(1), update(2))) == [Outcome.ENQUEUED, Outcome.MERGED]


def test_threshold_loop_over_p4runtime_changes_merging(target: Target, ctl: Controller) -> None:
    loop = ThresholdLoop(ctl, floor=0.25, interval=0.05)
    loop.report(-4.0)  # 0.15 * |-4| = 0.6
    step = loop.step()
    assert step is not None and step.threshold == pytest.approx(0.6) and step.raw == round(0.6 * 65536)
    assert ctl.settings().threshold == step.raw
    # Rewards 1.0 apart: no longer close enough to merge; the better one replaces.
    assert outcomes(target.ask(update(1, reward=1.0), update(2, reward=2.0), update(3, reward=0.5))) == [
        Outcome.ENQUEUED, Outcome.REPLACED, Outcome.DROPPED_REWARD]
    target.drain()
    with loop:  # the thread applies the floor for a mean reward near 0
        loop.report(0.1)
        deadline = time.monotonic() + 5
        while not loop.history[1:] and time.monotonic() < deadline:
            time.sleep(0.02)
    assert loop.history[-1].threshold == 0.25 and loop.errors == 0
    assert ctl.settings().threshold == 0.25 * 65536
    assert outcomes(target.ask(update(1, reward=1.0), update(2, reward=1.2))) == [
        Outcome.ENQUEUED, Outcome.MERGED]


def test_congestion_threshold_and_counters_match_the_packets(target: Target, ctl: Controller) -> None:
    before = ctl.counters()
    ctl.configure(congestion_threshold=8)  # 255 * 2 / 64 = 7 < 8 <= 255 * 3 / 64 = 11
    answers = target.ask(*(update(w, block=w) for w in range(1, 4)))
    assert [a.flags & FLAG_CONGESTED for a in answers] == [0, 0, FLAG_CONGESTED]
    state = ctl.queue_state()
    if target.kind == "bmv2":
        assert state is None  # simple_switch_grpc serves no register reads over P4Runtime ...
        from bmv2_topologies.bmv2_thrift import queue_state

        state = queue_state(target.thrift_port)  # ... its Thrift server does
    assert state is not None and state["occupied"] == 3 and state["active_clusters"] == 1
    assert state["write_ptr"] == (state["read_ptr"] + 3) % 64 and state["cluster_count"][0] == 3
    assert [a.msg_type for a in target.ask(pull(), pull(), pull(), pull())] == [MsgType.DATA] * 3 + [
        MsgType.EMPTY]
    target.silent(b"\x17" * 10)  # too short: dropped, counted invalid
    after = ctl.counters()
    assert after["msg_types"]["UPDATE"] - before["msg_types"]["UPDATE"] == 3
    assert after["msg_types"]["PULL"] - before["msg_types"]["PULL"] == 4
    assert after["outcomes"]["ENQUEUED"] - before["outcomes"]["ENQUEUED"] == 3
    assert after["outcomes"]["DROPPED_INVALID"] - before["outcomes"]["DROPPED_INVALID"] == 1
    ctl.reset_counters()
    assert ctl.counters() == {kind: dict.fromkeys(after[kind], 0) for kind in after}
    target.ask(pull())
    assert ctl.counters()["msg_types"]["PULL"] == 1


def test_cluster_quota_set_over_p4runtime_and_bad_values_refused(target: Target, ctl: Controller) -> None:
    """The same Controller call limits a cluster on every target (DESIGN.md §3 step 4); 0
    and more than capacity raise before anything is written, so the target keeps its
    quota and its queue. A write that goes around the controller's check is refused by
    the software switch (INVALID_ARGUMENT) and taken as no limit by the P4 program."""
    assert ctl.settings().cluster_quota == 64  # QueueConfig()'s: capacity, no limit
    settings = ctl.set_cluster_quota(2)
    assert settings.cluster_quota == 2 and ctl.settings() == settings
    assert outcomes(target.ask(update(1, block=0), update(1, block=1), update(1, block=2),
                               update(2, block=3, cluster=1))) == [
        Outcome.ENQUEUED, Outcome.ENQUEUED, Outcome.DROPPED_FULL, Outcome.ENQUEUED]
    counters = ctl.counters()
    for bad in (0, 65, -1):
        with pytest.raises(ValueError, match=r"cluster_quota must be an integer 1\.\.capacity \(64\)"):
            ctl.set_cluster_quota(bad)
        with pytest.raises(ValueError, match="cluster_quota"):
            ctl.configure(mode="fifo", cluster_quota=bad)  # nothing of this write happens
    assert ctl.settings() == settings and ctl.counters() == counters
    assert target.ask(update(1, block=2))[0].outcome == Outcome.DROPPED_FULL  # still at its quota
    assert [a.msg_type for a in target.ask(pull())] == [MsgType.DATA]
    assert target.ask(update(1, block=2))[0].outcome == Outcome.ENQUEUED
    # Around the controller: the raw default entry with quota 0.
    from p4runtime_sh import shell as sh

    raw = sh.TableEntry("OlafIngress.olaf_config")(is_default=True, action="OlafIngress.set_config")
    for name, value in {**settings.as_dict(), "mode": 0, "cluster_quota": 0}.items():
        if name != "reward_threshold":
            raw.action[name] = str(value)
    if target.kind == "soft":
        from p4runtime_sh.p4runtime import P4RuntimeWriteException

        with pytest.raises(P4RuntimeWriteException, match="INVALID_ARGUMENT") as e:
            raw.modify()
        assert "cluster_quota must be an integer 1..capacity" in str(e.value)
        assert ctl.settings() == settings
    else:
        raw.modify()  # bmv2 stores what it is given ...
        assert ctl.settings().cluster_quota == 0
        # ... and the program takes 0 as no limit: cluster 0 (2 slots) appends again.
        assert target.ask(update(1, block=4))[0].outcome == Outcome.ENQUEUED
    ctl.set_cluster_quota(64)
    target.drain()


def test_feedback_revision_set_over_p4runtime_and_bad_values_refused(target: Target,
                                                                      ctl: Controller) -> None:
    """The same Controller call picks the feedback revision on every target (DESIGN.md §3
    Feedback): under 3 one cluster's ACK says its room (0 with a nearly empty queue),
    under 2 the global occupancy; 1 and 4 raise before anything is written."""
    assert ctl.settings().feedback == 3  # QueueConfig()'s and the P4 program's default
    assert target.ask(update(1, block=0))[0].queue_util == 0
    settings = ctl.set_feedback(2)
    assert settings.feedback == 2 and ctl.settings() == settings
    assert target.ask(update(1, block=1))[0].queue_util == 255 * 2 // 64
    for bad in (1, 4, 0):
        with pytest.raises(ValueError, match="feedback must be revision 2 or 3"):
            ctl.configure(mode="fifo", feedback=bad)  # nothing of this write happens
    assert ctl.settings() == settings
    assert ctl.set_feedback(3).feedback == 3
    assert target.ask(update(1, block=2))[0].queue_util == 0
    target.drain()


def test_source_checks_set_over_p4runtime_refuse_and_count(target: Target, ctl: Controller) -> None:
    """The same Controller calls close a cluster and the PULLs on every target: this host
    (127.0.0.1 or the bmv2 namespace's address) is outside the prefixes, so it is refused
    unanswered and refused_counter counts it; removing the entries opens the switch again."""
    elsewhere = "192.0.2.0/24"  # TEST-NET-1: no host of the test is in it
    before = ctl.counters()["refused"]
    ctl.set_cluster_sources(0, [elsewhere])
    ctl.set_ps_sources([elsewhere])
    rules = ctl.source_rules()
    assert sorted((r.cluster, str(r.prefix), r.permit) for r in rules["update_source"][0]) == [
        (0, "0.0.0.0/0", False), (0, elsewhere, True)]
    assert rules["update_source"][1] is True and len(rules["pull_source"][0]) == 2
    assert target.silent(update(1, cluster=0)) and target.silent(pull())
    assert target.ask(update(1, cluster=1))[0].outcome == Outcome.ENQUEUED  # cluster 1 is not listed
    ctl.close_unlisted_clusters()
    assert target.silent(update(2, cluster=1))
    after = ctl.counters()["refused"]
    assert after["UPDATE_SOURCE"] - before["UPDATE_SOURCE"] == 2
    assert after["PULL_SOURCE"] - before["PULL_SOURCE"] == 1
    ctl.set_cluster_sources(0, [])
    ctl.set_ps_sources([])
    ctl.close_unlisted_clusters(False)
    assert ctl.source_rules() == {"update_source": ([], True), "pull_source": ([], True)}
    assert target.ask(update(3, cluster=0))[0].outcome == Outcome.ENQUEUED
    assert target.ask(pull())[0].msg_type == MsgType.DATA


def test_drop_probability_set_over_p4runtime_drops_answers(target: Target, ctl: Controller) -> None:
    ctl.set_drop_prob(target.port, 1.0)  # 65535/65536: a random16 of 65535 would pass
    assert ctl.drop_probs() == {target.port: 65535 / 65536}
    before = ctl.counters()["msg_types"]["PULL"]
    assert target.silent(pull())
    assert ctl.counters()["msg_types"]["PULL"] == before + 1  # processed, answer dropped
    ctl.set_drop_prob(target.port, 0.0)
    assert target.ask(pull())[0].msg_type == MsgType.EMPTY
    ctl.set_drop_prob(None, 0.5)
    assert ctl.drop_probs() == {target.port: 0.0, None: 0.5}


def test_topology_routes_install_and_read_back(tmp_path: Path, target: Target, ctl: Controller) -> None:
    topo = tmp_path / "topo.json"
    topo.write_text(json.dumps({"switches": {"s1": {
        "routes": [{"prefix": "10.0.1.1/32", "port": 1, "mac": "08:00:00:00:01:11"},
                   {"prefix": "10.0.0.0/8", "port": 2}],
        "drop_prob": {"3": 0.125}}, "s2": {}}}))
    assert ctl.install_topology(Topology.load(topo, "s1")) == 3
    assert sorted(ctl.routes(), key=lambda r: r.prefix) == [
        Route("10.0.0.0/8", 2, None), Route("10.0.1.1/32", 1, "08:00:00:00:01:11")]
    assert ctl.drop_probs() == {3: 0.125}
    ctl.install_topology(Topology([Route("10.0.1.1/32", 4, "08:00:00:00:01:44")]))  # replaces
    ctl.delete_route("10.0.0.0/8")
    assert ctl.routes() == [Route("10.0.1.1/32", 4, "08:00:00:00:01:44")]
    with pytest.raises(ControllerError) as e:
        ctl.delete_route("10.0.0.0/8")
    assert e.value.code == "NOT_FOUND"
    if target.kind == "soft":  # fixed at start; bmv2's program reads it from the table
        with pytest.raises(ControllerError) as e:
            ctl.configure(capacity=128)
        assert e.value.code == "INVALID_ARGUMENT" and "capacity is 64" in e.value.message
    with pytest.raises(ValueError, match="name one"):
        Topology.load(topo)
    with pytest.raises(ValueError, match="no switch 's9'"):
        Topology.load(topo, "s9")
    (tmp_path / "bad.json").write_text('{"routes": [{"port": 1}]}')
    with pytest.raises(ValueError, match="bad topology"):
        Topology.load(tmp_path / "bad.json")


def test_registers_a_target_does_not_serve_are_reported(target: Target, ctl: Controller) -> None:
    from control_plane.p4info import load_p4info

    if target.kind == "bmv2":  # bmv2 1.15.5 answers every register read so
        with pytest.raises(ControllerError, match="Register reads are not supported") as e:
            ctl.register("reg_occupied")
        assert e.value.code == "UNIMPLEMENTED" and ctl.queue_state() is None
        return

    info = load_p4info(P4INFO)
    extra = info.registers.add()
    extra.CopyFrom(info.registers[0])
    extra.preamble.id, extra.preamble.name = 0x16000001, "OlafIngress.reg_extra"
    extra.preamble.alias = "reg_extra"
    ctl.push_pipeline(info, action="reconcile")  # unknown registers are accepted, then unserved
    with pytest.raises(ControllerError) as e:
        ctl.register("reg_extra")
    assert "UNIMPLEMENTED" in str(e.value) and "internal to the P4 program" in str(e.value)
    with pytest.raises(ControllerError) as e:
        ctl.register("reg_nothing")
    assert e.value.code == "NOT_FOUND"
    assert ctl.queue_state() is not None
    ctl.push_pipeline(P4INFO)


def test_sessions_backups_and_lifetime(elections: Target) -> None:
    target = elections
    with Controller(target.p4runtime, election_id=None) as reader:  # read-only: never primary
        assert not reader.is_primary and reader.capabilities().startswith("1.")
        with pytest.raises(RuntimeError, match="another p4runtime-shell session"):
            Controller(target.p4runtime).open()
        with pytest.raises(ControllerError, match="read-only"):
            reader.configure(mode="fifo")
    holder = P4RuntimeClient(1, target.p4runtime, (5, 0))  # a controller with a higher election id
    try:
        with Controller(target.p4runtime, election_id=(1, 0)) as backup:
            assert not backup.is_primary
            assert backup.settings().mode in tuple(Mode)  # reads need no primary
            with pytest.raises(ControllerError) as e:
                backup.configure(mode="fifo")
            assert e.value.code == "PERMISSION_DENIED"
    finally:
        holder.tear_down()
    with Controller(target.p4runtime, election_id=(5, 0)) as again:  # as high as ever seen: primary
        assert again.is_primary
    with pytest.raises(ConnectionError, match="no P4Runtime session"):
        Controller(target.p4runtime, device_id=9).open()
    with pytest.raises(RuntimeError, match="not open"):
        Controller(target.p4runtime).settings()


def ctl_cli(capsys: pytest.CaptureFixture, target: Target, *args: str) -> tuple[int, str, str]:
    """``olaf ctl`` in this process (the CLI's own code path, without a Python start-up per call)."""
    from olaf.cli import main

    code = main(["ctl", "--target", target.p4runtime, *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_sources_sets_lists_and_refuses_bad_prefixes(capsys: pytest.CaptureFixture,
                                                          elections: Target) -> None:
    target = elections
    code, out, err = ctl_cli(capsys, target, "--election-id", "5,0", "--json", "sources", "--cluster",
                             "3=10.3.0.0/16,10.4.0.1", "--ps", "10.0.0.100/32", "--close-unlisted")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["sources"]["update_source"] == {"default": "deny", "rules": [
        {"cluster": 3, "prefix": "0.0.0.0/0", "action": "deny"},
        {"cluster": 3, "prefix": "10.3.0.0/16", "action": "permit"},
        {"cluster": 3, "prefix": "10.4.0.1/32", "action": "permit"}]}
    assert doc["sources"]["pull_source"]["default"] == "permit"
    assert len(doc["sources"]["pull_source"]["rules"]) == 2
    assert target.silent(pull())  # this host is not the PS
    code, out, err = ctl_cli(capsys, target, "--json", "sources")  # read-only: no election id needed
    assert code == 0, err
    assert json.loads(out)["refused"]["PULL_SOURCE"] >= 1
    code, out, err = ctl_cli(capsys, target, "--election-id", "5,0", "--json", "sources", "--cluster", "3=",
                             "--ps=", "--open-unlisted")
    assert code == 0, err
    assert json.loads(out)["sources"] == {"update_source": {"rules": [], "default": "permit"},
                                          "pull_source": {"rules": [], "default": "permit"}}
    for bad in (["--cluster", "3=10.3.0.1/16"], ["--cluster", "70000=10.0.0.0/8"], ["--ps", "300.0.0.1"]):
        with pytest.raises(SystemExit) as e:
            ctl_cli(capsys, target, "sources", *bad)
        assert e.value.code == 2


def test_cli_sets_and_shows(capsys: pytest.CaptureFixture, elections: Target) -> None:
    target = elections
    code, out, err = ctl_cli(capsys, target, "--election-id", "5,0", "--json", "set", "--mode", "fifo",
                             "--threshold", "1.5", "--drop-prob", "2:0.25")
    assert code == 0, err
    assert json.loads(out)["settings"]["mode"] == "FIFO"
    shown = subprocess.run(olaf_command("ctl", "--target", target.p4runtime, "--json", "show"), cwd=REPO,
                           capture_output=True, text=True, timeout=60)  # once through the entry point
    assert shown.returncode == 0, shown.stderr
    doc = json.loads(shown.stdout)
    assert doc["settings"]["reward_threshold"] == 1.5 and doc["drop_prob"] == {"2": 0.25}
    assert set(doc["queue"]) == {"occupied", "read_ptr", "write_ptr", "active_clusters", "cluster_count"}
    assert set(doc["counters"]["outcomes"]) == {o.name for o in Outcome}
    assert outcomes(target.ask(update(1), update(2))) == [Outcome.ENQUEUED, Outcome.ENQUEUED]  # FIFO
    code, out, err = ctl_cli(capsys, target, "--json", "registers", "reg_occupied")
    assert code == 0 and json.loads(out) == {"registers": {"reg_occupied": [2]}}
    code, out, err = ctl_cli(capsys, target, "--json", "watch", "--count", "1", "--interval", "0.05")
    assert code == 0 and json.loads(out)["queue"]["occupied"] == 2
    target.drain()
    code, out, err = ctl_cli(capsys, target, "--election-id", "5,0", "--json", "set", "--cluster-quota", "3")
    assert code == 0 and json.loads(out)["settings"]["cluster_quota"] == 3, err
    with pytest.raises(SystemExit) as e:  # argparse: not a quota at all
        ctl_cli(capsys, target, "--election-id", "5,0", "set", "--cluster-quota", "0")
    assert e.value.code == 2 and "0 is outside 1..65535" in capsys.readouterr().err
    code, out, err = ctl_cli(capsys, target, "--election-id", "5,0", "set", "--cluster-quota", "65")
    assert code == 2 and err.count("\n") == 1, err  # above this target's capacity: nothing written
    assert "cluster_quota must be an integer 1..capacity (64), not 65" in err
    code, out, err = ctl_cli(capsys, target, "--election-id", "5,0", "--json", "set", "--cluster-quota", "64")
    assert code == 0 and json.loads(out)["settings"]["cluster_quota"] == 64
    code, out, err = ctl_cli(capsys, target, "--election-id", "5,0", "--json", "set", "--feedback", "2")
    assert code == 0 and json.loads(out)["settings"]["feedback"] == 2, err
    with pytest.raises(SystemExit) as e:  # argparse: choices 2 and 3, exit 2
        ctl_cli(capsys, target, "--election-id", "5,0", "set", "--feedback", "5")
    assert e.value.code == 2
    code, out, err = ctl_cli(capsys, target, "--election-id", "5,0", "--json", "set", "--feedback", "3")
    assert code == 0 and json.loads(out)["settings"]["feedback"] == 3
    code, out, err = ctl_cli(capsys, target, "set", "--mode", "olaf")  # default election id 0,1 < 5,0
    assert code == 1 and "PERMISSION_DENIED" in err and "5,0" in err
    code, out, err = ctl_cli(capsys, target, "counters")
    assert code == 0 and "ENQUEUED" in out and "MERGED" in out
    code, out, err = ctl_cli(capsys, target, "routes", "--add", "10.1.0.0/16=3")
    assert code == 1 and "PERMISSION_DENIED" in err
    with Controller(target.p4runtime, election_id=(5, 0)) as c:
        c.configure(mode="olaf")


def test_cli_errors_are_one_line_with_exit_codes(capsys: pytest.CaptureFixture) -> None:
    from olaf.cli import main

    assert main(["ctl", "--target", f"127.0.0.1:{free_tcp_port()}", "--timeout", "1", "show"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("olaf ctl: error: no P4Runtime session") and err.count("\n") == 1
    with pytest.raises(SystemExit) as e:
        main(["ctl", "--target", "x:1", "set", "--drop-prob", "1:2"])
    assert e.value.code == 2 and "outside [0, 1]" in capsys.readouterr().err


# -- forwarding in interface mode -----------------------------------------------------------
LISTEN = """
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("0.0.0.0", int(sys.argv[1])))
s.settimeout(float(sys.argv[2]))
print("ready", flush=True)
try:
    data, peer = s.recvfrom(65535)
    print(peer[0], data.hex(), flush=True)
except TimeoutError:
    print("timeout", flush=True)
"""
SEND = """
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, 11, 1)  # SO_NO_CHECK: veth leaves the UDP checksum to offload
s.sendto(bytes.fromhex(sys.argv[3]), (sys.argv[1], int(sys.argv[2])))
"""


def delivered(hosts, payload: bytes, dst: str, wait: float) -> bytes | None:
    listener = hosts.popen("b", LISTEN, "5000", str(wait))
    try:
        assert listener.stdout.readline().strip() == "ready"
        sent = hosts.python("a", SEND, dst, "5000", payload.hex())
        assert sent.returncode == 0, sent.stderr
        out, err = listener.communicate(timeout=wait + 15)
    finally:
        if listener.poll() is None:
            listener.kill()
            listener.wait()
    assert listener.returncode == 0, err
    return None if out.strip() == "timeout" else bytes.fromhex(out.split()[1])


@pytest.mark.parametrize("kind", ["soft", pytest.param("bmv2", marks=needs_bmv2)])
def test_routes_written_over_p4runtime_forward_frames(kind: str, tmp_path: Path,
                                                      request: pytest.FixtureRequest) -> None:
    reason = can_create_namespaces()
    if reason is not None:
        pytest.skip(reason)
    ip_a, ip_b, mac_a, mac_b = "10.214.0.1", "10.214.0.2", "02:00:00:0b:00:01", "02:00:00:0b:00:02"
    hosts = Hosts()
    try:
        port_a = hosts.add("a", f"{ip_a}/24", mac_a)
        port_b = hosts.add("b", f"{ip_b}/24", mac_b)
        hosts.neighbour("a", ip_b, "02:00:00:0b:00:fe")  # the switch's side: a P4 switch answers no ARP
        with contextlib.ExitStack() as stack:
            if kind == "soft":
                sw = stack.enter_context(running_switch(
                    "-i", f"1@{port_a}", "-i", f"2@{port_b}", "--route", f"{ip_b}/32=2,{mac_b}",
                    "--p4runtime", "127.0.0.1:0"))
                address, p4info, config = p4runtime_address(sw.proc), P4INFO, b""
            else:
                program = request.getfixturevalue("bmv2_program")
                address, _ = stack.enter_context(simple_switch_grpc(tmp_path, {1: port_a, 2: port_b}))
                p4info, config = program[1], bmv2_device_config(program[0])
            with Controller(address) as c:
                if kind == "soft":
                    c.push_pipeline(p4info, config, action="reconcile")  # keeps the command line's route
                    assert c.routes() == [Route(f"{ip_b}/32", 2, mac_b)]
                    assert delivered(hosts, b"before", ip_b, wait=8) == b"before"
                c.push_pipeline(p4info, config)  # commit: a fresh pipeline has no routes
                assert c.routes() == []
                assert delivered(hosts, b"unrouted", ip_b, wait=1.0) is None
                topo = tmp_path / "topo.json"
                topo.write_text(json.dumps({"routes": [{"prefix": f"{ip_b}/32", "port": 2, "mac": mac_b},
                                                       {"prefix": f"{ip_a}/32", "port": 1, "mac": mac_a}]}))
                c.install_topology(Topology.load(topo))
                assert delivered(hosts, b"routed", ip_b, wait=8) == b"routed"
                c.delete_route(f"{ip_b}/32")
                assert delivered(hosts, b"deleted", ip_b, wait=1.0) is None
        if kind == "soft":
            assert sw.proc.returncode == 0, sw.stderr
            assert sw.final["forwarded"] >= 2
    finally:
        hosts.close()
    assert hosts.leftovers() == []


# -- pieces without a target --------------------------------------------------------------------
def test_threshold_rule_floor_and_feeding() -> None:
    applied: list[float] = []
    loop = ThresholdLoop(applied.append, floor=0.5, interval=1.0)
    assert loop.step() is None and applied == []
    loop.report(float("nan"))
    assert loop.step() is None
    loop.feed([10.0, 30.0])  # mean 20
    assert loop.step().threshold == pytest.approx(3.0) and applied == [pytest.approx(3.0)]
    loop.report(-1.0)
    assert loop.step().threshold == 0.5  # 0.15 below the floor
    assert loop.step() is None  # nothing new reported
    assert [round(h.mean_reward, 3) for h in loop.history] == [20.0, -1.0]
    with pytest.raises(ValueError):
        ThresholdLoop(applied.append, floor=-1.0)


def test_reward_rules_always_congested_off() -> None:
    """Issue 49 item 2: ``always`` sets DESIGN.md §3's threshold every round; ``congested``
    only while the queue is CONGESTED, else the largest value (every compatible update
    merges); ``off`` never writes. Bad rules and a congested rule without a probe refuse."""
    from olaf.drl.controller import threshold_raw
    from worker_transport.protocol import INT32_MAX

    congested = [False]
    applied: list[float] = []
    loop = ThresholdLoop(applied.append, floor=0.5, rule="congested", congested=lambda: congested[0])
    loop.report(20.0)
    assert loop.step().threshold == 2**31 and threshold_raw(applied[-1], 16) == INT32_MAX
    congested[0] = True
    loop.report(20.0)
    assert loop.step().threshold == pytest.approx(3.0)
    off: list[float] = []
    quiet = ThresholdLoop(off.append, floor=0.5, rule="off")
    quiet.report(20.0)
    assert quiet.step() is None and off == []
    always: list[float] = []
    ThresholdLoop(always.append, floor=0.5).report(1.0)
    with pytest.raises(ValueError, match="reward rule must be one of"):
        ThresholdLoop(applied.append, floor=0.5, rule="sometimes")
    with pytest.raises(ValueError, match="needs the switch's CONGESTED"):
        ThresholdLoop(applied.append, floor=0.5, rule="congested")


def test_threshold_loop_drives_an_in_process_switch() -> None:
    from dataplane.queue import OlafQueue
    from dataplane.switch import Pipeline

    pipeline = Pipeline(OlafQueue())
    loop = ThresholdLoop(pipeline_threshold_setter(pipeline), floor=0.1, interval=1.0)
    loop.report(10.0)
    assert loop.step().raw == round(1.5 * 65536) == pipeline.queue.threshold
    with pytest.raises(ValueError):
        pipeline_threshold_setter(pipeline)(-1.0)


def test_device_configs(tmp_path: Path) -> None:
    (tmp_path / "olaf.json").write_text('{"program": "olaf.p4"}')
    assert bmv2_device_config(tmp_path / "olaf.json") == b'{"program": "olaf.p4"}'
    (tmp_path / "tofino.bin").write_bytes(b"\x01\x02\x03")
    (tmp_path / "context.json").write_bytes(b"{}")
    blob = tofino_device_config("olaf", tmp_path / "tofino.bin", tmp_path / "context.json")
    assert blob == (b"\x04\x00\x00\x00olaf" + b"\x03\x00\x00\x00\x01\x02\x03" + b"\x02\x00\x00\x00{}")


def test_tutorials_topology_derives_routes(tmp_path: Path) -> None:
    pytest.importorskip("bmv2_topologies.topology")
    from olaf.commands.ctl import _load_topology

    star = Path(REPO) / "bmv2_topologies" / "star2.json"
    if not star.exists():
        pytest.skip("no bmv2_topologies/star2.json")
    topo = _load_topology(str(star), None)
    assert {r.prefix for r in topo.routes} >= {"10.0.1.1/32", "10.0.2.1/32"}
    assert all(r.mac for r in topo.routes)


# -- bmv2 only ------------------------------------------------------------------------------------
@needs_bmv2
def test_bmv2_device_id_mismatch_is_named(tmp_path: Path, bmv2_program: tuple[Path, Path]) -> None:
    """PI accepts the stream for any device id and fails only the push, with a bare message."""
    with simple_switch_grpc(tmp_path, {}, device_id=3) as (address, _), Controller(address) as c:
        with pytest.raises(ControllerError, match="is the target's device id 1") as e:
            c.push_pipeline(bmv2_program[1], bmv2_device_config(bmv2_program[0]))
        assert e.value.code == "UNKNOWN" and not c.has_pipeline


@needs_bmv2
def test_olaf_ctl_drives_bmv2(tmp_path: Path, bmv2_program: tuple[Path, Path],
                              capsys: pytest.CaptureFixture) -> None:
    """The command lines control_plane/README.md gives for bmv2."""
    from olaf.cli import main

    json_path, info = bmv2_program
    with simple_switch_grpc(tmp_path, {}) as (address, _):
        def ctl(*args: str) -> dict:
            code = main(["ctl", "--target", address, "--json", *args])
            out, err = capsys.readouterr()
            assert code == 0, err
            return json.loads(out)

        pushed = ctl("push", "--p4info", str(info), "--bmv2-json", str(json_path))
        assert pushed["device_config_bytes"] == json_path.stat().st_size
        assert ctl("set", "--mode", "fifo", "--threshold", "0.5")["settings"]["mode"] == "FIFO"
        assert ctl("routes", "--add", "10.0.1.1/32=1,08:00:00:00:01:11")["routes"] == [
            {"prefix": "10.0.1.1/32", "port": 1, "mac": "08:00:00:00:01:11"}]
        ctl("counters", "--reset")
        shown = ctl("show")
        assert shown["queue"] is None and shown["settings"]["reward_threshold"] == 0.5
        assert set(shown["counters"]["msg_types"].values()) == {0}
        assert main(["ctl", "--target", address, "registers"]) == 1
        assert "Register reads are not supported" in capsys.readouterr().err


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
