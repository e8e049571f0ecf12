"""Bench pieces for the Ethernet-shelled OlafQueue (``rtl/olaf_top.v``).

* host side: build and run ``olaf_top`` (shell + queue + AXI-Lite registers) per
  simulator, in its own build directory;
* traffic: real Ethernet/IPv4/UDP frames built with scapy around the queue benches'
  OLAF payloads, plus the frames a port also sees (MODEL, other UDP, ARP, VLAN,
  malformed headers);
* reference: the software switch's interface mode, ``EthernetSwitch.handle``, fed one
  frame at a time so that each frame's expected output is known;
* simulator side: ``EthBench`` drives the MAC receive side (no tready, tuser = bad
  frame), collects the MAC transmit and forward outputs, and talks AXI-Lite.
"""

from __future__ import annotations

import random
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from queue_bench import (
    AxisProtocolChecker,
    pull_message,
    random_pauses,
    random_traffic,
    tb_values,
    update_message,
)
from rtl_sources import TOP_SOURCES
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.l2 import ARP, Dot1Q, Ether
from sim_runner import FPGA_DIR, MAX_BLOCKS, MAX_CAPACITY, MAX_CLUSTERS, TB_DIR, V, environment, simulator_env

from dataplane.ethernet import EthernetSwitch
from dataplane.forwarding import ForwardingTable
from dataplane.queue import OlafQueue, QueueConfig
from dataplane.switch import Pipeline
from worker_transport.protocol import OLAF_PORT, MsgType

TOPLEVEL = "olaf_top"
WIDTH = 64
RTL_SOURCES = TOP_SOURCES
"""olaf_top's sources (rtl_sources.py holds the list)."""
IN_PORT, FWD_PORT = 0, 1
"""Reference switch ports: the FPGA's MAC port, and where routed / flooded frames go."""
MIN_FRAME = 60
"""Ethernet minimum without FCS: a MAC delivers shorter frames padded to this."""

# AXI-Lite register map (fpga/README.md, "Ethernet shell and registers").
REG_ID, REG_CTRL, REG_MODE, REG_THRESHOLD = 0x000, 0x004, 0x008, 0x00C
REG_CONGESTION, REG_FRAC_BITS, REG_CAPACITY = 0x010, 0x014, 0x018
REG_MAX_CLUSTERS, REG_MAX_BLOCKS, REG_OCCUPIED, REG_FEEDBACK = 0x01C, 0x020, 0x024, 0x028
REG_PARAMS, REG_PARAMS2, REG_CLUSTER_QUOTA, REG_FEEDBACK_REV = 0x02C, 0x030, 0x034, 0x038
QUEUE_COUNTERS, SHELL_COUNTERS = 0x100, 0x200
CTRL_RESET, CTRL_FWD_OTHER = 0x1, 0x2
SHELL_COUNTER_NAMES = ("rx_frames", "rx_bad", "rx_overflow", "rx_runt", "rx_filtered",
                       "to_queue", "fwd_model", "fwd_other", "tx_answers", "answer_mismatch")


# ---------------------------------------------------------------- host side
def build_dir(simulator: str, values: int = V) -> Path:
    suffix = "" if values == V else f"_v{values}"
    return FPGA_DIR / f"sim_build_{simulator}_top_w{WIDTH}{suffix}"


def build(simulator: str, values: int = V) -> Path:
    from cocotb_tools.runner import get_runner

    out = build_dir(simulator, values)
    build_args = ["-CFLAGS", "-O1", "--x-assign", "0", "--x-initial", "0"] if simulator == "verilator" else []
    with environment(simulator_env(simulator)):
        get_runner(simulator).build(
            sources=RTL_SOURCES,
            hdl_toplevel=TOPLEVEL,
            parameters={"DATA_WIDTH": WIDTH, "V": values, "MAX_CAPACITY": MAX_CAPACITY,
                        "MAX_CLUSTERS": MAX_CLUSTERS, "MAX_BLOCKS": MAX_BLOCKS},
            build_args=build_args,
            build_dir=out,
            timescale=("1ns", "1ps"),
            log_file=out / "build.log",
        )
    return out


