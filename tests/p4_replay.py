"""Framing of the shared packet vectors for targets that see whole frames (bmv2).

A vector step's ``in`` is a UDP payload; here it becomes an Ethernet/IPv4/UDP frame
from a worker to the PS address on UDP port 20300, and the step's ``out`` becomes the
frame the P4 program must send back: addresses and ports swapped, IPv4 total length,
UDP length and IPv4 checksum for the new payload, UDP checksum 0, TTL and IPv4
identification as received. Frames are built with ``struct`` rather than scapy so that
every byte is decided here, and compared byte for byte.

Also: a minimal pcap reader/writer (bmv2's ``--use-files`` mode), the driver that
compiles ``p4/olaf.p4`` with p4c and replays a vector file through ``simple_switch``,
and the read-back of the switch's registers and counters over Thrift
(``simple_switch_CLI``) to compare them with the reference queue's state.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bmv2_topologies.simple_switch import P4_MAIN, compile_p4, free_tcp_port, stop_process
from tests import p4sim
from worker_transport.protocol import HEADER_LEN, OLAF_PORT, VERSION, Mode, MsgType

REPO = Path(__file__).resolve().parent.parent
VECTORS_DIR = REPO / "tests" / "vectors"

HOST_MAC = bytes.fromhex("00000a000001")
SWITCH_MAC = bytes.fromhex("00000a0000fe")
HOST_IP = bytes([10, 0, 0, 1])
PS_IP = bytes([10, 0, 0, 100])
HOST_PORT = 40000
TTL = 64
ETH_IPV4 = 0x0800
IPPROTO_UDP = 17
FRAME_OVERHEAD = 14 + 20 + 8

PCAP_LINKTYPE_ETHERNET = 1


def ipv4_checksum(header: bytes) -> int:
    total = sum(struct.unpack(f"!{len(header) // 2}H", header))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def frame(
    payload: bytes,
    *,
    eth_src: bytes,
    eth_dst: bytes,
    ip_src: bytes,
    ip_dst: bytes,
    sport: int,
    dport: int,
    ident: int,
    ttl: int = TTL,
    udp_checksum: int = 0,
) -> bytes:
    """Ethernet/IPv4 (no options)/UDP around ``payload``, with a correct IPv4 checksum."""
    udp_len = 8 + len(payload)
    ip = struct.pack(
        "!BBHHHBBH4s4s", 0x45, 0, 20 + udp_len, ident & 0xFFFF, 0, ttl, IPPROTO_UDP, 0, ip_src, ip_dst
    )
    ip = ip[:10] + struct.pack("!H", ipv4_checksum(ip)) + ip[12:]
    udp = struct.pack("!HHHH", sport, dport, udp_len, udp_checksum)
    return eth_dst + eth_src + struct.pack("!H", ETH_IPV4) + ip + udp + payload


def request_frame(payload: bytes, step: int) -> bytes:
    """The step's input as a worker (or the PS) sends it to the switch."""
    return frame(
        payload,
        eth_src=HOST_MAC,
        eth_dst=SWITCH_MAC,
        ip_src=HOST_IP,
        ip_dst=PS_IP,
        sport=HOST_PORT,
        dport=OLAF_PORT,
        ident=step,
        udp_checksum=0,
    )


def reply_frame(payload: bytes, step: int) -> bytes:
    """The frame the switch answers ``request_frame(..., step)`` with, carrying ``payload``."""
    return frame(
        payload,
        eth_src=SWITCH_MAC,
        eth_dst=HOST_MAC,
        ip_src=PS_IP,
        ip_dst=HOST_IP,
        sport=OLAF_PORT,
        dport=HOST_PORT,
        ident=step,
        udp_checksum=0,
    )


def udp_payload(frame_bytes: bytes) -> bytes:
    """The UDP payload of a frame built like ``frame`` (IPv4 without options)."""
    (udp_len,) = struct.unpack("!H", frame_bytes[38:40])
    return frame_bytes[FRAME_OVERHEAD : FRAME_OVERHEAD - 8 + udp_len]


