"""Pipeline hazards of the RTL OlafQueue, provoked on a build whose UPDATE is 2 beats.

With V = 8 at 512 bits an UPDATE is 68 bytes (2 beats) and a PULL 1 beat, so
messages reach the decide pipeline as close together as it admits them and the
apply stage runs merges into one segment back to back. Each bench provokes one
hazard and is scoreboarded byte for byte against the reference OlafQueue:

* back-to-back UPDATEs to one key: the second lookup reads the index before the
  first one's write lands (index bypass), then merge after merge into the same
  segment with the output stalled, so the queued read-modify-writes run on
  consecutive cycles (write forwarding);
* UPDATE then PULL of the same slot, gapless: the DATA must carry the values the
  UPDATE wrote two cycles earlier;
* a full queue drained by PULLs while the output is nearly stalled and refilled by
  UPDATEs: the segments still owed to DATA responses must not be handed out again
  (pending guard; this build allows only 2 such segments);
* agg_count saturation: merging into a slot whose agg_count is 65535 keeps it there;
* bad frames (tuser on tlast) vanish without an answer, counted.
"""

from __future__ import annotations

import random

import cocotb
import numpy as np
import pytest
from queue_bench import QueueBench, pull_message, random_pauses, tb_values, update_message
from sim_runner import MAX_CAPACITY, SIMULATORS, build, run, simulator_available

from dataplane.queue import QueueConfig

HAZARD_V = 8
# Two segments may await readout: few enough that a stalled output lets pops outrun
# it (with 8, the decision and response FIFOs fill up first and the guard never acts).
HAZARD_PARAMS = {"PENDING_SEGS": 2}
HAZARD_TAG = "hazard"
ONE = 1 << 16


def upd(cluster: int, worker: int, block: int, reward: float, fill: int, agg: int = 1) -> bytes:
    return update_message(
        cluster=cluster, worker=worker, block=block, reward=int(reward * ONE),
        values=np.arange(tb_values(), dtype=np.int32) * fill + fill, agg_count=agg,
        gen_time_us=1000 + worker, seq=fill,
    )


@cocotb.test()
async def back_to_back_same_key(dut) -> None:  # noqa: ANN001 - cocotb handle
    bench = QueueBench(dut)
    await bench.reset(QueueConfig(capacity=16, values=tb_values()))
    # Gapless: the index bypass case (second lookup before the first write).
    await bench.exchange([upd(0, w, 3, 1.0 + w / 64, fill=w + 1) for w in range(6)] + [pull_message()])
    assert bench.coverage["MERGED"] >= 5, dict(bench.coverage)
    # Output stalled while merges queue up, then released: back-to-back RMW.
    bench.sink.set_pause_generator(iter([True] * 400 + [False] * 100_000))
    await bench.exchange([upd(1, w % 8, 5, 1.0, fill=3 * w + 1) for w in range(40)] + [pull_message()] * 2)
    bench.sink.clear_pause_generator()
    bench.sink.pause = False
    await bench.check_state()


@cocotb.test()
async def update_then_pull(dut) -> None:  # noqa: ANN001 - cocotb handle
    bench = QueueBench(dut)
    await bench.reset(QueueConfig(capacity=8, values=tb_values()))
    messages = []
    for k in range(12):
        messages += [upd(k % 4, k % 8, k, 1.0, fill=k + 7), pull_message()]
        # Merge then PULL of the merged slot.
        messages += [upd(2, 1, 9, 1.0, fill=k + 1), upd(2, 2, 9, 1.0, fill=2 * k + 1), pull_message()]
    await bench.exchange(messages)
    assert bench.coverage["DATA"] >= 24, dict(bench.coverage)
    await bench.check_state()


async def watch_segments(dut, worst: list[int]) -> None:  # noqa: ANN001 - cocotb handle
    """Largest number of segments owned at once: by live slots plus by DATA still to be read."""
    from cocotb.triggers import ReadOnly, RisingEdge

    while True:
        await RisingEdge(dut.clk)
        await ReadOnly()
        if dut.rst.value == 0:
            worst[0] = max(worst[0], int(dut.occupied.value) + int(dut.pending.value))


@cocotb.test()
async def pending_segments_not_reused(dut) -> None:  # noqa: ANN001 - cocotb handle
    rng = random.Random(7)
    bench = QueueBench(dut)
    worst = [0]
    cocotb.start_soon(watch_segments(dut, worst))
    await bench.reset(QueueConfig(capacity=64, values=tb_values()))
    fill = [upd(k % 16, k % 8, 100 + k, 1.0, fill=k + 1) for k in range(64)]
    await bench.exchange(fill)
    bench.sink.set_pause_generator(random_pauses(rng, 0.97))
    churn = []
    for k in range(24):
        churn += [pull_message()] * 4
        churn += [upd(k % 16, 3 + j, 300 + 4 * k + j, 1.0, fill=5 * k + j) for j in range(4)]
    await bench.exchange(churn)
    bench.sink.clear_pause_generator()
    bench.sink.pause = False
    await bench.check_state()
    # More owners than segments means one segment was handed out twice, whether or not
    # the values it was overwritten with happened to reach a compared DATA.
    segments = MAX_CAPACITY + HAZARD_PARAMS["PENDING_SEGS"]
    assert worst[0] <= segments, f"{worst[0]} segments owned, only {segments} exist"
    assert int(await bench.read_counter(31)) == 0


@cocotb.test()
async def agg_count_saturates(dut) -> None:  # noqa: ANN001 - cocotb handle
    bench = QueueBench(dut)
    await bench.reset(QueueConfig(capacity=8, values=tb_values()))
    await bench.exchange([upd(0, 1, 2, 1.0, fill=1, agg=0xFFFF), upd(0, 2, 2, 1.0, fill=2),
                          upd(0, 3, 2, 1.0, fill=3, agg=0xFFFE), upd(0, 4, 2, 1.0, fill=4),
                          pull_message()])
    assert bench.coverage["MERGED"] == 3, dict(bench.coverage)
    await bench.check_state()


@cocotb.test()
async def bad_frames_dropped(dut) -> None:  # noqa: ANN001 - cocotb handle
    bench = QueueBench(dut)
    await bench.reset(QueueConfig(capacity=8, values=tb_values()))
    messages = [upd(0, w, w, 1.0, fill=w + 1) for w in range(6)] + [pull_message()] * 3
    bad = frozenset({1, 4, 7})
    await bench.exchange(messages, bad_frames=bad)
    assert await bench.read_counter(6) == len(bad)
    await bench.check_state()


@pytest.mark.parametrize("simulator", SIMULATORS)
def test_rtl_hazards(simulator: str) -> None:
    if not simulator_available(simulator):
        pytest.skip(f"{simulator} is not installed")
    build(simulator, 512, HAZARD_V, tag=HAZARD_TAG, overrides=HAZARD_PARAMS)
    run(simulator, 512, "test_rtl_hazards", values=HAZARD_V, tag=HAZARD_TAG)