def run(simulator: str, module: str, *, values: int = V, testcases: Sequence[str] | None = None) -> None:
    """Run the cocotb tests of ``module`` (a file in fpga/tb) on the built ``olaf_top``."""
    from cocotb_tools.runner import get_results, get_runner

    if str(TB_DIR) not in sys.path:
        sys.path.insert(0, str(TB_DIR))
    out = build_dir(simulator, values)
    name = "_".join([module, *(testcases or [])])
    results = out / f"{name}.results.xml"
    with environment(simulator_env(simulator)):
        get_runner(simulator).test(
            test_module=module,
            hdl_toplevel=TOPLEVEL,
            hdl_toplevel_lang="verilog",
            testcase=list(testcases) if testcases else None,
            build_dir=out,
            test_dir=out,
            extra_env={"OLAF_TB_V": str(values)},
            timescale=("1ns", "1ps"),
            log_file=out / f"{name}.log",
            results_xml=str(results),
        )
    tests, failed = get_results(results)
    if failed or not tests:
        raise RuntimeError(f"{failed} of {tests} cocotb tests failed in {module}; see {out}")


# ---------------------------------------------------------------- traffic
@dataclass(frozen=True)
class Frame:
    """One frame as the MAC delivers it; ``bad`` is the MAC's tuser (FCS error)."""

    data: bytes
    bad: bool = False
    kind: str = "olaf"
    bad_beat: int | None = None
    """Beat carrying tuser for a bad frame; None: the tlast beat (where MACs flag FCS errors)."""

    def tuser(self, width: int = WIDTH) -> list[int] | int:
        """Per-byte tuser for cocotbext-axi (it drives a beat's tuser from its bytes)."""
        if not self.bad:
            return 0
        lanes = width // 8
        beats = -(-len(self.data) // lanes)
        beat = beats - 1 if self.bad_beat is None else min(self.bad_beat, beats - 1)
        return [int(i // lanes == beat) for i in range(len(self.data))]


def pad(frame: bytes) -> bytes:
    return frame.ljust(MIN_FRAME, b"\0")


def olaf_frame(payload: bytes, host: int, *, ttl: int = 64, sport: int | None = None) -> bytes:
    """``payload`` from worker ``host`` to the switch's address, as Ether/IPv4/UDP."""
    frame = (
        Ether(src=f"02:00:00:00:01:{host:02x}", dst="02:00:00:00:00:fe")
        / IP(src=f"10.0.1.{host}", dst="10.0.0.254", ttl=ttl, id=0x1000 + host, tos=host & 0xFC)
        / UDP(sport=sport if sport is not None else 40000 + host, dport=OLAF_PORT)
        / payload
    )
    return pad(bytes(frame))


def model_frame(rng: random.Random) -> bytes:
    """A MODEL message (parameter server to workers) crossing the switch."""
    values = np.array([rng.randrange(-(2**31), 2**31) for _ in range(16)], np.int32)
    payload = bytearray(update_message(cluster=0, worker=0, block=0, reward=0, values=values))
    payload[0] = 0x10 | MsgType.MODEL
    frame = (Ether(src="02:00:00:00:00:99", dst="02:00:00:00:01:05")
             / IP(src="10.0.9.1", dst="10.0.1.5") / UDP(sport=OLAF_PORT, dport=OLAF_PORT) / bytes(payload))
    return pad(bytes(frame))


NON_OLAF_KINDS = ("ip_options", "udp_len_beyond_frame", "short_ipv4", "other_udp", "arp", "vlan", "tcp")
"""Kinds of ``other_frames`` that the software switch routes or floods rather than queues."""


def olaf_ipv4_sum(frame: bytes, payload_length: int) -> int:
    """One's-complement sum (unfolded) of the answer's IPv4 header, checksum field zero."""
    words = [int.from_bytes(frame[i:i + 2], "big") for i in range(14, 34, 2)]
    words[1] = 28 + payload_length
    words[5] = 0
    return sum(words)


def directed_frames(rng: random.Random, values: int = V) -> list[Frame]:
    """Frames aimed at the shell's corner cases (each answered or dropped by the queue
    exactly as the software switch does):

    * payload lengths 36..52: every lane the payload can end on, with and without
      trailer bytes beyond the UDP length; short payloads in frames a MAC would not
      pad;
    * both kinds of invalid PULL (num_values set; longer than 36 bytes);
    * an answer whose IPv4 checksum needs the second end-around carry;
    * bad frames flagged on the first, a middle and the last beat.
    """
    update = update_message(cluster=1, worker=3, block=2, reward=1 << 16,
                            values=np.arange(values, dtype=np.int32))
    frames = []
    for length in range(36, 53):
        body = update[:length]                      # UPDATE with the wrong length: DROPPED_INVALID
        frames.append(Frame(olaf_frame(body, 2), kind=f"length_{length}"))
        trailer = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 12)))
        frames.append(Frame(olaf_frame(body, 2) + trailer, kind=f"length_{length}_trailer"))
    for length in (2, 6):                           # unpadded: the payload ends the frame early
        frames.append(Frame(olaf_frame(bytes(length), 2)[:42 + length], kind=f"unpadded_{length}"))
    pull = pull_message()
    frames.append(Frame(olaf_frame(pull[:13] + b"\x05" + pull[14:], 4), kind="pull_num_values"))
    frames.append(Frame(olaf_frame(pull + bytes(8), 4), kind="pull_too_long"))
    frame = Ether(olaf_frame(pull, 6))
    frame[IP].ttl, frame[IP].tos = 255, 0xFC         # a sum above 0x10000, so a carry can wrap
    frame[IP].id = 0
    total = olaf_ipv4_sum(bytes(frame), 36)
    frame[IP].id = next(i for i in range(1 << 16) if ((total + i) & 0xFFFF) + ((total + i) >> 16) > 0xFFFF)
    del frame[IP].chksum
    frames.append(Frame(pad(bytes(frame)), kind="checksum_double_carry"))
    bad = olaf_frame(update, 5)
    frames += [Frame(bad, bad=True, bad_beat=beat, kind="bad") for beat in (0, 7, None)]
    return frames


