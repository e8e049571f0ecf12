"""``olaf_top`` behind cocotbext-eth's MAC model, replaying the software switch's vectors.

Every file of tests/vectors/ is configured over AXI-Lite, wrapped in Ethernet/IPv4/UDP
(scapy, as the scapy-frame bench test_rtl_eth.py does) and sent through ``EthMac`` at
10 Gbit/s with preamble and inter-frame gap; the answers leave through the MAC model's
transmit side, which fails the test if a frame underruns once started. Each answer must be
the software switch's frame byte for byte and carry the vector's expected payload
(eth_mac_bench.py says more).
"""

from __future__ import annotations

import random

import cocotb
import pytest
from eth_bench import build, run
from eth_mac_bench import LONG_STEPS, EthMacBench, load_vector, vector_files, vector_frames
from queue_bench import config_from_vector
from sim_runner import full_matrix_only, simulator_available


@cocotb.test()
async def vectors_through_mac(dut) -> None:  # noqa: ANN001 - cocotb handle
    """Each vector file, one after another, with a reset and its config in between."""
    bench = EthMacBench(dut)
    await bench.reset()
    files = vector_files()
    assert files, "no vector files"
    rng = random.Random(29)
    for path in files:
        vector = load_vector(path)
        config = config_from_vector(vector["config"])
        if config.values != bench.values:
            continue  # olaf_top is built at the bench's V; every file uses V = 64
        await bench.configure(config)
        frames = vector_frames(vector, rng)
        await bench.exchange_mac(frames)
        counters = await bench.shell_counters()
        assert counters["rx_bad"] == 0 and counters["rx_overflow"] == 0, (path.name, counters)
    steps = [step for path in files for step in load_vector(path)["steps"][:LONG_STEPS]]
    answered = sum(1 for step in steps if step["out"] is not None)
    assert bench.checked == len(steps)
    dut._log.info("%d vector frames through the MAC model, %d answers (%d bytes)",
                  bench.checked, answered, bench.answer_bytes)


# Icarus only with OLAF_TB_FULL=1: test_rtl_eth.py already runs olaf_top on both simulators,
# and this bench's Icarus run cost CI 48 s for no RTL path the Verilator run misses.
@pytest.mark.parametrize("simulator", ["verilator", pytest.param("icarus", marks=full_matrix_only())])
def test_eth_mac(simulator: str) -> None:
    if not simulator_available(simulator):
        pytest.skip(f"{simulator} is not installed")
    build(simulator)
    run(simulator, "test_eth_mac")