def is_valid_model(payload: bytes) -> bool:
    """A MODEL the queue accepts: the P4 program forwards it by LPM instead of answering."""
    return len(payload) >= HEADER_LEN and payload[0] >> 4 == VERSION and payload[0] & 0xF == MsgType.MODEL


# -- vectors -------------------------------------------------------------------------


@dataclass(frozen=True)
class Vector:
    path: Path
    config: dict
    steps: list[tuple[bytes, bytes | None]]

    @property
    def name(self) -> str:
        return self.path.stem


def load_vector(path: Path) -> Vector:
    data = json.loads(path.read_text())
    steps = []
    for i, step in enumerate(data["steps"]):
        if "in" not in step:
            raise ValueError(f"{path.name}: step {i} has no 'in'")
        out = step.get("out")
        steps.append((bytes.fromhex(step["in"]), None if out is None else bytes.fromhex(out)))
    return Vector(path, data["config"], steps)


def vector_files() -> list[Path]:
    """Every shared vector file, those in tests/vectors/rtl_pending/ (the cluster_quota
    files the RTL cannot replay yet) included: the P4 programs replay them all."""
    from tests.vectors.generate import all_vector_files

    return all_vector_files(VECTORS_DIR)


def expected_frames(vector: Vector) -> list[bytes]:
    """What port 0 must emit, in order: one reply frame per step whose ``out`` is set."""
    return [reply_frame(out, i) for i, (_, out) in enumerate(vector.steps) if out is not None]


def config_defines(config: dict, values: int = 64) -> list[str]:
    """p4c ``-D`` flags that make olaf_config's default action the vector's config."""
    mode = config.get("mode", "olaf")
    mode_value = Mode[mode.upper()].value if isinstance(mode, str) else int(mode)
    if config.get("values", values) != values:
        raise ValueError(f"the P4 program is compiled for V = {values}")
    pairs = {
        "OLAF_DEFAULT_MODE": mode_value,
        "OLAF_DEFAULT_THRESHOLD": int(config["threshold"]),
        "OLAF_DEFAULT_CONGESTION_THRESHOLD": int(config["congestion_threshold"]),
        "OLAF_DEFAULT_FRAC_BITS": int(config["frac_bits"]),
        "OLAF_DEFAULT_CAPACITY": int(config["capacity"]),
        "OLAF_DEFAULT_MAX_CLUSTERS": int(config["max_clusters"]),
        "OLAF_DEFAULT_MAX_BLOCKS": int(config["max_blocks"]),
        # No cluster_quota in a file means capacity (no limit), as in QueueConfig.
        "OLAF_DEFAULT_CLUSTER_QUOTA": int(config.get("cluster_quota", config["capacity"])),
        # No feedback in a file means revision 2: the files written before revision 3
        # existed pin the global occupancy on every ACK.
        "OLAF_DEFAULT_FEEDBACK": int(config.get("feedback", 2)),
    }
    return [f"-D{k}={v}" for k, v in pairs.items()]


# -- pcap ------------------------------------------------------------------------------


def write_pcap(path: Path, frames: list[bytes], linktype: int = PCAP_LINKTYPE_ETHERNET) -> None:
    """Classic little-endian pcap; timestamps 1 us apart keep bmv2's replay order."""
    out = [struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, linktype)]
    for i, f in enumerate(frames):
        out.append(struct.pack("<IIII", 1, i, len(f), len(f)) + f)
    path.write_bytes(b"".join(out))


