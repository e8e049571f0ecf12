"""The parameter server's side of OLAF: PULL, decode DATA, hand blocks on, measure AoM.

The PS drives the queue (DESIGN.md §1): each PULL it sends comes back as DATA (the
head slot) or EMPTY. Two pacing modes:

* ``pull_rate=R``: PULLs leave at R per second on a fixed schedule, whatever comes
  back: the PS's apply rate is the bottleneck the queue absorbs. If the thread falls
  behind it catches up by at most ``max_burst`` PULLs and forgets the rest.
* ``pull_rate=None``: as fast as the PS can apply: ``window`` PULLs in flight, each
  answer (DATA or EMPTY) releases the next one. When a whole read brings only EMPTY,
  the receiver waits ``idle_backoff`` s before pulling again, so an idle queue does
  not become a busy loop.

Loss never stalls it: paced PULLs do not wait for answers, and in the windowed mode a
PULL unanswered after ``pull_timeout`` is written off (``expired_pulls``) and its
place in the window reused.

Each DATA becomes a ``ReceivedBlock``: the slot's metadata, the reward as a float and
the values as float32 **averaged** over ``agg_count`` (the switch sums, the PS wants the
mean gradient of the contributors). Blocks go to ``on_block`` one by one and/or to
``on_batch`` as a ``DataBatch`` (columns, for appliers that vectorise). Every DATA is
also recorded in ``aom`` (an ``AoMTracker``), which is sampled on its fixed clock.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from worker_transport.aom import DEFAULT_SAMPLE_INTERVAL_US, AoMTracker, wall_clock_us
from worker_transport.codec import Batch, decode, encode_array, mean_values
from worker_transport.protocol import (
    DEFAULT_FRAC_BITS,
    FLAG_CONGESTED,
    HEADER_LEN,
    VALUE_BYTES,
    VERSION,
    MsgType,
)
from worker_transport.transport import Transport


@dataclass(slots=True)
class ReceivedBlock:
    """One DATA as the PS uses it."""

    cluster_id: int
    worker_id: int
    """The slot's first contributor."""
    block_id: int
    agg_count: int
    seq: int
    model_version: int
    """Oldest model version among the contributors."""
    reward: float
    gen_time_us: int
    """Oldest contributor's generation time, 32-bit wrapped."""
    contributors: int
    values: np.ndarray
    """float32, the contributors' summed values divided by ``agg_count``."""
    received_at: int
    """Unwrapped microseconds on the PS clock (``wall_clock_us`` by default)."""


@dataclass(frozen=True)
class DataBatch:
    """The DATA of one read, as columns: ``headers`` (HEADER_DTYPE) and averaged values."""

    headers: np.ndarray
    values: np.ndarray
    """``(n, V)`` float32, averaged by agg_count."""
    rewards: np.ndarray
    """float64 rewards."""
    received_at: int

    def __len__(self) -> int:
        return len(self.headers)

    def blocks(self) -> list[ReceivedBlock]:
        h = self.headers
        cols = [h[name].tolist() for name in (
            "cluster_id", "worker_id", "block_id", "agg_count", "seq", "model_version")]
        gen, contrib = h["gen_time_us"].tolist(), h["contributors"].tolist()
        rewards, t = self.rewards.tolist(), self.received_at
        return [
            ReceivedBlock(c, w, b, a, s, m, r, g, k, v, t)
            for c, w, b, a, s, m, r, g, k, v in zip(
                *cols, rewards, gen, contrib, self.values, strict=True)
        ]


def scatter_add(model: np.ndarray, block_ids: np.ndarray, values: np.ndarray,
                scale: float = 1.0) -> None:
    """``model[block_ids[i]] += scale * values[i]`` for a ``(blocks, V)`` model, in place.

    Several rows for the same block all count (unlike ``model[ids] += x``). Much faster
    than ``np.add.at``: unique ids take one fancy-indexed update; otherwise rows are
    summed per block with ``np.add.reduceat`` first.
    """
    ids = np.asarray(block_ids, np.int64)
    if not len(ids):
        return
    uniq = np.unique(ids)
    if len(uniq) == len(ids):
        model[ids] += scale * values
        return
    order = np.argsort(ids, kind="stable")
    starts = np.searchsorted(ids[order], uniq)
    model[uniq] += scale * np.add.reduceat(values[order], starts, axis=0)


