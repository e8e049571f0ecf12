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
    HEADER_DTYPE,
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
        self.slots: dict[str, list[int]] = {name: [0] * cap for name in SLOT_FIELDS}
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
        """
        cfg = self.config
        verdicts = classify(
            batch,
            values=cfg.values,
            frac_bits=cfg.frac_bits,
            max_clusters=cfg.max_clusters,
            max_blocks=cfg.max_blocks,
        )
        n = len(batch)
        out_values = np.zeros((n, cfg.values), np.int32)
        out_cols: dict[str, list[int]] = {name: [0] * n for name in HEADER_DTYPE.names}
        in_cols = {name: batch.headers[name].tolist() for name in HEADER_DTYPE.names}
        counters = self.counters
        source: list[int] = []
        for i, verdict in enumerate(verdicts.tolist()):
            msg_type = in_cols["msg_type"][i]
            if verdict not in (Verdict.SHORT, Verdict.BAD_VERSION, Verdict.BAD_TYPE):
                counters.msg_types[msg_type] += 1
            if verdict != Verdict.OK:
                counters.invalid[verdict] += 1
                counters.outcomes[Outcome.DROPPED_INVALID] += 1
                if Verdict(verdict).answered:
                    self._answer_update(out_cols, len(source), in_cols, i, Outcome.DROPPED_INVALID)
                    source.append(i)
                continue
            if msg_type == MsgType.UPDATE:
                outcome = self._update(in_cols, i, batch.values[i])
                counters.outcomes[outcome] += 1
                self._answer_update(out_cols, len(source), in_cols, i, outcome)
                source.append(i)
            elif msg_type == MsgType.PULL:
                self._pull(out_cols, out_values, len(source))
                source.append(i)
        m = len(source)
        responses = Batch(np.empty(m, HEADER_DTYPE), out_values[:m].copy())
        for name, column in out_cols.items():
            responses.headers[name] = column[:m]
        return responses, np.asarray(source, np.int64), verdicts

    # -- the rules -----------------------------------------------------------------
    def _update(self, u: dict[str, list[int]], i: int, values: np.ndarray) -> Outcome:
        cfg = self.config
        key = u["cluster_id"][i] * cfg.max_blocks + u["block_id"][i]
        s = self.index[key]
        slots = self.slots
        if self.mode == Mode.OLAF and s >= 0:
            if slots["agg_count"][s] == 1 and slots["worker_id"][s] == u["worker_id"][i]:
                self._store(s, u, i, values)
                return Outcome.REPLACED
            reward, slot_reward = u["reward"][i], slots["reward"][s]
            if abs(reward - slot_reward) < self.threshold:
                self._merge(s, u, i, values)
                return Outcome.MERGED
            if reward > slot_reward:
                self._store(s, u, i, values)
                return Outcome.REPLACED
            return Outcome.DROPPED_REWARD
        if self.occupied == cfg.capacity:
            return Outcome.DROPPED_FULL
        s = self.write_ptr
        self._store(s, u, i, values)
        self.index[key] = s
        cluster = u["cluster_id"][i]
        if self.cluster_count[cluster] == 0:
            self.active_clusters += 1
        self.cluster_count[cluster] += 1
        self.write_ptr = (s + 1) % cfg.capacity
        self.occupied += 1
        return Outcome.ENQUEUED

    def _store(self, s: int, u: dict[str, list[int]], i: int, values: np.ndarray) -> None:
        for name in SLOT_FIELDS:
            self.slots[name][s] = u[name][i]
        self.values[s] = values

    def _merge(self, s: int, u: dict[str, list[int]], i: int, values: np.ndarray) -> None:
        slots = self.slots
        slots["agg_count"][s] = min(slots["agg_count"][s] + 1, 0xFFFF)
        slots["reward"][s] = max(slots["reward"][s], u["reward"][i])
        slots["gen_time_us"][s] = min(slots["gen_time_us"][s], u["gen_time_us"][i])
        slots["model_version"][s] = min(slots["model_version"][s], u["model_version"][i])
        slots["contributors"][s] |= u["contributors"][i]
        np.add(self.values[s], values, out=self._sum, dtype=np.int64)
        np.clip(self._sum, INT32_MIN, INT32_MAX, out=self._sum)
        self.values[s] = self._sum

    def _pull(self, out: dict[str, list[int]], out_values: np.ndarray, j: int) -> None:
        cfg = self.config
        if self.occupied == 0:
            for name in SLOT_FIELDS:
                out[name][j] = 0
            self._fill(out, j, MsgType.EMPTY, num_values=0)
            return
        s = self.read_ptr
        for name in SLOT_FIELDS:
            out[name][j] = self.slots[name][s]
        out_values[j] = self.values[s]
        cluster = self.slots["cluster_id"][s]
        key = cluster * cfg.max_blocks + self.slots["block_id"][s]
        if self.index[key] == s:
            self.index[key] = -1
        self.cluster_count[cluster] -= 1
        if self.cluster_count[cluster] == 0:
            self.active_clusters -= 1
        self.read_ptr = (s + 1) % cfg.capacity
        self.occupied -= 1
        self._fill(out, j, MsgType.DATA, num_values=cfg.values)

    def _fill(self, out: dict[str, list[int]], j: int, msg_type: MsgType, num_values: int) -> None:
        """Header fields every DATA and EMPTY carries: type, feedback, V, frac_bits."""
        flags, active, util = self.feedback()
        out["version"][j] = VERSION
        out["msg_type"][j] = msg_type
        out["flags"][j] = flags
        out["outcome"][j] = Outcome.ENQUEUED
        out["active_clusters"][j] = active
        out["queue_util"][j] = util
        out["num_values"][j] = num_values
        out["frac_bits"][j] = self.config.frac_bits
        out["reserved"][j] = 0

    def _answer_update(
        self, out: dict[str, list[int]], j: int, u: dict[str, list[int]], i: int, outcome: Outcome
    ) -> None:
        """The ACK: the UPDATE's header as received, with type, outcome and feedback."""
        flags, active, util = self.feedback()
        for name, column in out.items():
            column[j] = u[name][i]
        out["msg_type"][j] = MsgType.ACK
        out["flags"][j] = flags
        out["outcome"][j] = outcome
        out["active_clusters"][j] = active
        out["queue_util"][j] = util
        out["num_values"][j] = 0
