"""The reference OlafQueue (DESIGN.md §3): pure, deterministic, no I/O.

This is the one place where the queue rules are written in Python. The P4 program
and the Verilog queue are checked against it on the packet vectors in
``tests/vectors/``.

The queue consumes a decoded ``Batch`` and answers with a ``Batch`` of responses
(ACK per UPDATE, DATA or EMPTY per PULL) in input order. The rules are sequential
by nature (each packet sees the state the previous one left), so the loop runs
over plain Python ints taken from the batch in one ``tolist()`` per column; the
values, the wide part, stay in numpy.

Feedback has two revisions (DESIGN.md §3 "Feedback"): revision 3 (the default) gives an
UPDATE's ACK the share of the queue its own cluster can no longer use, revision 2 the
global occupancy on every response; ``feedback`` selects it, at build or at run time.
"""

from __future__ import annotations

import operator
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

FEEDBACK_REVISIONS = (2, 3)
"""What an ACK's queue_util means (DESIGN.md §3 Feedback): 2 the global occupancy,
3 the share of the queue the UPDATE's cluster can no longer use."""
DEFAULT_FEEDBACK = 3

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
_NO_SLOT = (0,) * len(SLOT_FIELDS)
"""What an EMPTY carries in the slot fields."""

# The per-packet loop records one plain int per answered message (numpy converts a
# list of IntEnum members several times slower): an UPDATE's Outcome, or for a PULL
# one of the two codes after them.
_ENQUEUED, _MERGED, _REPLACED = int(Outcome.ENQUEUED), int(Outcome.MERGED), int(Outcome.REPLACED)
_DROPPED_REWARD, _DROPPED_FULL = int(Outcome.DROPPED_REWARD), int(Outcome.DROPPED_FULL)
_DROPPED_INVALID = int(Outcome.DROPPED_INVALID)
_POPPED = len(Outcome)
"""A PULL answered DATA."""
_WAS_EMPTY = len(Outcome) + 1
"""A PULL answered EMPTY."""


def _lookup(table: list[int]) -> np.ndarray:
    array = np.array(table, np.uint8)
    array.flags.writeable = False
    return array


_MSG_TYPE_OF_CODE = _lookup([MsgType.ACK] * len(Outcome) + [MsgType.DATA, MsgType.EMPTY])
_OUTCOME_OF_CODE = _lookup(list(Outcome) + [Outcome.ENQUEUED, Outcome.ENQUEUED])


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
    cluster_quota: int | None = None
    """Slots one cluster may hold at once (DESIGN.md §3 step 4), 1..capacity; None means
    ``capacity`` (no limit), and ``__post_init__`` stores that number, so a
    ``dataclasses.replace`` that changes ``capacity`` must pass ``cluster_quota`` too."""
    feedback: int = DEFAULT_FEEDBACK
    """Feedback revision, 2 or 3 (``FEEDBACK_REVISIONS``)."""

    def __post_init__(self) -> None:
        if self.cluster_quota is None:
            # Frozen: the default depends on capacity, so it is filled in here.
            object.__setattr__(self, "cluster_quota", self.capacity)
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
        check_cluster_quota(self.cluster_quota, self.capacity)
        check_feedback(self.feedback)


def check_feedback(revision: object) -> int:
    """``revision`` as a feedback revision (2 or 3), or ValueError with one line."""
    try:
        # As cluster_quota: ints and numpy integers, not floats; bool is never a revision.
        number = -1 if isinstance(revision, bool) else operator.index(revision)  # type: ignore[arg-type]
    except TypeError:
        number = -1
    if number not in FEEDBACK_REVISIONS:
        raise ValueError(f"feedback must be revision 2 or 3, not {revision!r}")
    return number