def read_pcap(path: Path) -> list[bytes]:
    """Frames of a classic pcap file (either byte order); a partial last record is ignored."""
    data = path.read_bytes() if path.exists() else b""
    if len(data) < 24:
        return []
    magic = data[:4]
    if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1"):
        endian = "<"
    elif magic in (b"\xa1\xb2\xc3\xd4", b"\xa1\xb2\x3c\x4d"):
        endian = ">"
    else:
        raise ValueError(f"{path}: not a pcap file")
    frames = []
    at = 24
    while at + 16 <= len(data):
        _, _, caplen, _ = struct.unpack(endian + "IIII", data[at : at + 16])
        if at + 16 + caplen > len(data):
            break
        frames.append(data[at + 16 : at + 16 + caplen])
        at += 16 + caplen
    return frames


# -- bmv2 ------------------------------------------------------------------------------

def cli_env() -> dict[str, str]:
    """Environment for simple_switch_CLI: a relocated bmv2 (the .p4tools bundle) keeps its
    Python modules in lib/python3*/site-packages beside bin/, which the CLI must find."""
    env = dict(os.environ)
    cli = shutil.which("simple_switch_CLI")
    if cli is not None:
        extra = sorted(Path(cli).resolve().parent.parent.glob("lib/python3*/site-packages"))
        if extra:
            paths = [str(extra[-1]), env.get("PYTHONPATH", "")]
            env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    return env


class SwitchNotUp(RuntimeError):
    """simple_switch_CLI could not reach the switch's Thrift server (yet)."""


def run_cli(thrift_port: int, commands: list[str], timeout: float = 60.0) -> list[str]:
    """Run simple_switch_CLI commands against a running switch; one answer per command.

    The CLI exits 0 even when a command fails, so an answer saying "Error" raises.
    """
    result = subprocess.run(
        ["simple_switch_CLI", "--thrift-port", str(thrift_port)],
        input="\n".join(commands) + "\n",
        capture_output=True,
        text=True,
        env=cli_env(),
        timeout=timeout,
        check=False,
    )
    if "Could not connect" in result.stdout + result.stderr:
        raise SwitchNotUp(f"no Thrift server on port {thrift_port}")
    # Each command's answer follows its prompt, and some (set_queue_depth) answer nothing:
    # cut the transcript at the prompts, the last of which met the end of the input.
    answers = [a.strip() for a in result.stdout.split("RuntimeCmd: ")[1:-1]]
    failed = [a for a in answers if "Error" in a]
    if result.returncode != 0 or failed or len(answers) != len(commands):
        detail = failed or result.stdout[-2000:]
        raise RuntimeError(f"simple_switch_CLI failed: {detail}\n{result.stderr[-2000:]}")
    return answers


@dataclass
class SwitchState:
    """A switch's registers (every cell) and packet counters, by P4Runtime name."""

    registers: dict[str, list[int]]
    counters: dict[str, list[int]]


def program_objects(program_json: Path) -> tuple[dict[str, int], dict[str, int]]:
    """(register name -> size, counter name -> size) as the compiled bmv2 JSON declares them."""
    program = json.loads(program_json.read_text())
    registers = {r["name"]: r["size"] for r in program["register_arrays"]}
    counters = {c["name"]: c["size"] for c in program["counter_arrays"] if not c.get("is_direct")}
    return registers, counters


def read_state(thrift_port: int, program_json: Path) -> SwitchState:
    """Every register cell and indirect counter of the running program, over Thrift."""
    registers, counters = program_objects(program_json)
    commands = [f"register_read {name}" for name in registers]
    commands += [f"counter_read {name} {i}" for name, size in counters.items() for i in range(size)]
    answers = iter(run_cli(thrift_port, commands))
    regs = {}
    for name in registers:
        # "OlafIngress.reg_x= 1, 2, 3"
        regs[name] = [int(x) for x in next(answers).split("=", 1)[1].split(",")]
    counts: dict[str, list[int]] = {}
    for name, size in counters.items():
        # "OlafIngress.outcome_counter[5]= (1733 bytes, 9 packets)"
        counts[name] = [int(next(answers).rsplit("bytes, ", 1)[1].split()[0]) for _ in range(size)]
    return SwitchState(regs, counts)


