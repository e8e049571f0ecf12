"""olaf_util_of.v on its own: floor(255 * x / capacity) without a divider (revision 3's
queue_util, DESIGN.md §3 Feedback), checked against integer division for every capacity
and every x <= capacity of a 64-slot queue, and at the edges of the widest table the
module allows (MAX_CAPACITY 2047, where the reciprocal's K = 22 bits is at its limit)."""

from __future__ import annotations

import os
from pathlib import Path

import cocotb
import pytest
from cocotb.clock import Clock
from cocotb.triggers import RisingEdge, Timer
from sim_runner import FPGA_DIR, simulator_available


@cocotb.test()
async def util_is_integer_division(dut) -> None:  # noqa: ANN001 - cocotb handle
    max_capacity = int(os.environ["OLAF_TB_MAX_CAPACITY"])
    capacities = (range(1, max_capacity + 1) if max_capacity <= 64
                  else [1, 2, 3, 7, 255, 256, 1000, max_capacity - 1, max_capacity])
    cocotb.start_soon(Clock(dut.clk, 4, unit="ns").start())
    wrong = []
    for cap in capacities:
        dut.cap.value = cap
        dut.x.value = 0
        await RisingEdge(dut.clk)   # the reciprocal register takes the capacity
        await RisingEdge(dut.clk)
        for x in range(cap + 1):
            dut.x.value = x
            await Timer(1, unit="ns")
            if int(dut.util.value) != 255 * x // cap:
                wrong.append((cap, x, int(dut.util.value)))
    assert not wrong, f"(capacity, x, util) off integer division: {wrong[:10]}"


@pytest.mark.parametrize("max_capacity", [64, 2047])
def test_util_of_is_exact(max_capacity: int) -> None:
    if not simulator_available("icarus"):
        pytest.skip("icarus is not installed")
    from cocotb_tools.runner import get_results, get_runner

    out = FPGA_DIR / f"sim_build_util_of_{max_capacity}"
    runner = get_runner("icarus")
    runner.build(sources=[FPGA_DIR / "rtl" / "olaf_util_of.v"], hdl_toplevel="olaf_util_of",
                 build_dir=out, parameters={"MAX_CAPACITY": max_capacity},
                 timescale=("1ns", "1ps"), log_file=out / "build.log")
    results = Path(out) / "results.xml"
    runner.test(test_module="test_rtl_util_of", hdl_toplevel="olaf_util_of",
                hdl_toplevel_lang="verilog", build_dir=out, test_dir=out,
                extra_env={"OLAF_TB_MAX_CAPACITY": str(max_capacity)},
                timescale=("1ns", "1ps"), log_file=out / "test.log", results_xml=str(results))
    tests, failed = get_results(results)
    assert tests == 1 and failed == 0
