"""Simulator side of the OlafQueue RTL benches: drivers, monitors and the reference check.

``QueueBench`` drives the DUT's AXI-Stream ports with cocotbext-axi, configures it,
resets it, and compares every response byte for byte with ``dataplane.queue.OlafQueue``
(``Reference``) fed the same message stream; ``AxisProtocolChecker`` watches the
AXI-Stream rules on an interface; the traffic helpers build the messages. It runs inside
cocotb (the cocotb imports are inside the functions that need them, so pytest can import
the traffic helpers too); building and starting the simulator is sim_runner.py's part.
"""

from __future__ import annotations

import os
import random
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
from sim_runner import MAX_BLOCKS, MAX_CLUSTERS, V

from dataplane.queue import OlafQueue, QueueConfig
from worker_transport.codec import Batch, Verdict, decode, encode
from worker_transport.protocol import FLAG_CONGESTED, HEADER_LEN, Mode, MsgType, Outcome

# Counter read-port selectors (see the cnt_sel comment in olaf_queue.v).
CNT_OUTCOME = 0
CNT_TYPE = 8
CNT_INVALID = 16


# ---------------------------------------------------------------- reference model
def config_from_vector(raw: dict) -> QueueConfig:
    """A vector file's ``config`` object as the reference model's QueueConfig."""
    return QueueConfig(
        capacity=raw["capacity"],
        values=raw["values"],
        max_clusters=raw["max_clusters"],
        max_blocks=raw["max_blocks"],
        frac_bits=raw["frac_bits"],
        mode=Mode.FIFO if raw["mode"] == "fifo" else Mode.OLAF,
        threshold=raw["threshold"],
        congestion_threshold=raw["congestion_threshold"],
        cluster_quota=raw.get("cluster_quota"),
        feedback=raw.get("feedback", 2),
    )


@dataclass
class Reference:
    """The software switch's OlafQueue, fed message by message alongside the DUT.

    With ``rules`` set, messages go through one at a time and each valid UPDATE is
    binned by the queue rule that decides it (looked up in the reference's slot state
    first): rule 1 REPLACED (same worker, agg_count 1) vs rule 3 REPLACED (higher
    reward), merges into a saturated agg_count, and so on.
    """

    config: QueueConfig
    rules: Counter[str] | None = None
    queue: OlafQueue = field(init=False)

    def __post_init__(self) -> None:
        self.queue = OlafQueue(self.config)

    def process(self, messages: Sequence[bytes]) -> list[bytes]:
        """The responses the reference gives to ``messages`` (silent drops give none)."""
        if not messages:
            return []
        if self.rules is None:
            responses, _, _ = self.queue.process(decode(list(messages), self.config.values))
            return encode(responses)
        out: list[bytes] = []
        for message in messages:
            self._bin(message)
            responses, _, _ = self.queue.process(decode([message], self.config.values))
            out += encode(responses)
        return out

    def _bin(self, message: bytes) -> None:
        assert self.rules is not None
        cfg, q = self.config, self.queue
        if len(message) > HEADER_LEN + 4 * cfg.values:
            self.rules["overlong packet"] += 1
        if len(message) != HEADER_LEN + 4 * cfg.values or message[0] != 0x10 | MsgType.UPDATE:
            return
        cluster, worker, block = (int.from_bytes(message[o:o + 2], "big") for o in (2, 4, 6))
        reward = int.from_bytes(message[24:28], "big", signed=True)
        if cluster >= cfg.max_clusters or block >= cfg.max_blocks or message[14] != cfg.frac_bits:
            return
        s = q.index[cluster * cfg.max_blocks + block]
        if s < 0 or q.mode != Mode.OLAF:
            self.rules["full" if q.occupied == cfg.capacity
                       else "quota" if q.cluster_count[cluster] >= q.cluster_quota else "enqueue"] += 1
            return
        slots = q.slots
        if slots["agg_count"][s] == 1 and slots["worker_id"][s] == worker:
            self.rules["rule 1 REPLACED (same worker)"] += 1
        elif abs(reward - slots["reward"][s]) < q.threshold:
            self.rules["merge into agg_count 65535" if slots["agg_count"][s] == 0xFFFF else "merge"] += 1
        elif reward > slots["reward"][s]:
            self.rules["rule 3 REPLACED (higher reward)"] += 1
        else:
            self.rules["dropped for reward"] += 1