def other_frames(rng: random.Random) -> list[Frame]:
    """Non-OLAF and malformed frames a switch port sees, one of each kind."""
    pull = bytes(olaf_frame(b"\x13" + bytes(35), 7))
    ip_options = Ether() / IP(src="10.0.1.3", dst="10.0.0.254", options=b"\x01\x01\x01\x01") / UDP(
        sport=1, dport=OLAF_PORT) / (b"\x13" + bytes(35))
    long_udp = bytearray(pull)
    long_udp[38:40] = (len(pull) - 34 + 4).to_bytes(2, "big")   # UDP length beyond the frame
    short_ip = bytearray(pull[:30])                            # IPv4 ethertype, no full header
    other_udp = Ether() / IP(src="10.0.1.4", dst="10.0.2.1") / UDP(sport=5000, dport=5001) / bytes(
        rng.randrange(1, 200))
    return [
        Frame(pad(bytes(ip_options)), kind="ip_options"),
        Frame(bytes(long_udp), kind="udp_len_beyond_frame"),
        Frame(pad(bytes(short_ip)), kind="short_ipv4"),
        Frame(pad(bytes(other_udp)), kind="other_udp"),
        Frame(pad(bytes(Ether(dst="ff:ff:ff:ff:ff:ff") / ARP(pdst="10.0.0.254"))), kind="arp"),
        Frame(pad(bytes(Ether() / Dot1Q(vlan=5) / IP(dst="10.0.0.254") / UDP(dport=OLAF_PORT)
                        / (b"\x13" + bytes(35)))), kind="vlan"),
        Frame(pad(bytes(Ether() / IP(src="10.0.1.4", dst="10.0.2.1") / TCP(dport=OLAF_PORT))), kind="tcp"),
        Frame(bytes(rng.randrange(256) for _ in range(10)), kind="runt"),
        Frame(olaf_frame(bytes(10), 9), kind="olaf_short_payload"),   # padded: UDP length trims it
        Frame(olaf_frame(b"", 9), kind="olaf_empty_payload"),
    ]


def mixed_frames(rng: random.Random, count: int, *, frac_bits: int = 16, blocks: int = 6,
                 other_rate: float = 0.08, bad_rate: float = 0.03, values: int = V) -> list[Frame]:
    """OLAF traffic from 8 hosts (with malformed messages of every kind), MODEL frames,
    non-OLAF / malformed frames and bad (tuser) frames, mixed."""
    payloads = random_traffic(rng, count, blocks=blocks, values=values)
    frames: list[Frame] = []
    extras = other_frames(rng)
    for payload in payloads:
        if frac_bits != 16 and len(payload) > 14 and payload[0] == 0x11:
            payload = payload[:14] + bytes([frac_bits]) + payload[15:]
        roll = rng.random()
        if roll < other_rate:
            frames.append(rng.choice(extras))
        elif roll < other_rate + 0.03:
            frames.append(Frame(model_frame(rng), kind="model"))
        frame = olaf_frame(payload, rng.randrange(1, 9))
        if rng.random() < bad_rate:
            frames.append(Frame(frame, bad=True, kind="bad"))
        else:
            frames.append(Frame(frame))
    return frames


# ---------------------------------------------------------------- reference
@dataclass
class Expected:
    """What the FPGA must do with one frame."""

    answer: bytes | None = None        # frame on the MAC transmit side
    forward: bytes | None = None       # frame on the forward port (the input, unchanged)
    routed: bytes | None = None        # the software switch's routed copy of it


