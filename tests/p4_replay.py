"""Framing of the shared packet vectors for targets that see whole frames (bmv2).

A vector step's ``in`` is a UDP payload; here it becomes an Ethernet/IPv4/UDP frame
from a worker to the PS address on UDP port 20300, and the step's ``out`` becomes the
frame the P4 program must send back: addresses and ports swapped, IPv4 total length,
UDP length and IPv4 checksum for the new payload, UDP checksum 0, TTL and IPv4
identification as received. Frames are built with ``struct`` rather than scapy so that
every byte is decided here, and compared byte for byte.

Also: a minimal pcap reader/writer (bmv2's ``--use-files`` mode) and the driver that
compiles ``p4/olaf.p4`` with p4c and replays a vector file through ``simple_switch``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import struct
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from worker_transport.protocol import HEADER_LEN, OLAF_PORT, VERSION, Mode, MsgType

REPO = Path(__file__).resolve().parent.parent
P4_MAIN = REPO / "p4" / "olaf.p4"
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
    return sorted(VECTORS_DIR.glob("*.json"))


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


def p4c_command() -> list[str] | None:
    """How to invoke the v1model/bmv2 compiler here, or None when it is not installed."""
    if shutil.which("p4c"):
        return ["p4c", "--target", "bmv2", "--arch", "v1model"]
    if shutil.which("p4c-bm2-ss"):
        return ["p4c-bm2-ss", "--arch", "v1model"]
    return None


def missing_tools() -> str | None:
    """Why the bmv2 replay cannot run here, or None when it can."""
    missing = []
    if p4c_command() is None:
        missing.append("p4c (or p4c-bm2-ss)")
    if not shutil.which("simple_switch"):
        missing.append("simple_switch")
    return None if not missing else "not on PATH: " + ", ".join(missing)


def compile_p4(out_dir: Path, defines: list[str] | None = None, p4info: Path | None = None) -> Path:
    """Compile p4/olaf.p4 for bmv2; returns the JSON. Raises with p4c's output on failure."""
    base = p4c_command()
    if base is None:
        raise RuntimeError("p4c is not installed")
    out_dir.mkdir(parents=True, exist_ok=True)
    cmd = [*base, *(defines or [])]
    if p4info is not None:
        cmd += ["--p4runtime-files", str(p4info)]
    if base[0] == "p4c":
        cmd += ["-o", str(out_dir), str(P4_MAIN)]
        produced = out_dir / "olaf.json"
    else:
        produced = out_dir / "olaf.json"
        cmd += ["-o", str(produced), str(P4_MAIN)]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    if result.returncode != 0 or not produced.exists():
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{result.stdout}\n{result.stderr}")
    return produced