# ---------------------------------------------------------------- traffic
def update_message(
    *,
    cluster: int,
    worker: int,
    block: int,
    reward: int,
    values: np.ndarray,
    seq: int = 0,
    model_version: int = 0,
    gen_time_us: int = 0,
    agg_count: int = 1,
    frac_bits: int = 16,
) -> bytes:
    batch = Batch.zeros(1, len(values))
    h = batch.headers
    h["version"] = 1
    h["msg_type"] = MsgType.UPDATE
    h["cluster_id"] = cluster
    h["worker_id"] = worker
    h["block_id"] = block
    h["agg_count"] = agg_count
    h["num_values"] = len(values)
    h["frac_bits"] = frac_bits
    h["seq"] = seq
    h["model_version"] = model_version
    h["reward"] = reward
    h["gen_time_us"] = gen_time_us
    h["contributors"] = 1 << (worker % 32)
    batch.values[0] = values
    return encode(batch)[0]


def pull_message() -> bytes:
    batch = Batch.zeros(1, 0)
    batch.headers["version"] = 1
    batch.headers["msg_type"] = MsgType.PULL
    return encode(batch)[0]


def invalid_message(rng: random.Random, valid_update: bytes) -> bytes:
    """A malformed variant of ``valid_update``, one of every Verdict kind at random."""
    kind = rng.choice(list(Verdict)[1:])
    raw = bytearray(valid_update)
    if kind == Verdict.SHORT:
        return bytes(raw[: rng.randrange(1, HEADER_LEN)])
    if kind == Verdict.BAD_VERSION:
        raw[0] = (rng.choice([0, 2, 15]) << 4) | (raw[0] & 0x0F)
    elif kind == Verdict.BAD_TYPE:
        raw[0] = 0x10 | rng.choice([0, 7, 15])
    elif kind == Verdict.BAD_PULL:
        pull = bytearray(pull_message())
        if rng.random() < 0.5:
            pull[13] = rng.randrange(1, 256)
            return bytes(pull)
        return bytes(pull) + bytes(rng.randrange(1, 8) * 4)
    elif kind == Verdict.NOT_FROM_HOST:
        raw[0] = 0x10 | rng.choice([MsgType.ACK, MsgType.DATA, MsgType.EMPTY])
    elif kind == Verdict.BAD_LENGTH:
        if rng.random() < 0.3:
            return bytes(raw[: len(raw) - 4 * rng.randrange(1, 4)])
        if rng.random() < 0.4:  # overlong: extra beats the ingest must discard
            return bytes(raw) + bytes(rng.randrange(1, 200))
        raw[13] = rng.choice([0, 1, 63, 65, 255])
    elif kind == Verdict.BAD_FRAC_BITS:
        raw[14] = rng.choice([0, 8, 15, 17, 31])
    elif kind == Verdict.CLUSTER_RANGE:
        raw[2:4] = rng.choice([MAX_CLUSTERS, 0xFFFF]).to_bytes(2, "big")
    elif kind == Verdict.BLOCK_RANGE:
        raw[6:8] = rng.choice([MAX_BLOCKS, 0xFFFF]).to_bytes(2, "big")
    return bytes(raw)


def random_traffic(
    rng: random.Random,
    count: int,
    *,
    clusters: int = 4,
    workers: int = 8,
    blocks: int = 6,
    invalid_rate: float = 0.02,
    values: int = V,
) -> Iterator[bytes]:
    """Mixed UPDATE/PULL traffic whose PULL share drifts, so the queue fills and drains.

    Few keys and close-or-far rewards make every queue rule fire often.
    """
    seqs = Counter[tuple[int, int]]()
    pull_share = 0.3
    for i in range(count):
        if i % 200 == 0:
            pull_share = rng.choice([0.05, 0.3, 0.45, 0.7])
        if rng.random() < pull_share:
            yield pull_message()
            continue
        cluster, worker = rng.randrange(clusters), rng.randrange(workers)
        seqs[cluster, worker] += 1
        base = rng.choice([1 << 16, 5 << 16, -(3 << 16)])
        reward = base + rng.randrange(-(1 << 15), 1 << 15)
        kind = rng.random()
        if kind < 0.05:
            vals = np.full(values, rng.choice([2**31 - 1, -(2**31)]), np.int64)
        else:
            vals = np.array([rng.randrange(-(2**31), 2**31) >> rng.randrange(0, 31)
                             for _ in range(values)], np.int64)
        message = update_message(
            cluster=cluster,
            worker=worker,
            block=rng.randrange(blocks),
            reward=reward,
            values=vals.astype(np.int32),
            seq=seqs[cluster, worker],
            model_version=rng.randrange(1000),
            gen_time_us=rng.randrange(2**32),
            agg_count=1 if rng.random() < 0.9 else rng.choice([0xFFFF, rng.randrange(2, 65535)]),
        )
        if rng.random() < invalid_rate:
            message = invalid_message(rng, message)
        yield message