@dataclass
class Bmv2Run:
    """What simple_switch did with one replay."""

    outputs: list[list[bytes]]
    """Frames out of each port, by port number."""
    state: SwitchState | None

    @property
    def port0(self) -> list[bytes]:
        return self.outputs[0]

    @property
    def port1(self) -> list[bytes]:
        return self.outputs[1]


BMV2_EGRESS_QUEUE_DEPTH = 64
"""simple_switch's default egress queue depth, in packets (``egress_buffers`` in
targets/simple_switch/simple_switch.cpp)."""


def run_simple_switch(
    program_json: Path,
    work_dir: Path,
    port0_in: list[bytes],
    expect: int,
    timeout: float = 120.0,
    read_back: bool = False,
    ports: int = 2,
    expect_other: dict[int, int] | None = None,
    commands: list[str] | None = None,
    start_delay: int = 3,
) -> Bmv2Run:
    """Replay frames into port 0 of simple_switch in pcap-file mode (ports 0..ports-1).

    Waits until ``expect`` frames have come out of port 0 and ``expect_other[p]`` out of
    each other port p (or ``timeout``), then, with ``read_back``, reads every register and
    counter over Thrift while the switch still runs. The switch gets its own free Thrift
    port, so replays can run side by side (a port taken between choosing and binding it
    means another try with another port), and is stopped by its own PID. Callers that
    need the state to be final make the last expected frame the answer to the last input
    (see ``replay_on_bmv2``).

    ``commands`` (simple_switch_CLI lines, e.g. table entries) are run before any packet
    is read: the switch is told to wait ``start_delay`` s before reading its files, and a
    replay whose commands took longer than that raises rather than run half-configured.

    simple_switch drops, silently, what finds a port's egress queue full (64 packets), and
    its egress thread can fall that far behind the pcap reader on a loaded machine. A
    replay of more frames than that first makes every egress queue deep enough to hold
    them all, so no reply is lost to the emulator's scheduling.
    """
    if len(port0_in) > BMV2_EGRESS_QUEUE_DEPTH:
        commands = [f"set_queue_depth {len(port0_in)}", *(commands or [])]
    for _ in range(3):
        try:
            return _run_once(program_json, work_dir, port0_in, {0: expect, **(expect_other or {})}, timeout,
                             read_back, ports, commands, start_delay if commands else 0)
        except ThriftPortTaken:
            continue
    raise RuntimeError("simple_switch found its Thrift port taken three times")


class ThriftPortTaken(RuntimeError):
    """The free port chosen for simple_switch's Thrift server was taken before it bound it."""


THRIFT_UP = "Thrift server was started"


