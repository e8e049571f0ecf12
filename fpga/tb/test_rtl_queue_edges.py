"""Directed RTL benches: reset in the middle of traffic, a full queue, and outcome coverage.

Every response is still compared byte for byte with the reference OlafQueue; on top
of that each bench asserts the condition it exists for (state really cleared by
reset, DROPPED_FULL really reached at the largest capacity, every outcome and every
invalid-message kind really observed).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

import cocotb
import numpy as np
import pytest
from cocotb.triggers import ClockCycles, ReadOnly
from cocotbext.axi import AxiStreamFrame
from queue_bench import (
    CNT_INVALID,
    CNT_OUTCOME,
    QueueBench,
    invalid_message,
    pull_message,
    random_pauses,
    random_traffic,
    update_message,
)
from sim_runner import MAX_BLOCKS, MAX_CAPACITY, MAX_CLUSTERS, SIMULATORS, V, run

from dataplane.queue import QueueConfig
from worker_transport.codec import Verdict, classify, decode
from worker_transport.protocol import MsgType, Outcome

ONE = 1 << 16


def verdict_of(message: bytes, config: QueueConfig) -> Verdict:
    """How the switch must judge ``message`` (the codec's classifier, not the queue rules)."""
    verdicts = classify(
        decode([message], config.values),
        values=config.values,
        frac_bits=config.frac_bits,
        max_clusters=config.max_clusters,
        max_blocks=config.max_blocks,
    )
    return Verdict(int(verdicts[0]))


def update(worker: int, block: int, reward: float = 1.0, *, cluster: int = 0, fill: int = 1) -> bytes:
    return update_message(
        cluster=cluster,
        worker=worker,
        block=block,
        reward=int(reward * ONE),
        values=np.full(V, fill, np.int32),
        seq=block,
        gen_time_us=1000 + worker,
    )


@cocotb.test()
async def reset_mid_traffic(dut) -> None:  # noqa: ANN001 - cocotb handle
    """rst in the middle of a message stream: what came out before it was a correct
    prefix, and afterwards the DUT is an empty queue again (state, counters, feedback)."""
    rng = random.Random(11)
    bench = QueueBench(dut)
    config = QueueConfig(capacity=16)
    await bench.reset(config)
    for cut in (37, 300, 900):
        bench.source.set_pause_generator(random_pauses(rng, 0.2))
        bench.sink.set_pause_generator(random_pauses(rng, 0.2))
        messages = list(random_traffic(rng, 400))
        expected = bench.reference.process(messages)
        for message in messages:
            bench.source.send_nowait(AxiStreamFrame(message))
        await ClockCycles(dut.clk, cut)
        # Reset while beats are still flowing in both directions.
        await ReadOnly()
        assert not bench.source.empty() or bench.source.active, "traffic ended before the reset"
        await ClockCycles(dut.clk, 1)
        received = []
        while not bench.sink.empty():
            received.append(bytes(bench.sink.recv_nowait().tdata))
        assert received == expected[: len(received)], "responses before reset diverged"
        await bench.reset(config, cycles=3)
        assert int(dut.stat_occupied.value) == 0
        assert int(dut.stat_active_clusters.value) == 0
        assert int(dut.stat_queue_util.value) == 0
        for select in (CNT_OUTCOME + Outcome.ENQUEUED, CNT_INVALID + Verdict.SHORT):
            assert await bench.read_counter(select) == 0
        # A fresh reference model must now agree with the DUT on new traffic.
        await bench.exchange([pull_message(), *random_traffic(rng, 300)])
        await bench.check_state()


@cocotb.test()
async def queue_full(dut) -> None:  # noqa: ANN001 - cocotb handle
    """Fill the largest capacity the build allows, hit DROPPED_FULL, keep merging while
    full, drain in arrival order; then the smallest capacity (1)."""
    bench = QueueBench(dut)
    for capacity in (MAX_CAPACITY, 1):
        await bench.reset(QueueConfig(capacity=capacity, max_clusters=MAX_CLUSTERS))
        fills = [update(worker=k % 8, block=k, cluster=k % MAX_CLUSTERS) for k in range(capacity)]
        overflow = [update(worker=1, block=MAX_BLOCKS - 1 - k, cluster=k) for k in range(3)]
        merge = [update(worker=7, block=0, cluster=0, fill=-5)]
        await bench.exchange(fills + overflow + merge)
        assert int(dut.stat_occupied.value) == capacity
        assert int(dut.stat_queue_util.value) == 255
        assert int(dut.stat_congested.value) == 1
        assert bench.coverage[Outcome.DROPPED_FULL.name] >= 3
        await bench.exchange([pull_message()] * (capacity + 2))
        await bench.check_state()
        assert int(dut.stat_occupied.value) == 0


@cocotb.test()
async def outcome_coverage(dut) -> None:  # noqa: ANN001 - cocotb handle
    """A directed sequence in which every ACK outcome, DATA, EMPTY, CONGESTED and every
    invalid-message kind occurs; coverage is counted from the DUT and asserted."""
    rng = random.Random(3)
    bench = QueueBench(dut)
    await bench.reset(QueueConfig(capacity=4, threshold=ONE // 2, congestion_threshold=192))
    directed = [
        pull_message(),                                  # EMPTY
        update(worker=1, block=0, reward=1.0),           # ENQUEUED
        update(worker=1, block=0, reward=1.1),           # REPLACED (same worker, agg 1)
        update(worker=2, block=0, reward=1.2),           # MERGED (|diff| < 0.5)
        update(worker=3, block=0, reward=5.0),           # REPLACED (higher reward)
        update(worker=4, block=0, reward=0.0),           # DROPPED_REWARD
        update(worker=1, block=1), update(worker=1, block=2), update(worker=1, block=3),
        update(worker=1, block=4),                       # DROPPED_FULL (capacity 4)
        pull_message(),                                  # DATA
    ]
    valid = update(worker=5, block=9)
    invalid = []
    for verdict in list(Verdict)[1:]:
        # The generator picks a malformation at random: draw until it made this kind.
        candidate = invalid_message(rng, valid)
        while verdict_of(candidate, bench.config) != verdict:
            candidate = invalid_message(rng, valid)
        invalid.append(candidate)
    await bench.exchange(directed + invalid + [pull_message()] * 5)
    await bench.check_state()

    covered = dict(bench.coverage)
    dut._log.info("coverage: %s", covered)
    for name in [o.name for o in Outcome] + [MsgType.DATA.name, MsgType.EMPTY.name]:
        assert covered.get(name, 0) > 0, f"{name} never observed"
    for verdict in list(Verdict)[1:]:
        assert await bench.read_counter(CNT_INVALID + verdict) == 1, verdict.name
    assert covered.get("CONGESTED", 0) > 0, "CONGESTED flag never observed"


@pytest.mark.parametrize("simulator", SIMULATORS)
def test_rtl_queue_edges(dut_build: Callable[..., Path], simulator: str) -> None:
    dut_build(simulator, 512)
    run(simulator, 512, "test_rtl_queue_edges")

