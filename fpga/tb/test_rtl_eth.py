"""The Ethernet-shelled OlafQueue (``olaf_top``) against the software switch's interface mode.

Real Ethernet/IPv4/UDP frames built with scapy go into the MAC receive side; every
answer frame must equal, byte for byte, what ``dataplane.ethernet.EthernetSwitch.handle``
sends back on the same port (addresses and ports swapped, lengths, IPv4 checksum,
UDP checksum 0), and every frame the software switch routes or floods must come out
of the forward port unchanged. Bad frames (tuser) and runts vanish, counted.
"""

from __future__ import annotations

import random
from collections import Counter

import cocotb
import numpy as np
import pytest
from cocotbext.axi import AxiStreamFrame
from eth_bench import (
    EthBench,
    Frame,
    ReferenceSwitch,
    build,
    directed_frames,
    mixed_frames,
    olaf_frame,
    other_frames,
    run,
)
from queue_bench import invalid_message, pull_message, update_message
from sim_runner import SIMULATORS, simulator_available

from worker_transport.codec import Verdict, classify, decode
from worker_transport.protocol import MsgType, Outcome

ANSWER_SLOTS = 16
"""olaf_top's default: requests that may wait for their answer at once."""


def verdict_of(payload: bytes, bench: EthBench) -> Verdict:
    c = bench.config
    verdicts = classify(decode([payload], c.values), values=c.values, frac_bits=c.frac_bits,
                        max_clusters=c.max_clusters, max_blocks=c.max_blocks)
    return Verdict(int(verdicts[0]))


def one_of_each_invalid(rng: random.Random, bench: EthBench) -> list[Frame]:
    """An OLAF frame with a malformed message of every Verdict kind."""
    valid = update_message(cluster=1, worker=2, block=3, reward=1 << 16,
                           values=np.arange(bench.values, dtype=np.int32))
    frames = []
    for verdict in list(Verdict)[1:]:
        candidate = invalid_message(rng, valid)
        while verdict_of(candidate, bench) != verdict:
            candidate = invalid_message(rng, valid)
        frames.append(Frame(olaf_frame(candidate, 3), kind=f"invalid_{verdict.name}"))
    return frames


def answer_kind(frame: bytes) -> str:
    msg_type = frame[42] & 0x0F
    return Outcome(frame[52]).name if msg_type == MsgType.ACK else MsgType(msg_type).name


@cocotb.test()
async def mixed_traffic(dut) -> None:  # noqa: ANN001
    """Line-rate chunks, then with tvalid/tready gaps; shell counters read back over AXI-Lite."""
    rng = random.Random(17)
    bench = EthBench(dut, seed=17)
    await bench.reset()
    empty_pulls = [Frame(olaf_frame(pull_message(), 2)) for _ in range(2)]   # EMPTY answers
    frames = (empty_pulls + directed_frames(rng) + one_of_each_invalid(rng, bench) + other_frames(rng)
              + mixed_frames(rng, 220))
    await bench.exchange(frames)
    bench.random_gaps(0.3)
    gapped = mixed_frames(rng, 100)
    await bench.exchange(gapped)
    bench.random_gaps(0.0)
    frames += gapped

    # The run must have exercised what it claims to: every answer kind, every invalid
    # verdict, MODEL forwarding, bad frames, and each kind of odd frame.
    ref = bench.reference
    answers = Counter[str]()
    forwarded = 0
    replay = ReferenceSwitch(bench.config)
    for frame in frames:
        want = replay.expect(frame)
        if want.answer is not None:
            answers[answer_kind(want.answer)] += 1
        forwarded += want.forward is not None
    dut._log.info("answers: %s; frames: %s", dict(answers), dict(Counter(f.kind for f in frames)))
    for name in ("ENQUEUED", "MERGED", "REPLACED", "DROPPED_INVALID", "DATA", "EMPTY"):
        assert answers[name] > 0, f"no {name} answer in the run"
    for verdict in list(Verdict)[1:]:
        assert ref.queue.counters.invalid[verdict] > 0, f"no {verdict.name} message in the run"

    got = await bench.shell_counters()
    kinds = Counter(f.kind for f in frames)
    assert kinds["bad"] > 0 and kinds["model"] > 0 and kinds["runt"] > 0
    want = {
        "rx_frames": len(frames),
        "rx_bad": kinds["bad"],
        "rx_overflow": 0,
        "rx_runt": kinds["runt"],
        "rx_filtered": 0,
        "to_queue": ref.switch.pipeline.received,
        "fwd_model": kinds["model"],
        "fwd_other": forwarded - kinds["model"],
        "tx_answers": sum(answers.values()),
        "answer_mismatch": 0,
    }
    assert got == want, f"shell counters {got} != {want}"