class ReferenceSwitch:
    """The software switch's interface mode without sockets: ``EthernetSwitch.handle``."""

    def __init__(self, config: QueueConfig, *, forward_other: bool = True) -> None:
        table = ForwardingTable()
        table.insert("0.0.0.0/0", FWD_PORT)
        # handle() needs the pipeline, the table and the port numbers, not open sockets.
        switch = EthernetSwitch.__new__(EthernetSwitch)
        switch.pipeline = Pipeline(OlafQueue(config))
        switch.table = table
        switch.sockets = {IN_PORT: None, FWD_PORT: None}
        switch.forwarded = 0
        switch.unrouted = 0
        self.switch = switch
        self.forward_other = forward_other

    @property
    def queue(self) -> OlafQueue:
        return self.switch.queue

    def expect(self, frame: Frame) -> Expected:
        if frame.bad:
            return Expected()
        out = self.switch.handle([frame.data], [IN_PORT])
        answers = [f for port, f in out if port == IN_PORT]
        routed = [f for port, f in out if port == FWD_PORT]
        assert len(answers) + len(routed) <= 1, "one frame in, at most one frame out"
        if answers:
            return Expected(answer=answers[0])
        if routed and (self.forward_other or frame.kind == "model"):
            return Expected(forward=frame.data, routed=routed[0])
        return Expected()


def same_but_routing(ours: bytes, routed: bytes) -> bool:
    """Equal except for what routing rewrites: source MAC, TTL, IPv4 checksum."""
    if len(ours) != len(routed):
        return False
    if ours[12:14] != b"\x08\x00":
        return ours == routed
    skip = set(range(6, 12)) | {22, 24, 25}
    return all(a == b for i, (a, b) in enumerate(zip(ours, routed, strict=True)) if i not in skip)


