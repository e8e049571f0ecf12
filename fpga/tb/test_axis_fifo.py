"""axis_fifo.v on its own: plain FIFO under backpressure, and the frame-dropping
ingress mode (a whole packet dropped when it does not fit, bad packets dropped on
their tuser at tlast, tready never low), each packet checked byte for byte."""

from __future__ import annotations

import random
from pathlib import Path

import cocotb
import pytest
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge
from queue_bench import AxisProtocolChecker, random_pauses
from sim_runner import FPGA_DIR, simulator_available

WIDTH = 64
DEPTH = 16


async def start(dut) -> tuple:  # noqa: ANN001 - cocotb handle
    from cocotbext.axi import AxiStreamBus, AxiStreamSink, AxiStreamSource

    cocotb.start_soon(Clock(dut.clk, 4, unit="ns").start())
    source = AxiStreamSource(AxiStreamBus.from_prefix(dut, "s_axis"), dut.clk, dut.rst)
    sink = AxiStreamSink(AxiStreamBus.from_prefix(dut, "m_axis"), dut.clk, dut.rst)
    for end in (source, sink):
        end.log.setLevel("WARNING")
    checker = AxisProtocolChecker(dut, "m_axis", "fifo m_axis")
    dut.rst.value = 1
    await ClockCycles(dut.clk, 4)
    dut.rst.value = 0
    await RisingEdge(dut.clk)
    return source, sink, checker


async def count_pulses(dut, counts: dict[str, int]) -> None:  # noqa: ANN001 - cocotb handle
    while True:
        await RisingEdge(dut.clk)
        for name in ("status_overflow", "status_bad_frame", "status_good_frame"):
            counts[name] += int(getattr(dut, name).value)


@cocotb.test()
async def frames_dropped_whole(dut) -> None:  # noqa: ANN001 - cocotb handle
    from cocotbext.axi import AxiStreamFrame

    rng = random.Random(3)
    source, sink, checker = await start(dut)
    counts = {"status_overflow": 0, "status_bad_frame": 0, "status_good_frame": 0}
    cocotb.start_soon(count_pulses(dut, counts))
    frame_mode = int(dut.FRAME_FIFO.value) if hasattr(dut, "FRAME_FIFO") else 1
    sink.set_pause_generator(random_pauses(rng, 0.8))
    sent = []
    for k in range(60):
        data = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 8 * DEPTH + 24)))
        bad = frame_mode and rng.random() < 0.2
        sent.append((data, bad))
        await source.send(AxiStreamFrame(data, tid=k, tuser=int(bad)))
        assert dut.s_axis_tready.value == 1, "the ingress FIFO must never back-pressure"
    await source.wait()
    sink.clear_pause_generator()
    sink.pause = False
    await ClockCycles(dut.clk, 8 * DEPTH)
    got = []
    while not sink.empty():
        frame = sink.recv_nowait()
        got.append((bytes(frame.tdata), frame.tid if isinstance(frame.tid, int) else frame.tid[0]))
    # Kept packets arrive intact and in order; a dropped one never leaves a piece.
    index = -1
    for data, tid in got:
        assert tid > index
        index = tid
        assert data == sent[tid][0], f"packet {tid} corrupted"
        assert not sent[tid][1], f"bad packet {tid} was forwarded"
        assert len(data) <= DEPTH * WIDTH // 8
    assert counts["status_good_frame"] == len(got)
    assert counts["status_bad_frame"] + counts["status_overflow"] + len(got) == len(sent)
    assert counts["status_overflow"] > 0 and counts["status_bad_frame"] > 0 and got
    checker.check()


@pytest.mark.parametrize("simulator", ["icarus"])
def test_axis_fifo_frame_drop(simulator: str) -> None:
    if not simulator_available(simulator):
        pytest.skip(f"{simulator} is not installed")
    from cocotb_tools.runner import get_runner

    out = FPGA_DIR / "sim_build_axis_fifo"
    runner = get_runner(simulator)
    runner.build(
        sources=[FPGA_DIR / "rtl" / "axis_fifo.v"], hdl_toplevel="axis_fifo", build_dir=out,
        parameters={"DEPTH": DEPTH, "DATA_WIDTH": WIDTH, "KEEP_ENABLE": 1, "ID_ENABLE": 1,
                    "ID_WIDTH": 8, "USER_ENABLE": 1, "FRAME_FIFO": 1, "DROP_BAD_FRAME": 1,
                    "DROP_WHEN_FULL": 1},
        timescale=("1ns", "1ps"), log_file=out / "build.log",
    )
    runner.test(test_module="test_axis_fifo", hdl_toplevel="axis_fifo", hdl_toplevel_lang="verilog",
                build_dir=out, test_dir=out, timescale=("1ns", "1ps"), log_file=out / "test.log",
                results_xml=str(Path(out) / "results.xml"))