def response_outcome(response: bytes) -> str:
    """Coverage bin of one response: the ACK outcome name, or DATA / EMPTY."""
    msg_type = response[0] & 0x0F
    if msg_type == MsgType.ACK:
        return Outcome(response[10]).name
    return MsgType(msg_type).name


# ---------------------------------------------------------------- simulator side
def random_pauses(rng: random.Random, busy: float) -> Iterator[bool]:
    """Pause pattern for a cocotbext-axi source/sink: paused with probability ``busy``."""
    while True:
        yield rng.random() < busy


def fast_sink_class() -> type:
    """cocotbext-axi's AxiStreamSink, reading tdata once per beat instead of once per byte.

    The stock ``_run`` converts the whole tdata vector to an int for every byte lane;
    at 512 bits that was two thirds of the bench's run time. Handshake behaviour
    (pause, tready, reset, queueing) is the stock one, line for line.
    """
    from cocotb.triggers import RisingEdge
    from cocotb.utils import get_sim_time
    from cocotbext.axi import AxiStreamFrame, AxiStreamSink

    class FastAxiStreamSink(AxiStreamSink):
        async def _run(self) -> None:
            frame = None
            self.active = False
            clock_edge_event = RisingEdge(self.clock)
            wake_event = self.wake_event.wait()
            lanes = self.byte_lanes
            while True:
                pause_sample = bool(self.pause)
                await clock_edge_event
                tready_sample = self.bus.tready.value
                tvalid_sample = self.bus.tvalid.value
                if tready_sample and tvalid_sample:
                    if not frame:
                        frame = AxiStreamFrame(bytearray(), [], [], [], [])
                        frame.sim_time_start = get_sim_time()
                        self.active = True
                    frame.tdata.extend(int(self.bus.tdata.value).to_bytes(lanes, "little"))
                    keep = int(self.bus.tkeep.value)
                    frame.tkeep.extend((keep >> lane) & 1 for lane in range(lanes))
                    frame.tid.extend([int(self.bus.tid.value)] * lanes)
                    frame.tdest.extend([0] * lanes)
                    frame.tuser.extend([0] * lanes)
                    if self.bus.tlast.value:
                        frame.sim_time_end = get_sim_time()
                        self.queue_occupancy_bytes += len(frame)
                        self.queue_occupancy_frames += 1
                        self.queue.put_nowait(frame)
                        self.active_event.set()
                        frame = None
                else:
                    self.active = bool(frame)
                paused = self.full() or pause_sample
                self.bus.tready.value = not paused
                if (not tvalid_sample or paused) and (pause_sample == bool(self.pause)):
                    self.wake_event.clear()
                    await wake_event

    return FastAxiStreamSink