def _run_once(
    program_json: Path,
    work_dir: Path,
    port0_in: list[bytes],
    wanted: dict[int, int],
    timeout: float,
    read_back: bool,
    ports: int,
    commands: list[str] | None,
    delay: int,
) -> Bmv2Run:
    work_dir.mkdir(parents=True, exist_ok=True)
    write_pcap(work_dir / "port0_in.pcap", port0_in)
    for port in range(ports):
        if port:
            write_pcap(work_dir / f"port{port}_in.pcap", [])
        # A previous run's output would be counted before the switch truncates it.
        (work_dir / f"port{port}_out.pcap").unlink(missing_ok=True)
    thrift_port = free_tcp_port()
    interfaces = [arg for port in range(ports) for arg in ("-i", f"{port}@port{port}")]
    log_path = work_dir / "simple_switch.log"
    log = log_path.open("w")
    started = time.monotonic()
    # -L info logs "Thrift server was started" once the switch owns its port (and, per
    # packet, only errors): the CLI then talks to this switch and no other.
    # The notifications socket defaults to ipc:///tmp/bmv2-0-notifications.ipc, which any
    # other simple_switch on the machine (device 0) may hold: each replay gets its own,
    # named by its Thrift port (which no other running switch holds) and kept short, since
    # a Unix socket path has at most 107 bytes (nanomsg aborts beyond).
    notifications_path = Path(tempfile.gettempdir()) / f"olaf-replay-{thrift_port}.ipc"
    notifications = f"ipc://{notifications_path}"
    proc = subprocess.Popen(
        ["simple_switch", "--use-files", str(delay), "--thrift-port", str(thrift_port), "--log-console",
         "--notifications-addr", notifications, "-L", "info", *interfaces, str(program_json)],
        cwd=work_dir,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    state = None
    try:
        deadline = started + timeout

        def exited() -> bool:
            if proc.poll() is None:
                return False
            if "Could not bind" in log_path.read_text():
                raise ThriftPortTaken(str(thrift_port))
            raise RuntimeError(f"simple_switch exited with {proc.returncode}: see {log_path}")

        def thrift_up() -> bool:
            return THRIFT_UP in log_path.read_text()

        while not thrift_up() and not exited():
            if time.monotonic() > deadline:
                raise RuntimeError(f"simple_switch did not start its Thrift server: see {log_path}")
            time.sleep(0.05)
        if commands:
            run_cli(thrift_port, commands)
            if time.monotonic() - started >= delay:
                raise RuntimeError(f"the CLI commands took over {delay} s: rerun with a larger start_delay")
        while time.monotonic() < deadline and not exited():
            if all(len(read_pcap(work_dir / f"port{p}_out.pcap")) >= n for p, n in wanted.items()):
                break
            time.sleep(0.05)
        if read_back and not exited():
            state = read_state(thrift_port, program_json)
    finally:
        stop_process(proc)
        log.close()
        notifications_path.unlink(missing_ok=True)
    return Bmv2Run([read_pcap(work_dir / f"port{p}_out.pcap") for p in range(ports)], state)


def end_marker(vector: Vector) -> bytes:
    """An UPDATE the queue answers without touching its registers: well-formed but with
    the wrong frac_bits, so it is ACKed as DROPPED_INVALID. Appended to a replay, its
    answer is the last frame out; once it is out, simple_switch (one ingress thread, one
    FIFO egress queue per port) has finished with every earlier packet, answered or not,
    so the state read next is final."""
    frac_bits = (int(vector.config["frac_bits"]) + 1) % 32
    return olaf_message(int(vector.config["values"]), msg_type=MsgType.UPDATE, frac_bits=frac_bits, seq=0xE0D)


@dataclass
class Replay:
    """A vector file (plus its end marker) through simple_switch and through the reference."""

    got: list[bytes]
    expected: list[bytes]
    port1: list[bytes]
    state: SwitchState
    reference: Any


CONFIG_TABLE = "OlafIngress.olaf_config"


def configured_program(program_json: Path, config: dict, out: Path) -> Path:
    """A copy of the compiled program whose olaf_config default entry is ``config``.

    This is the JSON p4c writes when the config is compiled in with ``config_defines``
    (``test_configured_program_equals_compiling_the_config`` checks it): only the default
    entry's action data differs. It spares one compile per vector config.
    """
    program = json.loads(program_json.read_text())
    params = {a["id"]: [d["name"] for d in a["runtime_data"]] for a in program["actions"]}
    pairs = dict(p[2:].split("=", 1) for p in config_defines(config))
    tables = [t for pipe in program["pipelines"] for t in pipe["tables"] if t["name"] == CONFIG_TABLE]
    if len(tables) != 1:
        raise ValueError(f"{program_json}: no single {CONFIG_TABLE}")
    entry = tables[0]["default_entry"]
    data = []
    for name in params[entry["action_id"]]:
        value = int(pairs[f"OLAF_DEFAULT_{name.upper()}"])
        if value < 0:
            raise ValueError(f"{name} = {value}: the configured values are not negative")
        data.append(hex(value))
    entry["action_data"] = data
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(program, indent=4))
    return out


