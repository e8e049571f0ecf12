"""The reference OlafQueue (DESIGN.md §3): pure, deterministic, no I/O.

This is the one place where the queue rules are written in Python. The P4 program
and the Verilog queue are checked against it on the packet vectors in
``tests/vectors/``.

The queue consumes a decoded ``Batch`` and answers with a ``Batch`` of responses
(ACK per UPDATE, DATA or EMPTY per PULL) in input order. The rules are sequential
by nature (each packet sees the state the previous one left), so the loop runs
over plain Python ints taken from the batch in one ``tolist()`` per column; the
values, the wide part, stay in numpy.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from worker_transport.codec import Batch, Verdict, classify
from worker_transport.protocol import (
    DEFAULT_CONGESTION_THRESHOLD,
    DEFAULT_FRAC_BITS,
    FLAG_CONGESTED,
    INT32_MAX,
    INT32_MIN,
    VERSION,
    Mode,
    MsgType,
    Outcome,
)

SLOT_FIELDS = (
    "cluster_id",
    "worker_id",
    "block_id",
    "agg_count",
    "seq",
    "model_version",
    "reward",
    "gen_time_us",
    "contributors",
)
"""Per-slot metadata, in the order the P4 registers and the RTL store it."""


@dataclass(frozen=True)
class QueueConfig:
    """Dimensions fixed when the queue is built, and the controller's initial settings."""

    capacity: int = 64
    """Slots in the ring."""
    values: int = 64
    """V, values per block."""
    max_clusters: int = 16
    """cluster_id must be below this."""
    max_blocks: int = 1024
    """block_id must be below this."""
    frac_bits: int = DEFAULT_FRAC_BITS
    """Fixed-point fraction bits that every UPDATE must carry."""
    mode: Mode = Mode.OLAF
    threshold: int = INT32_MAX
    """Reward threshold in raw fixed point; the largest value until the controller sets one."""
    congestion_threshold: int = DEFAULT_CONGESTION_THRESHOLD
    """CONGESTED is set when queue_util >= this (0-255)."""

    def __post_init__(self) -> None:
        checks = [
            (1 <= self.capacity <= 65535, "capacity must be 1..65535"),
            (1 <= self.values <= 255, "values (V) must be 1..255 on the wire"),
            (1 <= self.max_clusters <= 65536, "max_clusters must be 1..65536"),
            (1 <= self.max_blocks <= 65536, "max_blocks must be 1..65536"),
            (0 <= self.frac_bits <= 31, "frac_bits must be 0..31"),
            (0 <= self.threshold <= INT32_MAX, "threshold must be 0..2**31-1 (raw fixed point)"),
            (0 <= self.congestion_threshold <= 255, "congestion_threshold must be 0..255"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)


@dataclass
class Counters:
    """What the queue has seen: per outcome, per message type, per invalid reason."""

    outcomes: list[int] = field(default_factory=lambda: [0] * len(Outcome))
    """Index Outcome; DROPPED_INVALID counts every invalid message, answered or not."""
    msg_types: list[int] = field(default_factory=lambda: [0] * 8)
    """Index msg_type of every arriving message with a full, version-1 header and type 1..6."""
    invalid: list[int] = field(default_factory=lambda: [0] * len(Verdict))
    """Index Verdict (OK stays 0)."""


class OlafQueue:
    """Slot ring + ``[cluster][block]`` index + feedback, as DESIGN.md §3 defines them."""

    def __init__(self, config: QueueConfig | None = None) -> None:
        self.config = config = config or QueueConfig()
        self.mode = Mode(config.mode)
        self.threshold = config.threshold
        self.congestion_threshold = config.congestion_threshold
        cap = config.capacity
        # One list per slot, fields in SLOT_FIELDS order: a slot is copied or stored in one C call.
        self._meta: list[list[int]] = [[0] * len(SLOT_FIELDS) for _ in range(cap)]
        self.values = np.zeros((cap, config.values), np.int32)
        self.index = [-1] * (config.max_clusters * config.max_blocks)
        """Slot of the newest queued block per ``cluster * max_blocks + block``, or -1."""
        self.cluster_count = [0] * config.max_clusters
        self.active_clusters = 0
        self.write_ptr = 0
        self.read_ptr = 0
        self.occupied = 0
        self.counters = Counters()
        self._sum = np.zeros(config.values, np.int64)

    @property
    def slots(self) -> dict[str, list[int]]:
        """Slot metadata by field name (a copy), as the P4 registers would show it."""
        return {name: [m[k] for m in self._meta] for k, name in enumerate(SLOT_FIELDS)}

    # -- feedback ------------------------------------------------------------------
    @property
    def queue_util(self) -> int:
        return 255 * self.occupied // self.config.capacity

    @property
    def congested(self) -> bool:
        return self.queue_util >= self.congestion_threshold

    def feedback(self) -> tuple[int, int, int]:
        """(flags, active_clusters, queue_util) as the next response carries them."""
        util = self.queue_util
        flags = FLAG_CONGESTED if util >= self.congestion_threshold else 0
        return flags, min(self.active_clusters, 255), util

    # -- batch entry point ---------------------------------------------------------
    def process(self, batch: Batch) -> tuple[Batch, np.ndarray, np.ndarray]:
        """Run a batch through the queue.

        Returns ``(responses, source, verdicts)``: the response packets in order,
        the input index each one answers, and the ``Verdict`` of every input.
        MODEL messages get no response: forwarding them is the I/O layer's job.

        The loop only decides and records (outcome, feedback, popped slot); the
        response headers are assembled afterwards for the whole batch in numpy.
        """
        cfg = self.config
        verdicts = classify(
            batch,
            values=cfg.values,
            frac_bits=cfg.frac_bits,
            max_clusters=cfg.max_clusters,
            max_blocks=cfg.max_blocks,
        )
        h = batch.headers
        types = h["msg_type"]
        self._count(types, verdicts)
        # Only valid UPDATEs and PULLs, and UPDATEs answered DROPPED_INVALID, get an answer.
        answered = np.flatnonzero(
            ((verdicts == Verdict.OK) & ((types == MsgType.UPDATE) | (types == MsgType.PULL)))
            | (verdicts >= Verdict.BAD_LENGTH)
        )
        rows = list(zip(*(h[name].tolist() for name in SLOT_FIELDS), strict=True))
        source = answered.tolist()
        kinds: list[int] = []
        outcomes: list[int] = []
        occupied: list[int] = []
        active: list[int] = []
        popped: list[list[int]] = []
        popped_values: list[np.ndarray] = []
        update, pull, ack = MsgType.UPDATE, MsgType.PULL, MsgType.ACK
        for i, verdict, msg_type in zip(source, verdicts[answered].tolist(), types[answered].tolist(),
                                        strict=True):
            if verdict:
                kinds.append(ack)
                outcomes.append(Outcome.DROPPED_INVALID)
            elif msg_type == update:
                kinds.append(ack)
                outcomes.append(self._update(rows[i], batch.values[i]))
            elif msg_type == pull:
                kinds.append(self._pull(popped, popped_values))
                outcomes.append(Outcome.ENQUEUED)
            # Feedback is computed after the operation (DESIGN.md §3).
            occupied.append(self.occupied)
            active.append(self.active_clusters)
        self._count_outcomes(kinds, outcomes)
        responses = self._responses(batch, source, kinds, outcomes, occupied, active, popped, popped_values)
        return responses, answered.astype(np.int64), verdicts

    def _count(self, types: np.ndarray, verdicts: np.ndarray) -> None:
        """Message-type and invalid-reason counters for a batch, in one pass each."""
        counters = self.counters
        heard = ~np.isin(verdicts, (Verdict.SHORT, Verdict.BAD_VERSION, Verdict.BAD_TYPE))
        by_type = np.bincount(types[heard], minlength=len(counters.msg_types))
        counters.msg_types = [a + int(b) for a, b in zip(counters.msg_types, by_type, strict=False)]
        by_reason = np.bincount(verdicts, minlength=len(Verdict))
        by_reason[Verdict.OK] = 0
        counters.invalid = [a + int(b) for a, b in zip(counters.invalid, by_reason, strict=True)]
        counters.outcomes[Outcome.DROPPED_INVALID] += int(by_reason.sum())

    def _count_outcomes(self, kinds: list[int], outcomes: list[int]) -> None:
        """Outcomes of valid UPDATEs (invalid ones were counted by ``_count``)."""
        if not kinds:
            return
        acks = np.asarray(outcomes)[np.asarray(kinds) == MsgType.ACK]
        by_outcome = np.bincount(acks[acks != Outcome.DROPPED_INVALID], minlength=len(Outcome))
        for outcome, n in enumerate(by_outcome.tolist()):
            self.counters.outcomes[outcome] += n

    def _responses(
        self,
        batch: Batch,
        source: list[int],
        kinds: list[int],
        outcomes: list[int],
        occupied: list[int],
        active: list[int],
        popped: list[list[int]],
        popped_values: list[np.ndarray],
    ) -> Batch:
        """ACK: the UPDATE header as received with type, outcome and feedback.
        DATA: the popped slot's fields and values. EMPTY: slot fields zero."""
        m = len(source)
        index = np.asarray(source, np.int64)
        out = Batch(batch.headers[index], np.zeros((m, self.config.values), np.int32))
        h = out.headers
        if not m:
            return out
        kind = np.asarray(kinds, np.uint8)
        h["msg_type"] = kind
        h["outcome"] = outcomes
        util = 255 * np.asarray(occupied, np.int64) // self.config.capacity
        h["queue_util"] = util
        h["flags"] = np.where(util >= self.congestion_threshold, FLAG_CONGESTED, 0)
        h["active_clusters"] = np.minimum(active, 255)
        h["num_values"] = 0
        answers = np.flatnonzero(kind != MsgType.ACK)
        if len(answers):
            h["version"][answers] = VERSION
            h["frac_bits"][answers] = self.config.frac_bits
            h["reserved"][answers] = 0
            meta = np.asarray(popped, np.int64).reshape(len(answers), len(SLOT_FIELDS))
            for k, name in enumerate(SLOT_FIELDS):
                h[name][answers] = meta[:, k]
            data = answers[kind[answers] == MsgType.DATA]
            if len(data):
                h["num_values"][data] = self.config.values
                out.values[data] = np.stack(popped_values)
        return out

    # -- the rules -----------------------------------------------------------------
    def _update(self, u: tuple[int, ...], values: np.ndarray) -> Outcome:
        """One UPDATE, ``u`` its fields in SLOT_FIELDS order."""
        cfg = self.config
        cluster, worker, block = u[0], u[1], u[2]
        key = cluster * cfg.max_blocks + block
        s = self.index[key]
        if self.mode == Mode.OLAF and s >= 0:
            slot = self._meta[s]
            if slot[3] == 1 and slot[1] == worker:
                self._store(s, u, values)
                return Outcome.REPLACED
            reward, slot_reward = u[6], slot[6]
            if abs(reward - slot_reward) < self.threshold:
                self._merge(slot, s, u, values)
                return Outcome.MERGED
            if reward > slot_reward:
                self._store(s, u, values)
                return Outcome.REPLACED
            return Outcome.DROPPED_REWARD
        if self.occupied == cfg.capacity:
            return Outcome.DROPPED_FULL
        s = self.write_ptr
        self._store(s, u, values)
        self.index[key] = s
        if self.cluster_count[cluster] == 0:
            self.active_clusters += 1
        self.cluster_count[cluster] += 1
        self.write_ptr = (s + 1) % cfg.capacity
        self.occupied += 1
        return Outcome.ENQUEUED

    def _store(self, s: int, u: tuple[int, ...], values: np.ndarray) -> None:
        self._meta[s] = list(u)
        self.values[s] = values

    def _merge(self, slot: list[int], s: int, u: tuple[int, ...], values: np.ndarray) -> None:
        # SLOT_FIELDS: 3 agg_count, 5 model_version, 6 reward, 7 gen_time_us, 8 contributors.
        slot[3] = min(slot[3] + 1, 0xFFFF)
        slot[5] = min(slot[5], u[5])
        slot[6] = max(slot[6], u[6])
        slot[7] = min(slot[7], u[7])
        slot[8] |= u[8]
        total = self._sum
        np.add(self.values[s], values, out=total, dtype=np.int64)
        # np.minimum/np.maximum rather than np.clip: the same saturation without clip's Python wrapper.
        np.minimum(total, INT32_MAX, out=total)
        np.maximum(total, INT32_MIN, out=total)
        self.values[s] = total

    def _pull(self, popped: list[list[int]], popped_values: list[np.ndarray]) -> MsgType:
        """Pop the head into ``popped`` (zeros for EMPTY); returns DATA or EMPTY."""
        if self.occupied == 0:
            popped.append([0] * len(SLOT_FIELDS))
            return MsgType.EMPTY
        cfg = self.config
        s = self.read_ptr
        slot = self._meta[s]
        popped.append(list(slot))
        popped_values.append(self.values[s].copy())
        cluster = slot[0]
        key = cluster * cfg.max_blocks + slot[2]
        if self.index[key] == s:
            self.index[key] = -1
        self.cluster_count[cluster] -= 1
        if self.cluster_count[cluster] == 0:
            self.active_clusters -= 1
        self.read_ptr = (s + 1) % cfg.capacity
        self.occupied -= 1
        return MsgType.DATA