class AxisProtocolChecker:
    """AXI-Stream rules checked on every clock edge of one interface.

    Once tvalid is high it stays high, with tdata / tkeep / tlast / tid unchanged,
    until the beat is taken (tready); tkeep is all ones except on a tlast beat, where
    it is a non-empty contiguous low mask; no X/Z on tvalid (or on the payload while
    tvalid is high). Violations are collected and asserted by ``check``.
    """

    def __init__(self, dut, prefix: str, name: str) -> None:  # noqa: ANN001 - cocotb handle
        import cocotb

        self.clk = dut.clk
        self.rst = dut.rst
        self.valid = getattr(dut, f"{prefix}_tvalid")
        self.ready = getattr(dut, f"{prefix}_tready")
        self.payload = [getattr(dut, f"{prefix}_{sig}") for sig in ("tdata", "tkeep", "tlast", "tid")
                        if hasattr(dut, f"{prefix}_{sig}")]
        self.keep = getattr(dut, f"{prefix}_tkeep")
        self.last = getattr(dut, f"{prefix}_tlast")
        self.lanes = len(self.keep)
        self.name = name
        self.violations: list[str] = []
        self.beats = 0
        self.stalls = 0
        cocotb.start_soon(self._run())

    async def _run(self) -> None:
        from cocotb.triggers import ReadOnly, RisingEdge

        held: tuple[str, ...] | None = None  # payload of a beat offered but not taken
        full = (1 << self.lanes) - 1
        while True:
            await RisingEdge(self.clk)
            await ReadOnly()
            if str(self.rst.value) != "0":
                held = None
                continue
            valid = str(self.valid.value)
            if valid not in ("0", "1"):
                self.violations.append(f"{self.name}: tvalid is {valid}")
                continue
            if valid == "0":
                if held is not None:
                    self.violations.append(f"{self.name}: tvalid dropped before tready")
                held = None
                continue
            payload = tuple(str(sig.value) for sig in self.payload)
            if any(c not in "01" for bits in payload for c in bits):
                self.violations.append(f"{self.name}: X/Z on the payload while tvalid")
                continue
            if held is not None and payload != held:
                self.violations.append(f"{self.name}: payload changed while waiting for tready")
            keep = int(self.keep.value)
            if self.last.value:
                if keep == 0 or keep & (keep + 1):
                    self.violations.append(f"{self.name}: tkeep {keep:#x} on tlast is not a low mask")
            elif keep != full:
                self.violations.append(f"{self.name}: tkeep {keep:#x} not all ones before tlast")
            if self.ready.value:
                self.beats += 1
                held = None
            else:
                self.stalls += 1
                held = payload
            if len(self.violations) > 20:
                return

    def check(self) -> None:
        assert not self.violations, "AXI-Stream protocol violations: " + "; ".join(self.violations[:5])