def compiled_program(build_dir: Path, main: Path = P4_MAIN) -> Path:
    """``main`` compiled with its default config into ``build_dir`` (once)."""
    compiled = build_dir / "compiled" / "olaf.json"
    return compiled if compiled.exists() else compile_p4(compiled.parent, main=main)


def replay_on_bmv2(
    vector: Vector, build_dir: Path, main: Path = P4_MAIN, program_config: dict | None = None
) -> Replay:
    """Compile ``main`` (once per ``build_dir``), give it the vector's config (or
    ``program_config``), replay the vector's inputs and the end marker, and read the
    final registers and counters.

    ``expected`` is the vector's reply frames then the reference queue's answer to the
    marker; ``reference`` is the reference queue after the same inputs.
    """
    from worker_transport.codec import decode, encode

    compiled = compiled_program(build_dir, main)
    config = vector.config if program_config is None else program_config
    run_dir = Path(tempfile.mkdtemp(prefix=f"run_{vector.name}_", dir=build_dir))
    program = configured_program(compiled, config, run_dir / "olaf.json")
    marker = end_marker(vector)
    payloads = [payload for payload, _ in vector.steps] + [marker]
    queue = reference_queue_for(vector.config, int(vector.config["values"]))
    responses, source, _ = queue.process(decode(payloads, queue.config.values))
    answers = encode(responses)
    outs = [o for _, o in vector.steps if o is not None]
    if source.tolist()[-1] != len(vector.steps) or answers[:-1] != outs:
        raise AssertionError(f"{vector.name}: the reference queue no longer produces this file's answers")
    expected = [*expected_frames(vector), reply_frame(answers[-1], len(vector.steps))]
    inputs = [request_frame(payload, i) for i, payload in enumerate(payloads)]
    run = run_simple_switch(program, run_dir, inputs, len(expected), read_back=True)
    assert run.state is not None
    return Replay(run.port0, expected, run.port1, run.state, queue)


def _as_int32(cell: int) -> int:
    """A 32-bit register cell (bmv2 holds the unsigned number of its bits) as the int32 the
    reference queue keeps."""
    return cell - (1 << 32) if cell >> 31 else cell


def state_differences(switch: SwitchState, queue: Any) -> list[str]:
    """Where the P4 program's registers and counters disagree with the reference queue."""
    from dataplane.queue import SLOT_FIELDS

    regs = switch.registers
    counters = switch.counters
    cfg = queue.config
    diffs = []

    def check(what: str, got: object, want: object) -> None:
        if got != want:
            diffs.append(f"{what}: P4 {got!r} != reference {want!r}")

    check("occupied", regs["OlafIngress.reg_occupied"][0], queue.occupied)
    check("read_ptr", regs["OlafIngress.reg_read_ptr"][0], queue.read_ptr)
    check("write_ptr", regs["OlafIngress.reg_write_ptr"][0], queue.write_ptr)
    check("active_clusters", regs["OlafIngress.reg_active_clusters"][0], queue.active_clusters)
    clusters = regs["OlafIngress.reg_cluster_count"]
    check("cluster_count", clusters[: cfg.max_clusters], queue.cluster_count)
    check("cluster_count beyond max_clusters", [c for c in clusters[cfg.max_clusters :] if c], [])
    index = {}
    for key, slot in enumerate(queue.index):
        if slot >= 0:
            cluster, block = divmod(key, cfg.max_blocks)
            index[(cluster << 10) | block] = slot + 1
    p4_index = {k: v for k, v in enumerate(regs["OlafIngress.reg_index"]) if v}
    check("index", p4_index, index)
    for k in range(queue.occupied):
        s = (queue.read_ptr + k) % cfg.capacity
        for name in SLOT_FIELDS:
            got = regs[f"OlafIngress.reg_slot_{name}"][s]
            check(f"slot {s} {name}", _as_int32(got) if name == "reward" else got, queue.slots[name][s])
        values = regs["OlafIngress.reg_values"][s * cfg.values : (s + 1) * cfg.values]
        check(f"slot {s} values", [_as_int32(v) for v in values], queue.values[s].tolist())
    outcomes = queue.counters.outcomes
    outcome_counter = counters["OlafIngress.outcome_counter"]
    check("outcome_counter", outcome_counter[: len(outcomes)], outcomes)
    check("outcome_counter beyond the outcomes", [c for c in outcome_counter[len(outcomes) :] if c], [])
    check("msg_type_counter", counters["OlafIngress.msg_type_counter"], queue.counters.msg_types)
    return diffs