def pull_packet(frac_bits: int = DEFAULT_FRAC_BITS) -> np.ndarray:
    """One 36-byte PULL as a ``(1, 36)`` uint8 row."""
    batch = Batch.zeros(1, 0)
    h = batch.headers
    h["version"], h["msg_type"], h["frac_bits"] = VERSION, MsgType.PULL, frac_bits
    return encode_array(batch)


class Receiver:
    """Pulls blocks from the switch on a background thread; see the module doc."""

    def __init__(
        self,
        transport: Transport,
        *,
        values: int = 64,
        frac_bits: int = DEFAULT_FRAC_BITS,
        pull_rate: float | None = None,
        on_block: Callable[[ReceivedBlock], None] | None = None,
        on_batch: Callable[[DataBatch], None] | None = None,
        window: int = 32,
        pull_timeout: float = 0.05,
        idle_backoff: float = 0.001,
        max_burst: int = 256,
        aom: AoMTracker | None = None,
        sample_interval_us: int = DEFAULT_SAMPLE_INTERVAL_US,
        workers: int = 32,
        clock: Callable[[], int] = wall_clock_us,
    ) -> None:
        checks = [
            (1 <= values <= 255, "values (V) must be 1..255"),
            (0 <= frac_bits <= 31, "frac_bits must be 0..31"),
            (pull_rate is None or pull_rate > 0, "pull_rate must be > 0 PULLs/s, or None"),
            (window >= 1, "window must be >= 1 PULL"),
            (pull_timeout > 0, "pull_timeout must be > 0 s"),
            (idle_backoff >= 0, "idle_backoff must be >= 0 s"),
            (max_burst >= 1, "max_burst must be >= 1"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)
        self.transport = transport
        self.values = values
        self.frac_bits = frac_bits
        self.pull_rate = pull_rate
        self.on_block = on_block
        self.on_batch = on_batch
        self.window = window
        self.pull_timeout_us = int(pull_timeout * 1e6)
        self.idle_backoff = idle_backoff
        self.max_burst = max_burst
        self.clock = clock
        self.aom = aom if aom is not None else AoMTracker(
            interval_us=sample_interval_us, workers=workers, clock=clock)
        self._pull_row = pull_packet(frac_bits)
        self._data_length = HEADER_LEN + VALUE_BYTES * values
        self._scale = 2.0 ** -frac_bits
        self._lock = threading.Lock()
        self._counts = dict.fromkeys(
            ("pulls_sent", "data_blocks", "aggregated_updates", "empty", "expired_pulls",
             "bad_data", "foreign_packets"), 0)
        self.empty_streak = 0
        """EMPTY answers since the last DATA: the queue is drained when this grows."""
        self.queue_util: int | None = None
        self.active_clusters: int | None = None
        self.congested: bool | None = None
        self.error: BaseException | None = None
        self._first_pull_us: int | None = None
        self._last_answer_us: int | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._in_flight: collections.deque[list[int]] = collections.deque()
        """Windowed mode: ``[sent_us, count]`` of PULL batches still unanswered, oldest first."""

    # -- lifecycle -----------------------------------------------------------------
    def start(self) -> Receiver:
        if self._thread is not None:
            raise RuntimeError("receiver already started")
        self._thread = threading.Thread(target=self._run, name="olaf-ps-receiver", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop pulling and join the thread; re-raises an error the thread died of."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.aom.advance()
        if self.error is not None:
            error, self.error = self.error, None
            raise error

    def close(self) -> None:
        """Stop and close the transport."""
        try:
            self.stop()
        finally:
            self.transport.close()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _run(self) -> None:
        try:
            if self.pull_rate is None:
                self._run_windowed()
            else:
                self._run_paced(self.pull_rate)
        except BaseException as e:  # surfaced by stop(): a thread cannot raise to its caller
            # close() joins this thread before closing the transport, so no error here is
            # an artefact of shutting down.
            self.error = e

    def _send_pulls(self, n: int) -> None:
        if self._first_pull_us is None:
            self._first_pull_us = self.clock()
        self.transport.send(np.repeat(self._pull_row, n, axis=0))
        with self._lock:
            self._counts["pulls_sent"] += n

    def _run_paced(self, rate: float) -> None:
        start = self.clock()
        scheduled = 0
        while not self._stop.is_set():
            now = self.clock()
            due = int((now - start) * rate / 1e6) + 1 - scheduled
            if due > 0:
                self._send_pulls(min(due, self.max_burst))
                scheduled += due
            next_us = start + scheduled * 1e6 / rate
            timeout = min(max(next_us - self.clock(), 0.0) / 1e6, 0.05)
            payloads = self.transport.recv(timeout)
            now = self.clock()
            if payloads:
                self._handle(payloads, now)
            self.aom.advance(now)

    def _run_windowed(self) -> None:
        in_flight = self._in_flight
        outstanding = 0
        while not self._stop.is_set():
            now = self.clock()
            while in_flight and now - in_flight[0][0] > self.pull_timeout_us:
                lost = in_flight.popleft()[1]
                outstanding -= lost
                with self._lock:
                    self._counts["expired_pulls"] += lost
            free = self.window - outstanding
            if free > 0:
                self._send_pulls(free)
                in_flight.append([now, free])
                outstanding += free
            payloads = self.transport.recv(self.pull_timeout_us / 1e6)
            now = self.clock()
            answered, data = self._handle(payloads, now) if payloads else (0, 0)
            # Answers come back in PULL order, so they retire the oldest PULLs first.
            retire = min(answered, outstanding)
            outstanding -= retire
            while retire and in_flight:
                take = min(retire, in_flight[0][1])
                in_flight[0][1] -= take
                retire -= take
                if in_flight[0][1] == 0:
                    in_flight.popleft()
            self.aom.advance(now)
            if answered and not data and self.idle_backoff:
                self._stop.wait(self.idle_backoff)

    # -- decoding ------------------------------------------------------------------
    def _handle(self, payloads: list[bytes], now: int) -> tuple[int, int]:
        """Decode one read; returns (answers to PULLs, DATA among them)."""
        batch = decode(payloads, self.values)
        h = batch.headers
        v1 = h["version"] == VERSION
        is_data = v1 & (h["msg_type"] == MsgType.DATA)
        is_empty = v1 & (h["msg_type"] == MsgType.EMPTY)
        good = (
            is_data
            & (batch.lengths == self._data_length)
            & (h["num_values"] == self.values)
            & (h["frac_bits"] == self.frac_bits)
        )
        n_data, n_good, n_empty = int(is_data.sum()), int(good.sum()), int(is_empty.sum())
        answers = is_data | is_empty
        if answers.any():
            self._last_answer_us = now
            last = h[np.flatnonzero(answers)[-1]]
            self.queue_util = int(last["queue_util"])
            self.active_clusters = int(last["active_clusters"])
            self.congested = bool(last["flags"] & FLAG_CONGESTED)
        data = None
        if n_good:
            everything = n_good == len(h)
            heads = h if everything else h[good]
            raw = batch.values if everything else batch.values[good]
            averaged = mean_values(raw, heads["agg_count"], self.frac_bits)
            rewards = heads["reward"].astype(np.float64) * self._scale
            data = DataBatch(heads, averaged, rewards, now)
            self.aom.record_batch(now, heads["contributors"], heads["gen_time_us"])
        with self._lock:
            c = self._counts
            c["data_blocks"] += n_good
            c["bad_data"] += n_data - n_good
            c["empty"] += n_empty
            c["foreign_packets"] += int(len(h) - answers.sum())
            if data is not None:
                c["aggregated_updates"] += int(data.headers["agg_count"].sum())
            # Order within a read is arrival order: the streak restarts at the last DATA.
            if n_data:
                after = answers[np.flatnonzero(is_data)[-1] + 1 :]
                self.empty_streak = int(after.sum())
            else:
                self.empty_streak += n_empty
        if data is not None:
            if self.on_batch is not None:
                self.on_batch(data)
            if self.on_block is not None:
                for block in data.blocks():
                    self.on_block(block)
        return int(answers.sum()), n_data

    # -- state ---------------------------------------------------------------------
    def silent_us(self, now: int | None = None) -> int:
        """Microseconds since the switch last answered a PULL (DATA or EMPTY), or since
        the first PULL if it never did; 0 before any PULL."""
        since = self._last_answer_us if self._last_answer_us is not None else self._first_pull_us
        if since is None:
            return 0
        return max((self.clock() if now is None else now) - since, 0)

    def stats(self) -> dict[str, Any]:
        """Counters, the last feedback seen, and ``silent_s`` (``silent_us`` in s)."""
        with self._lock:
            out: dict[str, Any] = dict(self._counts)
            out["empty_streak"] = self.empty_streak
        out["answered"] = self._last_answer_us is not None
        out["silent_s"] = self.silent_us() / 1e6
        out["queue_util"] = self.queue_util
        out["active_clusters"] = self.active_clusters
        out["congested"] = self.congested
        return out
