"""The AXI-Lite register block of ``olaf_top``: configuration in, counters out.

The queue is configured only through AXI-Lite (cocotbext-axi's AxiLiteMaster), Ethernet
frames are answered as the software switch configured the same way answers them, and
the queue's and the shell's 64-bit counters read back over AXI-Lite equal the
reference's.
"""

from __future__ import annotations

import random
from collections import Counter

import cocotb
import pytest
from cocotb.triggers import ClockCycles
from cocotbext.axi import AxiStreamFrame
from eth_bench import (
    CTRL_FWD_OTHER,
    NON_OLAF_KINDS,
    QUEUE_COUNTERS,
    REG_CAPACITY,
    REG_CLUSTER_QUOTA,
    REG_CONGESTION,
    REG_CTRL,
    REG_FEEDBACK,
    REG_FEEDBACK_REV,
    REG_FRAC_BITS,
    REG_ID,
    REG_MAX_BLOCKS,
    REG_MAX_CLUSTERS,
    REG_MODE,
    REG_OCCUPIED,
    REG_PARAMS,
    REG_PARAMS2,
    REG_THRESHOLD,
    EthBench,
    Frame,
    build,
    mixed_frames,
    olaf_frame,
    other_frames,
    run,
)
from queue_bench import pull_message
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from sim_runner import MAX_BLOCKS, MAX_CAPACITY, MAX_CLUSTERS, SIMULATORS, V, simulator_available

from dataplane.queue import QueueConfig
from worker_transport.codec import Verdict
from worker_transport.protocol import Mode, MsgType, Outcome

# The queue's counter selectors (olaf_queue.v, cnt_sel).
SEL_OUTCOME, SEL_BAD_FRAME, SEL_INGRESS_DROP, SEL_TYPE, SEL_VERDICT, SEL_OCCUPIED = 0, 6, 7, 8, 16, 26


async def check_queue_counters(bench: EthBench) -> None:
    """Every queue counter and the feedback registers equal the reference queue's."""
    ref = bench.reference.queue
    for outcome in Outcome:
        got = await bench.read_counter(QUEUE_COUNTERS, SEL_OUTCOME + outcome)
        assert got == ref.counters.outcomes[outcome], f"outcome counter {outcome.name}"
    for msg_type in MsgType:
        got = await bench.read_counter(QUEUE_COUNTERS, SEL_TYPE + msg_type)
        assert got == ref.counters.msg_types[msg_type], f"msg-type counter {msg_type.name}"
    for verdict in list(Verdict)[1:]:
        got = await bench.read_counter(QUEUE_COUNTERS, SEL_VERDICT + verdict)
        assert got == ref.counters.invalid[verdict], f"invalid counter {verdict.name}"
    # The shell drops bad frames itself; the queue's own drop paths stay unused.
    assert await bench.read_counter(QUEUE_COUNTERS, SEL_BAD_FRAME) == 0
    assert await bench.read_counter(QUEUE_COUNTERS, SEL_INGRESS_DROP) == 0
    assert await bench.read_counter(QUEUE_COUNTERS, SEL_OCCUPIED) == ref.occupied
    flags, active, util = ref.feedback_fields()
    assert await bench.axil.read_dword(REG_OCCUPIED) == ref.occupied
    assert await bench.axil.read_dword(REG_FEEDBACK) == flags << 16 | active << 8 | util