# -- random scenarios for another V (the TNA program's V = 32) ---------------------------------

P4_TNA_MAIN = REPO / "p4" / "tna" / "olaf_tna.p4"
TNA_VALUES = 32


def olaf_message(values: int, data: list[int] | None = None, **fields: int) -> bytes:
    """One OLAF datagram; ``values`` int32 values follow (``num_values`` defaults to it)."""
    from worker_transport.codec import Batch, encode

    batch = Batch.zeros(1, values)
    header = {"version": 1, "agg_count": 1, "frac_bits": 16, "num_values": values, **fields}
    for name, value in header.items():
        batch.headers[name] = value
    if data is not None:
        batch.values[0, : len(data)] = data
    return encode(batch)[0]


def random_scenario(seed: int, values: int, steps: int, config: dict) -> Vector:
    """Random traffic (every rule and every kind of invalid input) and the reference
    queue's answers, in the shared vector form, for a V the shared files do not use."""
    import numpy as np

    from worker_transport.codec import decode, encode

    rng = np.random.default_rng(seed)
    payloads: list[bytes] = []
    for step in range(steps):
        kind = rng.choice(["update"] * 8 + ["pull"] * 4 + ["invalid", "model"])
        if kind == "pull":
            payloads.append(olaf_message(values, msg_type=MsgType.PULL, num_values=0)[:HEADER_LEN])
            continue
        worker = int(rng.integers(0, 4))
        update = {
            "msg_type": MsgType.UPDATE,
            "cluster_id": int(rng.integers(0, 3)),
            "worker_id": worker,
            "block_id": int(rng.integers(0, 3)),
            "agg_count": int(rng.choice([1, 1, 1, 2, 65535])),
            "seq": step,
            "model_version": int(rng.integers(0, 2**32)),
            "reward": int(rng.choice([-1, 1]) * rng.integers(0, 3 * 65536)),
            "gen_time_us": int(rng.integers(0, 2**32)),
            "contributors": 1 << (worker % 32),
            "data": rng.integers(-(2**31), 2**31, size=values).tolist(),
        }
        if kind == "model":
            payloads.append(olaf_message(values, **{**update, "msg_type": MsgType.MODEL}))
            continue
        if kind == "update":
            payloads.append(olaf_message(values, **update))
            continue
        kinds = ["short", "version", "type", "pull", "host", "length", "frac", "cluster", "block"]
        bad = str(rng.choice(kinds))
        message = olaf_message(values, **update)
        if bad == "short":
            message = message[: int(rng.integers(0, HEADER_LEN))]
        elif bad == "version":
            message = bytes([0x21]) + message[1:]
        elif bad == "type":
            message = bytes([0x10 | int(rng.choice([0, 7, 15]))]) + message[1:]
        elif bad == "pull":
            message = olaf_message(values, msg_type=MsgType.PULL, num_values=1)[: HEADER_LEN + 4]
        elif bad == "host":
            message = olaf_message(values, **{**update, "msg_type": int(rng.choice([2, 4, 5]))})
        elif bad == "length":
            message = olaf_message(values, **{**update, "num_values": values // 2})[: HEADER_LEN + 2 * values]
        elif bad == "frac":
            message = olaf_message(values, **{**update, "frac_bits": 8})
        elif bad == "cluster":
            message = olaf_message(values, **{**update, "cluster_id": config["max_clusters"] + 1})
        else:
            message = olaf_message(values, **{**update, "block_id": config["max_blocks"]})
        payloads.append(message)
    queue = reference_queue_for(config, values)
    responses, source, _ = queue.process(decode(payloads, values))
    outs: list[bytes | None] = [None] * len(payloads)
    for i, out in zip(source.tolist(), encode(responses), strict=True):
        outs[i] = out
    name = Path(f"random_v{values}_seed{seed}.json")
    return Vector(name, {**config, "values": values}, list(zip(payloads, outs, strict=True)))


def reanswered(vector: Vector, config: dict) -> Vector:
    """``vector``'s inputs under another ``config`` (e.g. the other feedback revision), with
    the reference queue's answers to them: a file's traffic replayed with a setting the
    file does not pin."""
    from worker_transport.codec import decode, encode

    values = int(config.get("values", vector.config["values"]))
    payloads = [payload for payload, _ in vector.steps]
    responses, source, _ = reference_queue_for(config, values).process(decode(payloads, values))
    outs: list[bytes | None] = [None] * len(payloads)
    for i, out in zip(source.tolist(), encode(responses), strict=True):
        outs[i] = out
    return Vector(vector.path, {**config, "values": values}, list(zip(payloads, outs, strict=True)))


def reference_queue_for(c: dict, values: int) -> Any:
    from dataplane.queue import OlafQueue, QueueConfig

    return OlafQueue(
        QueueConfig(
            capacity=c["capacity"],
            values=values,
            max_clusters=c["max_clusters"],
            max_blocks=c["max_blocks"],
            frac_bits=c["frac_bits"],
            mode=Mode[c["mode"].upper()],
            threshold=c["threshold"],
            congestion_threshold=c["congestion_threshold"],
            cluster_quota=c.get("cluster_quota"),
            # Absent means revision 2, as in the vector files (tests/vectors/README.md).
            feedback=c.get("feedback", 2),
        )
    )


TNA_UTIL_LOOKUPS = {"OlafIngress.util_lookup": "set_util", "OlafIngress.share_lookup": "set_share"}
"""The TNA program's division tables and their actions: the controller writes x ->
floor(255 * x / capacity) for x = 0..capacity into each (p4/tna/feedback.p4)."""


def fill_util_lookups(switch: Any, capacity: int) -> None:
    """Write the TNA program's division tables as its controller does."""
    for table, action in TNA_UTIL_LOOKUPS.items():
        for x in range(capacity + 1):
            switch.add_entry(table, (x,), action, [255 * x // capacity])


def replay_on_tna_p4sim(
    vector: Vector, program_config: dict | None = None, main: Path = P4_TNA_MAIN
) -> tuple[list[bytes], list[bytes], Any]:
    """Run a V = 32 vector through p4/tna/olaf_tna.p4, interpreted, with util_lookup and
    share_lookup filled as the controller fills them, and olaf_config's default the vector's config (or
    ``program_config``). Frames are compared up to the IPv4 total length: Tofino cannot
    cut the unparsed payload of a BAD_LENGTH UPDATE from its ACK."""
    config = vector.config if program_config is None else program_config
    defines = dict(d[2:].split("=", 1) for d in config_defines(config, TNA_VALUES))
    switch = p4sim.Switch(main, defines)
    fill_util_lookups(switch, vector.config["capacity"])
    got: list[bytes] = []
    for i, (payload, _) in enumerate(vector.steps):
        for port, out in switch.process(request_frame(payload, i), ingress_port=0):
            if port == 0:
                (total_len,) = struct.unpack("!H", out[16:18])
                got.append(out[: 14 + total_len])
    return got, expected_frames(vector), switch