def check_cluster_quota(quota: object, capacity: int) -> int:
    """``quota`` as a valid cluster quota for a queue of ``capacity`` slots, or ValueError.

    0 would refuse every new block and more than ``capacity`` is meaningless, so both are
    refused rather than clamped: a controller that writes them has made a mistake.
    """
    try:
        # operator.index takes ints and numpy integers and refuses floats; bool is an int
        # to Python but never a meaningful quota.
        number = -1 if isinstance(quota, bool) else operator.index(quota)  # type: ignore[arg-type]
    except TypeError:
        number = -1
    if not 1 <= number <= capacity:
        raise ValueError(f"cluster_quota must be an integer 1..capacity ({capacity}), not {quota!r}")
    return number


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
        self._cluster_quota: int = config.cluster_quota  # type: ignore[assignment]  # set by __post_init__
        self._feedback = config.feedback
        cap = config.capacity
        # One list per slot, fields in SLOT_FIELDS order: a slot is copied or stored in one C call.
        self._meta: list[list[int]] = [[0] * len(SLOT_FIELDS) for _ in range(cap)]
        # int64 so that a merge adds and saturates in place; every stored value fits int32.
        self.values = np.zeros((cap, config.values), np.int64)
        self.index = [-1] * (config.max_clusters * config.max_blocks)
        """Slot of the newest queued block per ``cluster * max_blocks + block``, or -1."""
        self.cluster_count = [0] * config.max_clusters
        self.active_clusters = 0
        self.write_ptr = 0
        self.read_ptr = 0
        self.occupied = 0
        self.counters = Counters()

    @property
    def slots(self) -> dict[str, list[int]]:
        """Slot metadata by field name (a copy), as the P4 registers would show it."""
        return {name: [m[k] for m in self._meta] for k, name in enumerate(SLOT_FIELDS)}

    @property
    def cluster_quota(self) -> int:
        """Slots one cluster may hold (DESIGN.md §3 step 4); ``capacity`` means no limit."""
        return self._cluster_quota

    @cluster_quota.setter
    def cluster_quota(self, quota: int) -> None:
        # Validated before it is stored: a refused value leaves the queue as it was. A
        # quota below a cluster's current count takes nothing away from it: that cluster
        # only stops appending until PULLs bring it below the quota.
        self._cluster_quota = check_cluster_quota(quota, self.config.capacity)

    @property
    def feedback(self) -> int:
        """Feedback revision (2 or 3) of the ACKs; settable at run time, like ``mode``."""
        return self._feedback

    @feedback.setter
    def feedback(self, revision: int) -> None:
        self._feedback = check_feedback(revision)

    # -- feedback ------------------------------------------------------------------
    @property
    def queue_util(self) -> int:
        """The global occupancy, floor(255 * occupied / capacity): what DATA and EMPTY
        carry, and what CONGESTED is computed from in both revisions."""
        return 255 * self.occupied // self.config.capacity

    @property
    def congested(self) -> bool:
        return self.queue_util >= self.congestion_threshold

    def cluster_util(self, cluster: int) -> int:
        """What the ACK of an UPDATE of ``cluster`` would carry now (DESIGN.md §3 Feedback)."""
        if self._feedback == 2:
            return self.queue_util
        util = self._room_util(np.array([self.cluster_count[cluster]]), np.array([self.occupied]))
        return int(util[0])

    def _room_util(self, held: np.ndarray, occupied: np.ndarray) -> np.ndarray:
        """Revision 3's queue_util of a cluster holding ``held`` slots, ``occupied`` in all."""
        cap = self.config.capacity
        new_room = np.maximum(0, np.minimum(cap - occupied, self._cluster_quota - held))
        # OLAF mode: the cluster's own slots take its next update by merge or replacement;
        # FIFO mode appends only.
        room = held + new_room if self.mode == Mode.OLAF else new_room
        return 255 * (cap - room) // cap

    def feedback_fields(self) -> tuple[int, int, int]:
        """(flags, active_clusters, queue_util) as the next DATA or EMPTY carries them."""
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
        values = batch.values
        codes: list[int] = []
        occupied: list[int] = []
        active: list[int] = []
        held: list[int] = []  # an UPDATE's cluster's slots after it, -1: global feedback
        count = self.cluster_count
        popped: list[int] = []  # slot fields of every DATA/EMPTY, flat, SLOT_FIELDS order
        popped_values: list[np.ndarray] = []
        update = MsgType.UPDATE
        # Answered messages are valid UPDATEs and PULLs, and invalid UPDATEs.
        for i, verdict, msg_type in zip(answered.tolist(), verdicts[answered].tolist(),
                                        types[answered].tolist(), strict=True):
            if verdict:
                # Its cluster_id may be out of range: there is no cluster to speak of (REV3).
                codes.append(_DROPPED_INVALID)
                held.append(-1)
            elif msg_type == update:
                row = rows[i]
                codes.append(self._update(row, values, i))
                held.append(count[row[0]])
            else:
                codes.append(self._pull(popped, popped_values))
                held.append(-1)
            # Feedback is computed after the operation (DESIGN.md §3).
            occupied.append(self.occupied)
            active.append(self.active_clusters)
        code = np.array(codes, np.uint8)
        by_code = np.bincount(code, minlength=_WAS_EMPTY + 1).tolist()
        # DROPPED_INVALID was counted with the other invalid messages by _count.
        for outcome in (_ENQUEUED, _MERGED, _REPLACED, _DROPPED_REWARD, _DROPPED_FULL):
            self.counters.outcomes[outcome] += by_code[outcome]
        responses = self._responses(batch, answered, code, occupied, active, held, popped,
                                    popped_values)
        return responses, answered.astype(np.int64), verdicts

    def _count(self, types: np.ndarray, verdicts: np.ndarray) -> None:
        """Message-type and invalid-reason counters for a batch, in one pass each."""
        counters = self.counters
        # Counted by type: every message whose header could be read (not SHORT/BAD_VERSION/BAD_TYPE).
        heard = (verdicts == Verdict.OK) | (verdicts > Verdict.BAD_TYPE)
        by_type = np.bincount(types[heard], minlength=len(counters.msg_types))
        counters.msg_types = [a + int(b) for a, b in zip(counters.msg_types, by_type, strict=False)]
        by_reason = np.bincount(verdicts, minlength=len(Verdict))
        by_reason[Verdict.OK] = 0
        counters.invalid = [a + int(b) for a, b in zip(counters.invalid, by_reason, strict=True)]
        counters.outcomes[Outcome.DROPPED_INVALID] += int(by_reason.sum())

    def _responses(
        self,
        batch: Batch,
        source: np.ndarray,
        code: np.ndarray,
        occupied: list[int],
        active: list[int],
        held: list[int],
        popped: list[int],
        popped_values: list[np.ndarray],
    ) -> Batch:
        """ACK: the UPDATE header as received with type, outcome and feedback.
        DATA: the popped slot's fields and values. EMPTY: slot fields zero.
        ``held[k]`` is the slots of answer ``k``'s cluster after it (-1: not an UPDATE's
        ACK with a cluster, which carries the global occupancy)."""
        m = len(source)
        # np.take copies records as raw bytes; fancy indexing copies a structured array field by field.
        out = Batch(np.take(batch.headers, source), np.zeros((m, self.config.values), np.int32))
        h = out.headers
        if not m:
            return out
        h["msg_type"] = _MSG_TYPE_OF_CODE[code]
        h["outcome"] = _OUTCOME_OF_CODE[code]
        occ = np.array(occupied, np.int64)
        util = 255 * occ // self.config.capacity
        # CONGESTED and active_clusters stay global in both revisions.
        h["flags"] = np.where(util >= self.congestion_threshold, FLAG_CONGESTED, 0)
        if self._feedback == 3:
            own = np.array(held, np.int64)
            acks = own >= 0
            util = np.where(acks, self._room_util(np.maximum(own, 0), occ), util)
        h["queue_util"] = util
        h["active_clusters"] = np.minimum(active, 255)
        h["num_values"] = 0
        answers = np.flatnonzero(code >= _POPPED)
        if len(answers):
            h["version"][answers] = VERSION
            h["frac_bits"][answers] = self.config.frac_bits
            h["reserved"][answers] = 0
            meta = np.array(popped, np.int64).reshape(len(answers), len(SLOT_FIELDS))
            for k, name in enumerate(SLOT_FIELDS):
                h[name][answers] = meta[:, k]
            data = np.flatnonzero(code == _POPPED)
            if len(data):
                h["num_values"][data] = self.config.values
                out.values[data] = np.array(popped_values)
        return out

    # -- the rules -----------------------------------------------------------------
    def _update(self, u: tuple[int, ...], values: np.ndarray, i: int) -> int:
        """One UPDATE: ``u`` its fields in SLOT_FIELDS order, ``values[i]`` its values."""
        cfg = self.config
        cluster, worker, block = u[0], u[1], u[2]
        key = cluster * cfg.max_blocks + block
        s = self.index[key]
        if s >= 0 and self.mode == Mode.OLAF:
            slot = self._meta[s]
            if slot[3] == 1 and slot[1] == worker:
                self._store(s, u, values[i])
                return _REPLACED
            reward, slot_reward = u[6], slot[6]
            if abs(reward - slot_reward) < self.threshold:
                self._merge(slot, s, u, values[i])
                return _MERGED
            if reward > slot_reward:
                self._store(s, u, values[i])
                return _REPLACED
            return _DROPPED_REWARD
        if self.occupied == cfg.capacity or self.cluster_count[cluster] >= self._cluster_quota:
            return _DROPPED_FULL
        s = self.write_ptr
        self._store(s, u, values[i])
        self.index[key] = s
        if self.cluster_count[cluster] == 0:
            self.active_clusters += 1
        self.cluster_count[cluster] += 1
        self.write_ptr = (s + 1) % cfg.capacity
        self.occupied += 1
        return _ENQUEUED

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
        total = self.values[s]
        np.add(total, values, out=total)
        # np.minimum/np.maximum rather than np.clip: the same saturation without clip's Python wrapper.
        np.minimum(total, INT32_MAX, out=total)
        np.maximum(total, INT32_MIN, out=total)

    def _pull(self, popped: list[int], popped_values: list[np.ndarray]) -> int:
        """Pop the head into ``popped`` (zeros for EMPTY); returns _POPPED or _WAS_EMPTY."""
        if self.occupied == 0:
            popped.extend(_NO_SLOT)
            return _WAS_EMPTY
        cfg = self.config
        s = self.read_ptr
        slot = self._meta[s]
        popped.extend(slot)
        # A copy: a later UPDATE in the same batch may reuse the slot.
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
        return _POPPED
