"""Cycle counts of the RTL OlafQueue with no backpressure (run by benchmarks/bench_fpga.py).

Not a pytest file: the benchmark script runs it through the cocotb runner and reads
the JSON it writes to ``$OLAF_BENCH_OUT``. Every stream is still scoreboarded
against the reference model, so a figure never comes from a wrong answer.

Streams (each message sent back to back, sink always ready):

* ``update_enqueue``: UPDATEs with distinct keys into an empty queue (ENQUEUED);
* ``update_merge``: UPDATEs from many workers onto 4 keys (MERGED, read-modify-write);
* ``pull_data``: PULLs draining a full queue (DATA, 1 beat in, 36 + 4V bytes out);
* ``pull_empty``: PULLs on an empty queue (EMPTY);
* ``mixed``: alternating UPDATE / PULL.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass

import cocotb
import numpy as np
from cocotb.triggers import ReadOnly, RisingEdge
from queue_bench import QueueBench, pull_message, update_message
from sim_runner import MAX_CAPACITY, V

from dataplane.queue import QueueConfig


@dataclass
class StreamFigures:
    name: str
    messages: int
    in_beats: int
    out_beats: int
    cycles: int
    """First input beat accepted to last output beat sent."""
    in_stall_cycles: int
    """Cycles with s_axis_tvalid high and s_axis_tready low."""
    first_response_latency: int
    """Cycles from the first message's last beat to its response's first beat."""


async def measure(bench: QueueBench, name: str, messages: list[bytes]) -> StreamFigures:
    dut = bench.dut
    counts = {"cycle": 0, "in_beats": 0, "out_beats": 0, "stalls": 0}
    marks: dict[str, int] = {}
    done = False

    async def monitor() -> None:
        while not done:
            await RisingEdge(dut.clk)
            await ReadOnly()
            counts["cycle"] += 1
            in_valid, in_ready = int(dut.s_axis_tvalid.value), int(dut.s_axis_tready.value)
            if in_valid and in_ready:
                counts["in_beats"] += 1
                marks.setdefault("first_in", counts["cycle"])
                if int(dut.s_axis_tlast.value):
                    marks.setdefault("first_msg_end", counts["cycle"])
            elif in_valid:
                counts["stalls"] += 1
            if int(dut.m_axis_tvalid.value) and int(dut.m_axis_tready.value):
                counts["out_beats"] += 1
                marks.setdefault("first_out", counts["cycle"])
                marks["last_out"] = counts["cycle"]

    watcher = cocotb.start_soon(monitor())
    await bench.exchange(messages)
    done = True
    await watcher
    await RisingEdge(dut.clk)  # leave the monitor's read-only phase before driving again
    return StreamFigures(
        name=name,
        messages=len(messages),
        in_beats=counts["in_beats"],
        out_beats=counts["out_beats"],
        cycles=marks["last_out"] - marks["first_in"] + 1,
        in_stall_cycles=counts["stalls"],
        first_response_latency=marks["first_out"] - marks["first_msg_end"],
    )


def update(cluster: int, worker: int, block: int, reward: int = 1 << 16) -> bytes:
    return update_message(
        cluster=cluster, worker=worker, block=block, reward=reward,
        values=np.arange(V, dtype=np.int32) * (worker + 1),
    )


@cocotb.test()
async def throughput(dut) -> None:  # noqa: ANN001 - cocotb handle
    bench = QueueBench(dut)
    n = MAX_CAPACITY
    config = QueueConfig(capacity=MAX_CAPACITY)
    figures = []

    await bench.reset(config)
    fills = [update(cluster=k % 16, worker=k % 8, block=k) for k in range(n)]
    figures.append(await measure(bench, "update_enqueue", fills))
    figures.append(await measure(bench, "pull_data", [pull_message()] * n))
    figures.append(await measure(bench, "pull_empty", [pull_message()] * n))

    await bench.reset(config)
    keys = [update(cluster=0, worker=0, block=b) for b in range(4)]
    merges = [update(cluster=0, worker=1 + k % 30, block=k % 4) for k in range(4 * n)]
    await bench.exchange(keys)
    figures.append(await measure(bench, "update_merge", merges))

    await bench.reset(config)
    mixed = []
    for k in range(n):
        mixed += [update(cluster=k % 16, worker=k % 8, block=k), pull_message()]
    figures.append(await measure(bench, "mixed", mixed))

    await bench.check_state()
    out = os.environ.get("OLAF_BENCH_OUT")
    if out:
        with open(out, "w") as f:
            json.dump({"data_width": bench.width, "values": V,
                       "streams": [asdict(fig) for fig in figures]}, f, indent=1)