@cocotb.test()
async def register_file(dut) -> None:  # noqa: ANN001
    """Identity, parameters, reset values, read-back, byte strobes, unmapped addresses."""
    bench = EthBench(dut)
    await bench.reset()
    axil = bench.axil
    assert await axil.read_dword(REG_ID) == 0x4F4C4146
    assert await axil.read_dword(REG_PARAMS) == MAX_CAPACITY << 8 | V
    assert await axil.read_dword(REG_PARAMS2) == MAX_BLOCKS << 16 | MAX_CLUSTERS
    d = QueueConfig()
    defaults = {REG_CTRL: CTRL_FWD_OTHER, REG_MODE: int(d.mode), REG_THRESHOLD: d.threshold,
                REG_CONGESTION: d.congestion_threshold, REG_FRAC_BITS: d.frac_bits,
                REG_CAPACITY: d.capacity, REG_MAX_CLUSTERS: d.max_clusters, REG_MAX_BLOCKS: d.max_blocks,
                REG_CLUSTER_QUOTA: d.capacity,   # no limit
                REG_FEEDBACK_REV: d.feedback}
    for address, value in defaults.items():
        assert await axil.read_dword(address) == value, f"reset value of {address:#x}"
    # Fields keep only their width.
    widths = {REG_MODE: 1, REG_THRESHOLD: 31, REG_CONGESTION: 8, REG_FRAC_BITS: 8, REG_CAPACITY: 16,
              REG_MAX_CLUSTERS: 17, REG_MAX_BLOCKS: 17, REG_CLUSTER_QUOTA: 16, REG_FEEDBACK_REV: 8}
    for address, bits in widths.items():
        await axil.write_dword(address, 0xFFFFFFFF)
        assert await axil.read_dword(address) == (1 << bits) - 1, f"width of {address:#x}"
    # One byte lane: only that byte changes.
    await axil.write_dword(REG_THRESHOLD, 0x01020304)
    await axil.write(REG_THRESHOLD + 1, b"\xaa")
    assert await axil.read_dword(REG_THRESHOLD) == 0x0102AA04
    # Read-only and unmapped: writes ignored, reads 0 where nothing is mapped.
    await axil.write_dword(REG_ID, 0)
    await axil.write_dword(0x0F0, 0x12345678)
    assert await axil.read_dword(REG_ID) == 0x4F4C4146
    assert await axil.read_dword(0x0F0) == 0


@cocotb.test()
async def configured_queue_and_counters(dut) -> None:  # noqa: ANN001
    """A small queue configured over AXI-Lite, traffic, run-time mode/threshold changes;
    answers, queue counters, feedback and shell counters checked against the reference."""
    rng = random.Random(23)
    bench = EthBench(dut, seed=23)
    await bench.reset()
    config = QueueConfig(capacity=5, max_clusters=3, max_blocks=5, frac_bits=12,
                         threshold=1 << 15, congestion_threshold=150)
    await bench.configure(config)
    readback = [await bench.axil.read_dword(a)
                for a in (REG_CAPACITY, REG_MAX_CLUSTERS, REG_MAX_BLOCKS, REG_FRAC_BITS, REG_THRESHOLD)]
    assert readback == [5, 3, 5, 12, 1 << 15]

    frames = mixed_frames(rng, 120, frac_bits=12, blocks=6)
    await bench.exchange(frames)
    await check_queue_counters(bench)
    ref = bench.reference.queue
    assert ref.counters.outcomes[Outcome.DROPPED_FULL] > 0, "capacity 5 never filled"
    assert ref.counters.invalid[Verdict.CLUSTER_RANGE] > 0 and ref.counters.invalid[Verdict.BLOCK_RANGE] > 0

    # The controller's run-time knobs, while the queue holds state.
    await bench.set_runtime(int(Mode.FIFO), 1 << 16, 40)
    more = mixed_frames(rng, 80, frac_bits=12, blocks=6)
    await bench.exchange(more)
    await bench.set_runtime(int(Mode.OLAF), 0x7FFFFFFF, 255)
    last = mixed_frames(rng, 60, frac_bits=12, blocks=6)
    await bench.exchange(last)
    await check_queue_counters(bench)

    # Run-time registers, each written while the queue holds state and read back, the
    # reference set to what the RTL makes of the value written:
    # * CLUSTER_QUOTA: 2 of capacity 5 (3 clusters can still fill the queue), then 0 and
    #   0xFFFF (above capacity), which the RTL takes as no limit (= capacity);
    # * FEEDBACK_REV (DESIGN.md §3 Feedback): 2 gives every ACK the global occupancy; any
    #   other value is revision 3, as on the P4 targets (7: the reference, which refuses
    #   anything but 2 and 3, is set to 3).
    run_time = [(REG_CLUSTER_QUOTA, "cluster_quota",
                 ((2, 2), (0, config.capacity), (0xFFFF, config.capacity))),
                (REG_FEEDBACK_REV, "feedback", ((2, 2), (7, 3), (3, 3)))]
    run_time_frames = []
    for register, setting, cases in run_time:
        for written, value in cases:
            await bench.axil.write_dword(register, written)
            assert await bench.axil.read_dword(register) == written
            setattr(bench.reference.queue, setting, value)
            part = mixed_frames(rng, 60, frac_bits=12, blocks=6)
            await bench.exchange(part)
            await check_queue_counters(bench)
            run_time_frames += part

    frames += more + last + run_time_frames
    kinds = Counter(f.kind for f in frames)
    shell = await bench.shell_counters()
    assert shell["rx_frames"] == len(frames)
    assert shell["rx_bad"] == kinds["bad"]
    assert shell["fwd_model"] == kinds["model"]
    assert shell["to_queue"] == bench.reference.switch.pipeline.received
    assert shell["answer_mismatch"] == 0

    # CTRL.reset: the datapath restarts empty, counters cleared, registers kept.
    await bench.configure(config)
    assert await bench.read_counter(QUEUE_COUNTERS, SEL_OUTCOME + Outcome.ENQUEUED) == 0
    assert (await bench.shell_counters())["rx_frames"] == 0
    assert await bench.axil.read_dword(REG_CAPACITY) == 5
    await bench.exchange([Frame(olaf_frame(pull_message(), 1))])   # EMPTY: the queue is empty
    await check_queue_counters(bench)