# ---------------------------------------------------------------- simulator side
class EthBench:
    """``olaf_top`` with clock, MAC source (no tready), answer and forward sinks, AXI-Lite."""

    def __init__(self, dut, seed: int = 1) -> None:  # noqa: ANN001 - cocotb handle
        import cocotb
        from cocotb.clock import Clock
        from cocotbext.axi import AxiLiteBus, AxiLiteMaster, AxiStreamBus, AxiStreamSink, AxiStreamSource

        self.dut = dut
        cocotb.start_soon(Clock(dut.clk, 4, unit="ns").start())
        self.mac_rx = AxiStreamSource(AxiStreamBus.from_prefix(dut, "s_mac"), dut.clk, dut.rst)
        # The stock sink: at 64 bits its per-byte loop costs little.
        sink = AxiStreamSink
        self.mac_tx = sink(AxiStreamBus.from_prefix(dut, "m_mac"), dut.clk, dut.rst)
        self.fwd = sink(AxiStreamBus.from_prefix(dut, "m_fwd"), dut.clk, dut.rst)
        self.axil = AxiLiteMaster(AxiLiteBus.from_prefix(dut, "s_axil"), dut.clk, dut.rst)
        for endpoint in (self.mac_rx, self.mac_tx, self.fwd, self.axil.write_if, self.axil.read_if):
            endpoint.log.setLevel("WARNING")
        # Both outputs, and both sides of the queue inside olaf_top.
        self.checkers = [AxisProtocolChecker(dut, prefix, prefix)
                         for prefix in ("m_mac", "m_fwd", "q_in", "q_out")]
        self.rng = random.Random(seed)
        self.values = tb_values()
        self.config = QueueConfig(values=self.values)
        self.forward_other = True
        self.reference = ReferenceSwitch(self.config)
        self.checked = 0
        dut.rst.value = 1

    async def reset(self) -> None:
        from cocotb.triggers import RisingEdge

        self.dut.rst.value = 1
        for _ in range(4):
            await RisingEdge(self.dut.clk)
        self.dut.rst.value = 0
        for _ in range(2):
            await RisingEdge(self.dut.clk)
        self.config = QueueConfig(values=self.values)
        self.forward_other = True
        self.reference = ReferenceSwitch(self.config)

    def random_gaps(self, busy: float) -> None:
        """tvalid gaps inside frames (a MAC may idle mid-frame) and tready gaps on both sinks."""
        self.mac_rx.set_pause_generator(random_pauses(self.rng, busy))
        self.mac_tx.set_pause_generator(random_pauses(self.rng, busy))
        self.fwd.set_pause_generator(random_pauses(self.rng, busy))

    async def configure(self, config: QueueConfig, *, forward_other: bool = True) -> None:
        """Write ``config`` over AXI-Lite with the datapath held in reset (CTRL.reset)."""
        from cocotb.triggers import RisingEdge

        ctrl_on = CTRL_FWD_OTHER if forward_other else 0
        await self.axil.write_dword(REG_CTRL, ctrl_on | CTRL_RESET)
        await self.axil.write_dword(REG_CAPACITY, config.capacity)
        await self.axil.write_dword(REG_MAX_CLUSTERS, config.max_clusters)
        await self.axil.write_dword(REG_MAX_BLOCKS, config.max_blocks)
        await self.axil.write_dword(REG_FRAC_BITS, config.frac_bits)
        await self.axil.write_dword(REG_CLUSTER_QUOTA, config.cluster_quota)
        await self.axil.write_dword(REG_FEEDBACK_REV, config.feedback)
        await self.set_runtime(int(config.mode), config.threshold, config.congestion_threshold)
        await self.axil.write_dword(REG_CTRL, ctrl_on)
        for _ in range(4):
            await RisingEdge(self.dut.clk)
        self.config = config
        self.forward_other = forward_other
        self.reference = ReferenceSwitch(config, forward_other=forward_other)

    async def set_runtime(self, mode: int, threshold: int, congestion_threshold: int) -> None:
        """Mode and thresholds: the controller changes these while traffic runs."""
        await self.axil.write_dword(REG_MODE, mode)
        await self.axil.write_dword(REG_THRESHOLD, threshold)
        await self.axil.write_dword(REG_CONGESTION, congestion_threshold)
        q = self.reference.queue
        q.mode, q.threshold, q.congestion_threshold = mode, threshold, congestion_threshold

    async def exchange(self, frames: Sequence[Frame], chunk: int = 8, timeout_cycles: int = 50_000) -> None:
        """Send ``frames`` back to back in chunks (a chunk never fills the shell's FIFOs)
        and check every output frame against the software switch's."""
        from cocotb.triggers import with_timeout
        from cocotbext.axi import AxiStreamFrame

        for start in range(0, len(frames), chunk):
            part = frames[start:start + chunk]
            expected = [self.reference.expect(f) for f in part]
            for frame in part:
                await self.mac_rx.send(AxiStreamFrame(frame.data, tuser=frame.tuser()))
            for index, (frame, want) in enumerate(zip(part, expected, strict=True)):
                where = f"frame {start + index} ({frame.kind})"
                if want.answer is not None:
                    got = bytes((await with_timeout(self.mac_tx.recv(), timeout_cycles * 4, "ns")).tdata)
                    assert got == want.answer, f"{where}: answer\n DUT {got.hex()}\n ref {want.answer.hex()}"
                if want.forward is not None:
                    got = bytes((await with_timeout(self.fwd.recv(), timeout_cycles * 4, "ns")).tdata)
                    assert got == want.forward, f"{where}: forwarded frame changed"
                    assert same_but_routing(got, want.routed), f"{where}: not what the switch routes"
            await with_timeout(self.mac_rx.wait(), timeout_cycles * 4, "ns")
            await self.settle()
            assert self.mac_tx.empty(), f"chunk at {start}: an answer the software switch does not give"
            assert self.fwd.empty(), f"chunk at {start}: a forwarded frame the software switch does not"
            self.check_protocol()
            self.checked += len(part)

    def check_protocol(self) -> None:
        """No AXI-Stream rule broken on any checked stream, with one documented exception:
        an empty UDP payload reaches the queue as a single tlast beat with tkeep 0 (the
        only way to hand it a zero-length message, which it counts SHORT as the
        reference does)."""
        for checker in self.checkers:
            if checker.name == "q_in":
                checker.violations = [v for v in checker.violations if "tkeep 0x0 on tlast" not in v]
            checker.check()

    async def settle(self, cycles: int = 100) -> None:
        from cocotb.triggers import RisingEdge

        for _ in range(cycles):
            await RisingEdge(self.dut.clk)

    async def read_counter(self, base: int, index: int) -> int:
        """A 64-bit counter: low word first (it snapshots the high word), then high."""
        low = await self.axil.read_dword(base + 8 * index)
        high = await self.axil.read_dword(base + 8 * index + 4)
        return high << 32 | low

    async def shell_counters(self) -> dict[str, int]:
        names = SHELL_COUNTER_NAMES
        return {name: await self.read_counter(SHELL_COUNTERS, i) for i, name in enumerate(names)}
