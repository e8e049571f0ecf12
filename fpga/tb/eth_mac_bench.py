"""``olaf_top`` against a MAC model: cocotbext-eth's ``EthMac`` on the shell's AXI-Stream MAC side.

``eth_bench.EthBench`` drives the MAC receive side with cocotbext-axi's stream source,
which may put beats back to back with no preamble or gap and take answers as fast as
the shell offers them. Here the MAC is cocotbext-eth's ``EthMac`` (by the author of
verilog-ethernet, whose MACs have this interface): on receive it paces every frame at
the line rate, with the preamble and the 12-byte inter-frame gap as idle cycles between
frames; on transmit it serialises at the line rate and asserts that a frame, once
started, never runs dry (a real MAC cannot pause mid-frame: the shell must feed it one
beat per cycle until ``tlast``).

The clock is 156.25 MHz and the MAC model runs at 10 Gbit/s: 64 bits per cycle, the
10GBASE-R MAC's AXI-Stream rate (verilog-ethernet's ``eth_mac_10g``). The frames are
the software switch's vectors (tests/vectors/) wrapped as Ethernet/IPv4/UDP by
``eth_bench.olaf_frame`` (scapy); every answer must be the software switch's
(``EthernetSwitch.handle``) byte for byte and carry the vector's expected payload.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from pathlib import Path

from eth_bench import EthBench, Frame, ReferenceSwitch, olaf_frame, same_but_routing
from queue_bench import AxisProtocolChecker, tb_values

from dataplane.queue import QueueConfig

CLOCK_NS = 6.4
"""156.25 MHz: 64 bits per cycle is 10 Gbit/s, the MAC model's line rate below."""
LINE_RATE = 10e9
IFG_BYTES = 12
VECTOR_DIR = Path(__file__).resolve().parents[2] / "tests" / "vectors"
UDP_PAYLOAD_OFFSET = 14 + 20 + 8
"""Ethernet, IPv4 without options, UDP: where the OLAF message starts in a frame."""


def vector_files() -> list[Path]:
    # rtl_pending/ too: the RTL has cluster_quota (tests/vectors/generate.py RTL_PENDING).
    files = [*VECTOR_DIR.glob("*.json"), *(VECTOR_DIR / "rtl_pending").glob("*.json")]
    return sorted(files, key=lambda f: f.name)


LONG_STEPS = 300
"""Steps taken from a long vector file (50_random_long has 3,000): a prefix keeps the file's
expected answers valid, and 300 steps of mixed traffic cost Icarus about 20 s here."""


def vector_frames(vector: dict, rng: random.Random,
                  limit: int = LONG_STEPS) -> list[tuple[Frame, bytes | None]]:
    """The first ``limit`` steps' payloads as frames from one of 8 worker hosts, each with the
    vector's answer payload."""
    steps = vector["steps"][:limit]
    return [(Frame(olaf_frame(bytes.fromhex(step["in"]), host=1 + rng.randrange(8))),
             None if step["out"] is None else bytes.fromhex(step["out"])) for step in steps]