class QueueBench:
    """The DUT with its clock, AXI-Stream source and sink, configuration and scoreboard."""

    def __init__(self, dut) -> None:  # noqa: ANN001 - cocotb handle
        import cocotb
        from cocotb.clock import Clock
        from cocotbext.axi import AxiStreamBus, AxiStreamSource

        self.dut = dut
        self.width = len(dut.s_axis_tdata)
        cocotb.start_soon(Clock(dut.clk, 4, unit="ns").start())
        self.source = AxiStreamSource(AxiStreamBus.from_prefix(dut, "s_axis"), dut.clk, dut.rst)
        self.sink = fast_sink_class()(AxiStreamBus.from_prefix(dut, "m_axis"), dut.clk, dut.rst)
        for endpoint in (self.source, self.sink):
            endpoint.log.setLevel("WARNING")
        self.config = QueueConfig()
        self.rules: Counter[str] | None = None  # set to a Counter to bin queue rules
        self.reference = Reference(self.config)
        self.coverage: Counter[str] = Counter()
        self.compared = 0
        self.next_tid = 0
        self.counter_reads: set[int] = set()
        self.checkers = [AxisProtocolChecker(dut, "s_axis", "s_axis"),
                         AxisProtocolChecker(dut, "m_axis", "m_axis")]
        dut.rst.value = 1
        dut.s_axis_tvalid.value = 0
        dut.cnt_sel.value = 0

    def apply_config(self, config: QueueConfig) -> None:
        dut = self.dut
        dut.cfg_capacity.value = config.capacity
        dut.cfg_max_clusters.value = config.max_clusters
        dut.cfg_max_blocks.value = config.max_blocks
        dut.cfg_frac_bits.value = config.frac_bits
        dut.cfg_mode.value = int(config.mode)
        dut.cfg_threshold.value = config.threshold
        dut.cfg_congestion_threshold.value = config.congestion_threshold
        dut.cfg_cluster_quota.value = config.cluster_quota
        dut.cfg_feedback.value = config.feedback

    async def reset(self, config: QueueConfig | None = None, cycles: int = 4) -> None:
        """Hold rst, load ``config`` and start a fresh reference model."""
        from cocotb.triggers import RisingEdge

        if config is not None:
            self.config = config
        self.dut.rst.value = 1
        self.apply_config(self.config)
        for _ in range(cycles):
            await RisingEdge(self.dut.clk)
        self.source.clear()
        self.sink.clear()
        self.dut.rst.value = 0
        await RisingEdge(self.dut.clk)
        self.reference = Reference(self.config, self.rules)

    async def exchange(
        self,
        messages: Sequence[bytes],
        timeout_cycles: int = 200_000,
        bad_frames: frozenset[int] = frozenset(),
    ) -> None:
        """Send ``messages``, and check every response against the reference model.

        Each message carries its own tid; a response must carry the tid of the
        request it answers (tids rise through the stream, and an ACK answers an
        UPDATE or an invalid message, DATA / EMPTY a PULL). Messages whose index is in
        ``bad_frames`` go out with the MAC's bad-frame tuser bit and must vanish.
        """
        import cocotb
        from cocotb.triggers import with_timeout
        from cocotbext.axi import AxiStreamFrame

        good = [m for i, m in enumerate(messages) if i not in bad_frames]
        expected = self.reference.process(good)
        first_tid = self.next_tid
        tid_mask = (1 << len(self.dut.s_axis_tid)) - 1
        self.next_tid = (self.next_tid + len(messages)) & tid_mask

        async def feed() -> None:
            for index, message in enumerate(messages):
                tid = (first_tid + index) & tid_mask
                await self.source.send(AxiStreamFrame(message, tid=tid, tuser=int(index in bad_frames)))

        feeder = cocotb.start_soon(feed())
        last_index = -1
        for index, want in enumerate(expected):
            frame = await with_timeout(self.sink.recv(), timeout_cycles * 4, "ns")
            got = bytes(frame.tdata)
            assert got == want, (
                f"response {self.compared + index}: DUT {got.hex()} != reference {want.hex()}"
            )
            tids = set(frame.tid) if isinstance(frame.tid, list) else {frame.tid}
            assert len(tids) == 1, f"response {self.compared + index}: tid changes within a packet"
            request = ((tids.pop() - first_tid) & tid_mask)
            assert last_index < request < len(messages), (
                f"response {self.compared + index}: tid points at request {request}, after {last_index}"
            )
            assert request not in bad_frames, f"response to bad frame {request}"
            last_index = request
            req_type = messages[request][0] & 0x0F if messages[request] else 0
            if got[0] & 0x0F in (MsgType.DATA, MsgType.EMPTY):
                assert req_type == MsgType.PULL, f"DATA/EMPTY answers request {request} (not a PULL)"
            self.coverage[response_outcome(got)] += 1
            if got[1] & FLAG_CONGESTED:
                self.coverage["CONGESTED"] += 1
        await feeder
        await with_timeout(self.source.wait(), timeout_cycles * 4, "ns")
        self.compared += len(expected)
        await self.settle()
        assert self.sink.empty(), "DUT sent a response the reference model did not"
        for checker in self.checkers:
            checker.check()

    async def settle(self, cycles: int = 16) -> None:
        from cocotb.triggers import RisingEdge

        for _ in range(cycles):
            await RisingEdge(self.dut.clk)

    async def read_counter(self, select: int) -> int:
        from cocotb.triggers import ReadOnly, RisingEdge

        self.counter_reads.add(select)
        self.dut.cnt_sel.value = select
        await RisingEdge(self.dut.clk)
        await ReadOnly()
        value = int(self.dut.cnt_value.value)
        await RisingEdge(self.dut.clk)
        return value

    async def check_state(self) -> None:
        """Counters and feedback outputs equal the reference model's (after settle())."""
        ref = self.reference.queue
        for outcome in Outcome:
            got = await self.read_counter(CNT_OUTCOME + outcome)
            assert got == ref.counters.outcomes[outcome], f"outcome counter {outcome.name}"
        for msg_type in MsgType:
            got = await self.read_counter(CNT_TYPE + msg_type)
            assert got == ref.counters.msg_types[msg_type], f"msg-type counter {msg_type.name}"
        for verdict in list(Verdict)[1:]:
            got = await self.read_counter(CNT_INVALID + verdict)
            assert got == ref.counters.invalid[verdict], f"invalid counter {verdict.name}"
        flags, active, util = ref.feedback_fields()
        assert int(self.dut.stat_occupied.value) == ref.occupied
        assert int(self.dut.stat_active_clusters.value) == active
        assert int(self.dut.stat_queue_util.value) == util
        assert int(self.dut.stat_congested.value) == flags


def tb_values() -> int:
    """V of the DUT build a cocotb test runs on (set by ``run``)."""
    return int(os.environ.get("OLAF_TB_V", str(V)))