@cocotb.test()
async def reset_in_mid_frame(dut) -> None:  # noqa: ANN001
    """CTRL.reset set and cleared while the MAC is in the middle of a long frame: the
    frame's tail is not taken for a frame (no output, not counted); traffic after it
    is answered as by a fresh software switch."""
    rng = random.Random(11)
    bench = EthBench(dut, seed=11)
    await bench.reset()
    long_frame = bytes(Ether() / IP(src="10.0.1.4", dst="10.0.2.1") / UDP(sport=5000, dport=5001)
                       / bytes(1400))
    sending = cocotb.start_soon(bench.mac_rx.send(AxiStreamFrame(long_frame)))
    await ClockCycles(dut.clk, 20)
    await bench.configure(QueueConfig())             # sets CTRL.reset, then clears it
    assert not bench.mac_rx.idle(), "the long frame ended before the reset was released"
    await sending
    await bench.mac_rx.wait()
    frames = mixed_frames(rng, 30)
    await bench.exchange(frames)
    shell = await bench.shell_counters()
    assert shell["rx_frames"] == len(frames), "the frame cut by the reset was counted"
    assert shell["fwd_other"] == sum(1 for f in frames if f.kind in NON_OLAF_KINDS)


@cocotb.test()
async def non_olaf_filtered(dut) -> None:  # noqa: ANN001
    """CTRL.fwd_other = 0: non-OLAF frames are dropped and counted, MODEL still forwarded."""
    rng = random.Random(3)
    bench = EthBench(dut, seed=3)
    await bench.reset()
    await bench.configure(QueueConfig(), forward_other=False)
    assert await bench.axil.read_dword(REG_CTRL) == 0
    others = [f for f in other_frames(rng) if f.kind in ("arp", "vlan", "tcp", "other_udp", "ip_options")]
    frames = mixed_frames(rng, 40) + others
    await bench.exchange(frames)
    shell = await bench.shell_counters()
    kinds = Counter(f.kind for f in frames)
    assert shell["rx_filtered"] == sum(kinds[k] for k in NON_OLAF_KINDS) > len(others)
    assert shell["fwd_other"] == 0
    assert shell["fwd_model"] == kinds["model"] > 0


# Icarus only in CI, to keep the benches lean: the register block is plain synchronous
# logic, and this module also passes on the Verilator build of olaf_top (run by hand).
@pytest.mark.parametrize("simulator", [s for s in SIMULATORS if s == "icarus"])
def test_rtl_axil(simulator: str) -> None:
    if not simulator_available(simulator):
        pytest.skip(f"{simulator} is not installed")
    build(simulator)
    run(simulator, "test_rtl_axil")