class EthMacBench(EthBench):
    """``olaf_top`` with cocotbext-eth's ``EthMac`` on ``s_mac`` / ``m_mac``, a forward sink and AXI-Lite.

    EthBench's configure, settle, counter reads and protocol check are reused; only the MAC
    side differs, so ``__init__`` sets up what those methods use instead of EthBench's stream
    source and answer sink."""

    def __init__(self, dut, seed: int = 1) -> None:  # noqa: ANN001 - cocotb handle
        import cocotb
        from cocotb.clock import Clock
        from cocotbext.axi import AxiLiteBus, AxiLiteMaster, AxiStreamBus, AxiStreamSink
        from cocotbext.eth import EthMac

        self.dut = dut
        cocotb.start_soon(Clock(dut.clk, CLOCK_NS, unit="ns").start())
        self.mac = EthMac(
            tx_bus=AxiStreamBus.from_prefix(dut, "m_mac"), tx_clk=dut.clk, tx_rst=dut.rst,
            rx_bus=AxiStreamBus.from_prefix(dut, "s_mac"), rx_clk=dut.clk, rx_rst=dut.rst,
            ifg=IFG_BYTES, speed=LINE_RATE,
        )
        self.fwd = AxiStreamSink(AxiStreamBus.from_prefix(dut, "m_fwd"), dut.clk, dut.rst)
        self.axil = AxiLiteMaster(AxiLiteBus.from_prefix(dut, "s_axil"), dut.clk, dut.rst)
        for endpoint in (self.mac.rx, self.mac.tx, self.mac.rx.stream, self.mac.tx.stream, self.fwd,
                         self.axil.write_if, self.axil.read_if):
            endpoint.log.setLevel("WARNING")
        self.checkers = [AxisProtocolChecker(dut, prefix, prefix)
                         for prefix in ("m_mac", "m_fwd", "q_in", "q_out")]
        self.rng = random.Random(seed)
        self.values = tb_values()
        self.config = QueueConfig(values=self.values)
        self.forward_other = True
        self.reference = ReferenceSwitch(self.config)
        self.checked = 0
        self.answer_bytes = 0
        dut.rst.value = 1

    async def rx_done(self) -> None:
        """Until the MAC model has sent every queued frame (its ``wait()`` relies on an idle
        event that cocotbext-eth 0.1.28's receive loop never sets, so it is polled)."""
        from cocotb.triggers import RisingEdge

        rx = self.mac.rx
        while not (rx.empty() and rx.current_frame is None and rx.stream.idle()):
            await RisingEdge(self.dut.clk)

    def cycles(self, timeout_cycles: int) -> tuple[float, str]:
        return timeout_cycles * CLOCK_NS, "ns"

    async def exchange_mac(self, frames: Sequence[tuple[Frame, bytes | None]], chunk: int = 8,
                           timeout_cycles: int = 50_000) -> None:
        """Send ``frames`` through the MAC model in chunks (one chunk never fills the shell's
        FIFOs) and check every answer against the software switch and the vector's payload."""
        from cocotb.triggers import with_timeout
        from cocotbext.eth import EthMacFrame

        for start in range(0, len(frames), chunk):
            part = frames[start:start + chunk]
            expected = [self.reference.expect(frame) for frame, _ in part]
            for frame, _ in part:
                # The AXI-Stream side of a MAC carries no preamble and no FCS (the MAC adds and
                # strips them), so the frame goes in raw; the model adds the preamble time.
                await self.mac.rx.send(EthMacFrame.from_raw_payload(frame.data))
            for index, ((_, payload), want) in enumerate(zip(part, expected, strict=True)):
                where = f"frame {start + index}"
                if want.answer is not None:
                    got = bytes(await with_timeout(self.mac.tx.recv(), *self.cycles(timeout_cycles)))
                    assert got == want.answer, f"{where}: answer\n DUT {got.hex()}\n ref {want.answer.hex()}"
                    assert got[UDP_PAYLOAD_OFFSET:] == payload, f"{where}: not the vector's answer"
                    self.answer_bytes += len(got)
                else:
                    assert payload is None, f"{where}: the vector expects an answer the switch does not give"
                if want.forward is not None:
                    got = bytes((await with_timeout(self.fwd.recv(), *self.cycles(timeout_cycles))).tdata)
                    assert same_but_routing(got, want.routed), f"{where}: not what the switch routes"
            await with_timeout(self.rx_done(), *self.cycles(timeout_cycles))
            await self.settle()
            assert self.mac.tx.empty(), f"chunk at {start}: an answer the software switch does not give"
            assert self.fwd.empty(), f"chunk at {start}: a forwarded frame the software switch does not"
            self.check_protocol()
            self.checked += len(part)


def load_vector(path: Path) -> dict:
    return json.loads(path.read_text())