def run_simple_switch(
    program_json: Path, work_dir: Path, port0_in: list[bytes], expect: int, timeout: float = 60.0
) -> tuple[list[bytes], list[bytes]]:
    """Replay frames into port 0 of simple_switch in pcap-file mode.

    Waits until ``expect`` frames have come out of port 0 (then a short grace period
    for any extra ones) or ``timeout``; returns (port 0 output, port 1 output). The
    switch is stopped by its own PID.
    """
    work_dir.mkdir(parents=True, exist_ok=True)
    write_pcap(work_dir / "port0_in.pcap", port0_in)
    write_pcap(work_dir / "port1_in.pcap", [])
    log = (work_dir / "simple_switch.log").open("w")
    proc = subprocess.Popen(
        [
            "simple_switch",
            "--use-files",
            "1",
            "--thrift-port",
            str(_free_port()),
            "-i",
            "0@port0",
            "-i",
            "1@port1",
            str(program_json),
        ],
        cwd=work_dir,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        started = time.monotonic()
        deadline = started + timeout
        while time.monotonic() < deadline and proc.poll() is None:
            # The switch waits 1 s (--use-files 1) before reading its input.
            ready = time.monotonic() - started > 2.0
            if ready and len(read_pcap(work_dir / "port0_out.pcap")) >= expect:
                time.sleep(1.0)  # room for any extra, unexpected packet
                break
            time.sleep(0.2)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()
        log.close()
    return read_pcap(work_dir / "port0_out.pcap"), read_pcap(work_dir / "port1_out.pcap")


def _free_port() -> int:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def replay_on_bmv2(vector: Vector, build_dir: Path) -> tuple[list[bytes], list[bytes]]:
    """Compile for the vector's config (cached per config) and replay its inputs.

    Returns (frames out of port 0, frames expected on port 0).
    """
    defines = config_defines(vector.config)
    key = "_".join(d.split("=")[1] for d in defines)
    program = build_dir / f"cfg_{key}" / "olaf.json"
    if not program.exists():
        compile_p4(program.parent, defines)
    inputs = [request_frame(payload, i) for i, (payload, _) in enumerate(vector.steps)]
    expected = expected_frames(vector)
    got, _ = run_simple_switch(program, build_dir / f"run_{vector.name}", inputs, len(expected))
    return got, expected


# -- the P4 source interpreter (p4/tools/p4sim.py) -------------------------------------------


def load_p4sim() -> Any:
    """p4/tools/p4sim.py as a module (p4/ is not a Python package), loaded once."""
    import sys

    name = "olaf_p4sim"
    if name in sys.modules:
        return sys.modules[name]
    path = REPO / "p4" / "tools" / "p4sim.py"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def replay_on_p4sim(vector: Vector, main: Path = P4_MAIN) -> tuple[list[bytes], list[bytes], Any]:
    """Run the vector through the P4 source itself, interpreted.

    Returns (frames out of port 0, frames expected on port 0, the interpreter's Switch
    with its final register and counter state).
    """
    p4sim = load_p4sim()
    defines = dict(d[2:].split("=", 1) for d in config_defines(vector.config))
    switch = p4sim.Switch(main, defines)
    got: list[bytes] = []
    for i, (payload, _) in enumerate(vector.steps):
        for port, out in switch.process(request_frame(payload, i), ingress_port=0):
            if port == 0:
                got.append(out)
    return got, expected_frames(vector), switch


def reference_queue(vector: Vector) -> Any:
    """The reference OlafQueue after processing every input of the vector."""
    from dataplane.queue import OlafQueue, QueueConfig
    from worker_transport.codec import decode

    c = vector.config
    config = QueueConfig(
        capacity=c["capacity"],
        values=c["values"],
        max_clusters=c["max_clusters"],
        max_blocks=c["max_blocks"],
        frac_bits=c["frac_bits"],
        mode=Mode[c["mode"].upper()] if isinstance(c["mode"], str) else Mode(c["mode"]),
        threshold=c["threshold"],
        congestion_threshold=c["congestion_threshold"],
    )
    queue = OlafQueue(config)
    queue.process(decode([payload for payload, _ in vector.steps], config.values))
    return queue


def _as_int32(cell: int) -> int:
    """A 32-bit register cell (bmv2 holds the unsigned number of its bits) as the int32 the
    reference queue keeps."""
    return cell - (1 << 32) if cell >> 31 else cell


def state_differences(switch: Any, queue: Any) -> list[str]:
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
    clusters = regs["OlafIngress.reg_cluster_count"][: cfg.max_clusters]
    check("cluster_count", clusters, queue.cluster_count)
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
    check("outcome_counter", counters["OlafIngress.outcome_counter"][: len(outcomes)], outcomes)
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
        )
    )


def replay_on_tna_p4sim(vector: Vector) -> tuple[list[bytes], list[bytes], Any]:
    """Run a V = 32 vector through p4/tna/olaf_tna.p4, interpreted, with util_lookup filled
    as the controller fills it. Frames are compared up to the IPv4 total length: Tofino
    cannot cut the unparsed payload of a BAD_LENGTH UPDATE from its ACK."""
    p4sim = load_p4sim()
    defines = dict(d[2:].split("=", 1) for d in config_defines(vector.config, TNA_VALUES))
    switch = p4sim.Switch(P4_TNA_MAIN, defines)
    capacity = vector.config["capacity"]
    for occupied in range(capacity + 1):
        switch.add_entry("OlafIngress.util_lookup", (occupied,), "set_util", [255 * occupied // capacity])
    got: list[bytes] = []
    for i, (payload, _) in enumerate(vector.steps):
        for port, out in switch.process(request_frame(payload, i), ingress_port=0):
            if port == 0:
                (total_len,) = struct.unpack("!H", out[16:18])
                got.append(out[: 14 + total_len])
    return got, expected_frames(vector), switch