@cocotb.test()
async def overflow_drops_whole_frames(dut) -> None:  # noqa: ANN001
    """With the MAC transmit side stalled, a burst overflows the shell: whole frames
    are dropped and counted, and the accepted ones are answered exactly as the
    software switch answers those frames."""
    bench = EthBench(dut, seed=5)
    await bench.reset()
    bench.mac_tx.pause = True
    sent = [
        olaf_frame(update_message(cluster=0, worker=i % 8, block=i, reward=i << 16, seq=i,
                                  values=np.full(64, i, np.int32)), 1 + i % 8)
        for i in range(40)
    ]
    for frame in sent:
        await bench.mac_rx.send(AxiStreamFrame(frame))
    await bench.mac_rx.wait()
    await bench.settle(200)
    bench.mac_tx.pause = False
    await bench.settle(3000)
    received = []
    while not bench.mac_tx.empty():
        received.append(bytes((await bench.mac_tx.recv()).tdata))
    counters = await bench.shell_counters()
    dropped = counters["rx_overflow"]
    assert dropped > 0, "the burst should have overflowed the shell"
    assert len(received) == len(sent) - dropped >= ANSWER_SLOTS
    assert counters["to_queue"] == len(received)
    # Which frames got in: the ACK echoes block_id (payload bytes 6..7).
    accepted = [int.from_bytes(r[48:50], "big") for r in received]
    assert accepted == sorted(accepted), "answers out of request order"
    replay = ReferenceSwitch(bench.config)
    for block, answer in zip(accepted, received, strict=True):
        assert replay.expect(Frame(sent[block])).answer == answer, f"answer to frame {block}"
    bench.check_protocol()
    # The shell recovers: a fresh request is answered as usual.
    bench.reference = replay
    await bench.exchange([Frame(olaf_frame(pull_message(), 4))])


@cocotb.test()
async def odd_v_answers(dut) -> None:  # noqa: ANN001
    """On a build with odd V a DATA answer's last payload beat spills into an extra
    frame beat (36 + 4V = 4 mod 8 only for even V): answers still match."""
    rng = random.Random(29)
    bench = EthBench(dut, seed=29)
    if bench.values % 2 == 0:
        return
    await bench.reset()
    frames = ([Frame(olaf_frame(pull_message(), 2))] + directed_frames(rng, bench.values)
              + mixed_frames(rng, 60, values=bench.values))
    await bench.exchange(frames)
    assert bench.reference.queue.counters.outcomes[Outcome.ENQUEUED] > 0
    assert (await bench.shell_counters())["tx_answers"] > 0


ODD_V = 33


@pytest.mark.parametrize("simulator", SIMULATORS)
def test_rtl_eth(simulator: str) -> None:
    if not simulator_available(simulator):
        pytest.skip(f"{simulator} is not installed")
    build(simulator)
    run(simulator, "test_rtl_eth", testcases=["mixed_traffic", "overflow_drops_whole_frames"])


def test_rtl_eth_odd_v() -> None:
    """Icarus only: one more small build, for the answer path's spill beat."""
    if not simulator_available("icarus"):
        pytest.skip("icarus is not installed")
    build("icarus", ODD_V)
    run("icarus", "test_rtl_eth", values=ODD_V, testcases=["odd_v_answers"])
