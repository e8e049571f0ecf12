"""The worker's side of OLAF: gradient -> UPDATE blocks on the wire, ACKs -> feedback.

``Sender.send_gradient`` converts a flat float32 gradient to fixed point, splits it
into blocks of V values (block ``i`` covers ``[i*V, i*V+V)``, the last zero-padded),
asks the send policy (DESIGN.md §4) whether this update goes out, and if so sends all
its blocks as one batch. Every block of an update shares the update's ``seq`` (a
per-worker counter of *sent* updates, wrapping at 2**32), ``model_version``, reward and
``gen_time_us`` (the wrapped microsecond clock at the call).

ACKs are consumed off the learner's path: by a background thread (default), or, with
``ack_thread=False``, by a non-blocking drain at the start of each ``send_gradient``
and whenever the caller runs ``poll``. Each ACK is matched to the block it answers by
``(seq, block_id)``, so the counters say exactly how many blocks got which outcome,
how many are still waiting, and how many were never answered (``lost`` after
``ack_timeout``). The newest ACK's feedback drives the policy.

Figures that show the policy acting: ``sent_updates``, ``skipped_updates``,
``probe_updates`` (sent only because the feedback had expired, DESIGN.md §4), the P_s
of the latest draw and the sum of all draws (``p_s_sum``; the mean over an interval is
the difference of two sums over the difference of ``updates``), and ``silent_s``: for
how long updates have gone out without any ACK coming back (0 while answers arrive).

An update's answers are *due* when all its ACKs came or ``feedback_ttl`` (the policy's, or
DESIGN.md §4's default) has passed since it went out; ``due_blocks`` and
``answered_due_blocks`` count the blocks of the updates then due and of those the ones
answered (their ratio over an interval is the answered share), and a policy with
``settle`` (revision 3's loss ceiling) hears each update's figures then.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from worker_transport.aom import wall_clock_us
from worker_transport.codec import encode_array, packet_dtype, stamp_update, update_batch
from worker_transport.fixedpoint import num_blocks, split_blocks, to_fixed
from worker_transport.policy import DEFAULT_FEEDBACK_TTL_MS, Feedback, OlafPolicy, SendPolicy
from worker_transport.protocol import (
    DEFAULT_FRAC_BITS,
    FLAG_CONGESTED,
    HEADER_LEN,
    VERSION,
    WIRE_DTYPE,
    MsgType,
    Outcome,
)
from worker_transport.transport import Transport

MAX_BLOCKS_ON_WIRE = 1 << 16
"""block_id is 16 bits."""
RTT_GAIN = 0.125
"""Smoothing of ``srtt`` (TCP's alpha)."""


@dataclass
class _Pending:
    """An update whose blocks are not all answered yet."""

    sent_us: int
    acks: np.ndarray
    """ACKs seen per block."""
    remaining: int
    settled: bool = False
    """Its answers were due and have been counted (``answered_share``, the policy's ``settle``)."""


@dataclass(frozen=True)
class AckRecord:
    """One matched ACK, kept when the sender is built with ``record_acks=True``."""

    seq: int
    block_id: int
    outcome: Outcome
    rtt_us: int


def as_float32_vector(gradient: Any) -> np.ndarray:
    """A numpy float32 vector from a numpy array or a torch tensor (any shape, flattened)."""
    if hasattr(gradient, "detach"):  # torch.Tensor, without importing torch
        gradient = gradient.detach().to("cpu").numpy()
    return np.asarray(gradient, dtype=np.float32).reshape(-1)


class Sender:
    """Sends gradient updates of one worker through a transport; see the module doc."""

    def __init__(
        self,
        transport: Transport,
        *,
        cluster_id: int,
        worker_id: int,
        values: int = 64,
        frac_bits: int = DEFAULT_FRAC_BITS,
        policy: SendPolicy | None = None,
        seed: int | None = None,
        ack_thread: bool = True,
        ack_timeout: float = 1.0,
        record_acks: bool = False,
        clock: Callable[[], int] = wall_clock_us,
        shuffle_blocks: bool = False,
    ) -> None:
        checks = [
            (0 <= cluster_id <= 0xFFFF, "cluster_id must be 0..65535"),
            (0 <= worker_id <= 0xFFFF, "worker_id must be 0..65535"),
            (1 <= values <= 255, "values (V) must be 1..255"),
            (0 <= frac_bits <= 31, "frac_bits must be 0..31"),
            (ack_timeout > 0, "ack_timeout must be > 0 seconds"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)
        self.transport = transport
        self.cluster_id = cluster_id
        self.worker_id = worker_id
        self.values = values
        self.frac_bits = frac_bits
        self.policy: SendPolicy = policy if policy is not None else OlafPolicy()
        self._settle = getattr(self.policy, "settle", None)
        self._due_us = float(getattr(self.policy, "feedback_ttl_ms", DEFAULT_FEEDBACK_TTL_MS)) * 1000.0
        self.rng = np.random.default_rng(seed)
        # A drop-tail queue that is full admits the first blocks of each burst: sending
        # them in a fresh random order per update spreads the losses over all blocks.
        # Own stream, so that P_s draws are the same with and without it.
        self.block_rng = np.random.default_rng(seed) if shuffle_blocks else None
        self.clock = clock
        self.ack_timeout_us = int(ack_timeout * 1e6)
        self.feedback: Feedback | None = None
        self.ack_log: list[AckRecord] | None = [] if record_acks else None
        self._lock = threading.Lock()
        self._pending: dict[int, _Pending] = {}
        self._seq = 0
        self._outcomes = np.zeros(len(Outcome), np.int64)
        self._counts = dict.fromkeys(
            ("sent_updates", "skipped_updates", "probe_updates", "sent_blocks", "acked_blocks",
             "lost_blocks", "duplicate_acks", "unexpected_acks", "foreign_packets",
             "due_blocks", "answered_due_blocks"), 0)
        self.last_p_s = 1.0
        self._p_s_sum = 0.0
        self._waiting_since: int | None = None
        """When the first update went out that no ACK has followed yet (None: answered)."""
        self.rtt_us: int | None = None
        self.srtt_us: float | None = None
        self._wire: np.ndarray | None = None
        self.error: BaseException | None = None
        """What stopped the ACK thread, if anything did (re-raised by ``send_gradient``)."""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if ack_thread:
            self._thread = threading.Thread(
                target=self._ack_loop, name=f"olaf-acks-w{worker_id}", daemon=True
            )
            self._thread.start()

    # -- sending -------------------------------------------------------------------
    def send_gradient(self, gradient: Any, *, reward: float, model_version: int) -> bool:
        """Send one update if the policy says so; True if it was sent.

        Raises ``ValueError`` (and sends nothing) on NaN values or reward, an empty
        gradient, or one too large for 16-bit block ids.
        """
        if self._thread is None:
            self.poll(0.0)
        elif self.error is not None:
            raise RuntimeError("the sender's ACK thread failed") from self.error
        flat = as_float32_vector(gradient)
        n = num_blocks(len(flat), self.values)
        # Validate before the policy draw, so bad input is an error even when it would
        # have been skipped, and changes nothing (not even the random stream).
        if not 1 <= n <= MAX_BLOCKS_ON_WIRE:
            raise ValueError(f"{len(flat)} values need {n} blocks; block_id allows 1..65536")
        if math.isnan(reward) or np.isnan(flat).any():
            raise ValueError("cannot send NaN (gradient or reward)")
        now = self.clock()
        feedback = self.feedback
        p = float(self.policy.probability(feedback, now))
        is_probe = getattr(self.policy, "is_probe", None)
        probe = is_probe is not None and bool(is_probe(feedback, now))
        self.last_p_s = p
        self._p_s_sum += p
        if p < 1.0 and not self.rng.random() < p:
            with self._lock:
                self._counts["skipped_updates"] += 1
            return False
        # Converted only once the update is going out: a skipped one costs no more.
        blocks = split_blocks(to_fixed(flat, self.frac_bits), self.values)
        packets = self._packets(n)
        stamp_update(packets["h"], seq=self._seq, model_version=model_version, reward=reward,
                     gen_time_us=now, frac_bits=self.frac_bits)
        packets["v"] = blocks
        rows = packets.view(np.uint8).reshape(n, -1)
        if self.block_rng is not None:
            rows = rows[self.block_rng.permutation(n)]
        with self._lock:
            # Registered before sending: the first ACK can beat the end of the batch.
            self._pending[self._seq] = _Pending(self.clock(), np.zeros(n, np.uint16), n)
            self._counts["sent_updates"] += 1
            self._counts["probe_updates"] += probe
            self._counts["sent_blocks"] += n
            if self._waiting_since is None:
                self._waiting_since = now
        self._seq = (self._seq + 1) & 0xFFFFFFFF
        self.transport.send(rows)
        return True

    def _packets(self, n: int) -> np.ndarray:
        """The wire buffer for an update of ``n`` blocks: the fields every update shares
        are written once, so each update fills only seq, model_version, reward,
        gen_time_us and the values. Reused (``send`` copies into the kernel), and kept
        for the last size only, since a learner's gradient size does not change."""
        if self._wire is None or len(self._wire) != n:
            batch = update_batch(n, values=self.values, frac_bits=self.frac_bits,
                                 cluster_id=self.cluster_id, worker_id=self.worker_id)
            self._wire = encode_array(batch).view(packet_dtype(self.values)).reshape(n)
        return self._wire

    # -- ACKs ----------------------------------------------------------------------
    def poll(self, timeout: float = 0.0) -> int:
        """Read the ACKs waiting (up to ``timeout`` s for the first); returns how many."""
        payloads = self.transport.recv(timeout)
        if payloads:
            self._handle(payloads, self.clock())
        self._expire(self.clock())
        return len(payloads)

    def _ack_loop(self) -> None:
        try:
            while not self._stop.is_set():
                self.poll(0.05)
        except BaseException as e:  # a thread cannot raise to its caller: send_gradient does
            self.error = e

    def _handle(self, payloads: list[bytes], now: int) -> None:
        # An ACK is exactly the 36-byte header: read the few fields needed straight off
        # the big-endian wire layout (a full decode costs twice as much, on the thread
        # that shares the GIL with the learner).
        raw = b"".join(payloads)
        n = len(payloads)
        if len(raw) != HEADER_LEN * n:
            kept = [p for p in payloads if len(p) == HEADER_LEN]
            raw = b"".join(kept)
        wire = np.frombuffer(raw, WIRE_DTYPE)
        mine = wire[
            (wire["ver_type"] == (VERSION << 4 | MsgType.ACK))
            & (wire["cluster_id"] == self.cluster_id)
            & (wire["worker_id"] == self.worker_id)
        ]
        with self._lock:
            self._counts["foreign_packets"] += n - len(mine)
            if not len(mine):
                return
            last = mine[-1]
            self._waiting_since = None
            self.feedback = Feedback(
                queue_util=int(last["queue_util"]),
                active_clusters=int(last["active_clusters"]),
                congested=bool(last["flags"] & FLAG_CONGESTED),
                received_us=now,
            )
            outcomes = mine["outcome"].astype(np.int64)
            known = outcomes < len(Outcome)
            self._outcomes += np.bincount(outcomes[known], minlength=len(Outcome))
            self._counts["unexpected_acks"] += int((~known).sum())
            seqs = mine["seq"][known].astype(np.int64)
            blocks = mine["block_id"][known].astype(np.int64)
            outcomes = outcomes[known]
            if not len(seqs):
                return
            first = int(seqs[0])
            if (seqs == first).all():  # the usual read: the ACKs of one update
                self._match(first, blocks, outcomes, now)
                return
            for seq in np.unique(seqs).tolist():
                same = seqs == seq
                self._match(seq, blocks[same], outcomes[same], now)

    def _match(self, seq: int, blocks: np.ndarray, outcomes: np.ndarray, now: int) -> None:
        """Account the ACKs of update ``seq`` (block ids, outcomes), in arrival order."""
        entry = self._pending.get(seq)
        if entry is None:
            # Answer to an update already complete or expired: a duplicate or a late ACK.
            self._counts["unexpected_acks"] += len(blocks)
            return
        in_range = blocks < len(entry.acks)
        if not in_range.all():
            self._counts["unexpected_acks"] += int((~in_range).sum())
            blocks, outcomes = blocks[in_range], outcomes[in_range]
        before = entry.acks.copy()
        np.add.at(entry.acks, blocks, 1)
        newly = int(((before == 0) & (entry.acks > 0)).sum())
        self._counts["acked_blocks"] += newly
        self._counts["duplicate_acks"] += len(blocks) - newly
        entry.remaining -= newly
        rtt = now - entry.sent_us
        self.rtt_us = rtt
        self.srtt_us = rtt if self.srtt_us is None else (
            (1 - RTT_GAIN) * self.srtt_us + RTT_GAIN * rtt
        )
        if self.ack_log is not None:
            self.ack_log.extend(
                AckRecord(seq, b, Outcome(o), rtt)
                for b, o in zip(blocks.tolist(), outcomes.tolist(), strict=True)
            )
        if entry.remaining == 0:
            if not entry.settled:
                self._settle_entry(entry)
            del self._pending[seq]

    def _settle_entry(self, entry: _Pending) -> None:
        """The answers of ``entry`` are due: count them once, and tell the policy."""
        entry.settled = True
        sent = len(entry.acks)
        answered = sent - entry.remaining
        self._counts["due_blocks"] += sent
        self._counts["answered_due_blocks"] += answered
        if self._settle is not None:
            self._settle(sent, answered)

    def _expire(self, now: int) -> None:
        with self._lock:
            if not self._pending:
                return
            old = []
            for seq, e in self._pending.items():
                age = now - e.sent_us
                if not e.settled and age > self._due_us:
                    self._settle_entry(e)
                if age > self.ack_timeout_us:
                    if not e.settled:  # an ack_timeout below feedback_ttl: due now too
                        self._settle_entry(e)
                    old.append(seq)
            for seq in old:
                self._counts["lost_blocks"] += self._pending.pop(seq).remaining

    # -- state -----------------------------------------------------------------------
    @property
    def outstanding_blocks(self) -> int:
        with self._lock:
            return sum(e.remaining for e in self._pending.values())

    def wait_for_acks(self, timeout: float) -> bool:
        """Block until every sent block is answered or expired; False on timeout."""
        deadline = self.clock() + int(timeout * 1e6)
        while self.outstanding_blocks:
            if self.clock() >= deadline:
                return False
            if self._thread is None:
                self.poll(0.01)
            else:
                self._stop.wait(0.005)
        return True

    def silent_us(self, now: int | None = None) -> int:
        """Microseconds for which sent updates have had no ACK at all (0: answered)."""
        since = self._waiting_since
        if since is None:
            return 0
        return max((self.clock() if now is None else now) - since, 0)

    def stats(self) -> dict[str, Any]:
        """Counters per outcome and per fate, P_s (now, last draw, sum of draws), RTT
        (ms), last feedback, and ``silent_s`` (see the module doc)."""
        now = self.clock()
        with self._lock:
            fb = self.feedback
            out: dict[str, Any] = {"worker_id": self.worker_id, **self._counts}
            out["outstanding_blocks"] = sum(e.remaining for e in self._pending.values())
            out["outcomes"] = {o.name: int(self._outcomes[o]) for o in Outcome}
            rtt, srtt = self.rtt_us, self.srtt_us
            silent = self.silent_us(now)
        out["updates"] = out["sent_updates"] + out["skipped_updates"]
        out["p_s"] = float(self.policy.probability(fb, now))
        out["p_s_last"] = self.last_p_s
        out["p_s_sum"] = self._p_s_sum
        out["p_s_mean"] = self._p_s_sum / out["updates"] if out["updates"] else None
        # Revision 3's loss ceiling L and the answered share a of the last update due
        # (None for a policy without them).
        ceiling = getattr(self.policy, "ceiling", None)
        out["loss_ceiling"] = None if ceiling is None else float(ceiling)
        out["answered_share"] = getattr(self.policy, "answered_share", None)
        out["answered"] = fb is not None
        out["silent_s"] = silent / 1e6
        out["rtt_ms"] = None if rtt is None else rtt / 1000.0
        out["srtt_ms"] = None if srtt is None else srtt / 1000.0
        out["queue_util"] = None if fb is None else fb.queue_util
        out["active_clusters"] = None if fb is None else fb.active_clusters
        out["congested"] = None if fb is None else fb.congested
        out["send_errors"] = int(getattr(self.transport, "send_errors", 0))
        out["ack_thread_error"] = None if self.error is None else repr(self.error)
        return out

    def close(self) -> None:
        """Stop the ACK thread and close the transport. Idempotent."""
        self._stop.set()
        if self._thread is not None and self._thread.is_alive():
            self._thread.join()
        self.transport.close()

    def __enter__(self) -> Sender:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
