"""Age of Model at the parameter server (DESIGN.md §5), sampled on a fixed clock.

Three quantities, all from the DATA the PS receives:

* **global AoM** ``AoM(t) = t - max_u t_u^received``: time since any update arrived;
* **per-worker AoM** ``AoM_u(t) = t - t_u^received``, where a DATA counts as received
  for every worker whose bit is set in ``contributors``. Bits are ``worker_id % 32``, so
  in a cluster of more than 32 workers, workers ``u`` and ``u + 32`` share a bit and
  their AoM is the AoM of the pair;
* **update age** ``t_received - gen_time_us`` of each DATA (the oldest contributor's
  generation time, since merges keep the minimum).

Conventions (decided here; DESIGN.md is silent):

* The tracker starts at ``start_us``; the model is fresh then, so every AoM is 0 at the
  start and grows until the first reception (a worker that never gets through shows an
  AoM that grows for the whole run, which is what a fairness check must see).
* Samples are taken at ``start_us + k * interval_us`` for k = 0, 1, 2, ...; a reception
  at time ``t`` counts for samples at ``g >= t``. AoM is piecewise linear, so the grid
  samples are exact, not approximations, whatever the receptions' timing.
* Events must be recorded in time order; a timestamp earlier than the previous one is
  treated as equal to it (a wall clock that steps back must not produce negative AoM).
* ``gen_time_us`` is a 32-bit microsecond clock that wraps every ~71.6 minutes: ages are
  the wrapped difference read as a signed 32-bit number, so a small negative age from
  clock offset between hosts stays small (and visible) instead of becoming ~71 minutes.
* Statistics: mean, and percentiles by linear interpolation (``numpy.percentile``);
  everything reported in milliseconds.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

WRAP_US = 1 << 32
DEFAULT_SAMPLE_INTERVAL_US = 10_000
MAX_WORKER_BITS = 32


def wall_clock_us() -> int:
    """Microseconds since the epoch: comparable between processes and (with NTP) hosts."""
    return time.time_ns() // 1000


def wrap_us(t_us: int) -> int:
    """A time as the 32-bit ``gen_time_us`` field carries it."""
    return t_us & (WRAP_US - 1)


def age_us(now_us: int | np.ndarray, gen_time_us: int | np.ndarray) -> int | np.ndarray:
    """``now - gen`` across the 32-bit wrap, as a signed 32-bit number of microseconds."""
    if isinstance(now_us, np.ndarray) or isinstance(gen_time_us, np.ndarray):
        d = (np.asarray(now_us, np.int64) - np.asarray(gen_time_us, np.int64)) & (WRAP_US - 1)
        return np.where(d >= WRAP_US // 2, d - WRAP_US, d)
    d = (now_us - gen_time_us) & (WRAP_US - 1)
    return d - WRAP_US if d >= WRAP_US // 2 else d


@dataclass(frozen=True)
class Stats:
    """Mean, median, 99th percentile and maximum of a set of values (milliseconds)."""

    mean: float
    p50: float
    p99: float
    max: float
    count: int

    @classmethod
    def of(cls, values: np.ndarray) -> Stats:
        v = np.asarray(values, np.float64)
        if not len(v):
            return cls(math.nan, math.nan, math.nan, math.nan, 0)
        p50, p99 = np.percentile(v, [50, 99])
        return cls(float(v.mean()), float(p50), float(p99), float(v.max()), len(v))

    def as_dict(self) -> dict[str, float | int]:
        return {"mean": self.mean, "p50": self.p50, "p99": self.p99, "max": self.max,
                "count": self.count}


@dataclass(frozen=True)
class AoMSeries:
    """The sampled time series; times relative to the tracker's start, in milliseconds."""

    t_ms: np.ndarray
    """Sample times, ``k * interval``."""
    global_ms: np.ndarray
    """Global AoM at each sample."""
    per_worker_ms: np.ndarray
    """``(samples, workers)``: AoM of each tracked worker bit at each sample."""
    ages_t_ms: np.ndarray
    """Reception time of each DATA."""
    ages_ms: np.ndarray
    """Update age of each DATA."""


class AoMTracker:
    """Global and per-worker AoM and update age, from a time-ordered stream of DATA.

    ``workers`` is how many contributor bits to track (workers ``0..workers-1``, modulo
    32). Feed it with ``record`` (one DATA) or ``record_batch``; call ``advance(now)`` to
    take the samples due up to ``now`` when nothing arrives. One thread feeds it (the
    ``Receiver``'s); any thread may read ``series``/``summary`` meanwhile (a lock guards
    the sample lists).
    """

    def __init__(
        self,
        *,
        start_us: int | None = None,
        interval_us: int = DEFAULT_SAMPLE_INTERVAL_US,
        workers: int = MAX_WORKER_BITS,
        clock: Callable[[], int] = wall_clock_us,
    ) -> None:
        if interval_us < 1:
            raise ValueError(f"sample interval must be >= 1 us, got {interval_us}")
        if not 1 <= workers <= MAX_WORKER_BITS:
            raise ValueError(f"workers must be 1..{MAX_WORKER_BITS} (contributor bits)")
        self.clock = clock
        self.start_us = clock() if start_us is None else int(start_us)
        self.interval_us = int(interval_us)
        self.workers = workers
        self._mask = (1 << workers) - 1
        self._shifts = np.arange(workers, dtype=np.int64)
        self.last_any_us = self.start_us
        self.last_worker_us = np.full(workers, self.start_us, np.int64)
        self._last_event_us = self.start_us
        self._next_k = 0
        """Index of the next grid point to sample."""
        self._t: list[np.ndarray] = []
        self._global: list[np.ndarray] = []
        self._per_worker: list[np.ndarray] = []
        # Chunks of int64 arrays, not Python ints: a long run records millions of DATA.
        self._age_t: list[np.ndarray] = []
        self._ages: list[np.ndarray] = []
        self._lock = threading.Lock()
        self.received = 0
        self.untracked = 0
        """DATA whose contributors have no tracked bit (e.g. worker bit >= ``workers``)."""

    # -- input ---------------------------------------------------------------------
    def record(self, received_us: int, contributors: int, gen_time_us: int) -> None:
        """One DATA received at ``received_us`` (unwrapped, same clock as the tracker)."""
        with self._lock:
            self._record(received_us, contributors, gen_time_us)

    def _record(self, received_us: int, contributors: int, gen_time_us: int) -> None:
        t = max(int(received_us), self._last_event_us)
        self._sample_before(t)
        self._last_event_us = t
        self.received += 1
        self.last_any_us = t
        bits = int(contributors) & self._mask
        if bits:
            hit = ((bits >> self._shifts) & 1).astype(bool)
            self.last_worker_us[hit] = t
        else:
            self.untracked += 1
        self._age_t.append(np.array([t], np.int64))
        self._ages.append(np.array([age_us(wrap_us(t), int(gen_time_us))], np.int64))

    def record_batch(
        self, received_us: int, contributors: np.ndarray, gen_time_us: np.ndarray
    ) -> None:
        """Several DATA received together (one ``recv``): all at ``received_us``."""
        with self._lock:
            self._record_batch(received_us, contributors, gen_time_us)

    def _record_batch(
        self, received_us: int, contributors: np.ndarray, gen_time_us: np.ndarray
    ) -> None:
        t = max(int(received_us), self._last_event_us)
        self._sample_before(t)
        self._last_event_us = t
        n = len(contributors)
        if not n:
            return
        self.received += n
        self.last_any_us = t
        union = int(np.bitwise_or.reduce(np.asarray(contributors, np.uint64)))
        bits = union & self._mask
        if bits:
            hit = ((bits >> self._shifts) & 1).astype(bool)
            self.last_worker_us[hit] = t
        tracked = (np.asarray(contributors, np.uint64) & np.uint64(self._mask)) != 0
        self.untracked += int(n - tracked.sum())
        self._age_t.append(np.full(n, t, np.int64))
        self._ages.append(age_us(np.int64(wrap_us(t)), np.asarray(gen_time_us, np.int64)))

    def join(self, bits: np.ndarray, now_us: int | None = None) -> int:
        """Workers of ``bits`` (a bool mask over the tracked bits) join at ``now_us``
        (default: the clock's now): their AoM is 0 there, as every worker's is at the
        start, since a worker that has just joined has no update to be late with.

        Ordered like a DATA arrival: the samples before ``now_us`` are taken with the old
        state first. Returns the index of the first sample that sees the join.
        """
        now = self.clock() if now_us is None else int(now_us)
        with self._lock:
            t = max(now, self._last_event_us)
            self._sample_before(t)
            self._last_event_us = t
            self.last_worker_us[np.asarray(bits, bool)] = t
            return self._next_k

    def advance(self, now_us: int | None = None) -> None:
        """Take every sample due at or before ``now_us`` (default: the clock's now)."""
        now = self.clock() if now_us is None else int(now_us)
        with self._lock:
            self._sample_before(now + 1)

    def _sample_before(self, t_us: int) -> None:
        """Samples at grid points ``g < t_us``, with the state as it is now."""
        last_k = (t_us - 1 - self.start_us) // self.interval_us
        if last_k < self._next_k:
            return
        g = self.start_us + self.interval_us * np.arange(self._next_k, last_k + 1, dtype=np.int64)
        self._next_k = last_k + 1
        self._t.append(g)
        self._global.append(g - self.last_any_us)
        self._per_worker.append(g[:, None] - self.last_worker_us[None, :])

    # -- output --------------------------------------------------------------------
    @property
    def samples(self) -> int:
        return self._next_k

    @property
    def series(self) -> AoMSeries:
        def cat(chunks: list[np.ndarray], shape: tuple[int, ...]) -> np.ndarray:
            return np.concatenate(chunks) if chunks else np.zeros(shape, np.int64)

        with self._lock:
            t = cat(self._t, (0,))
            glob = cat(self._global, (0,))
            per = cat(self._per_worker, (0, self.workers))
            # Keep the concatenation, so repeated reads stay cheap.
            self._t, self._global, self._per_worker = [t], [glob], [per]
            age_t = cat(self._age_t, (0,))
            ages = cat(self._ages, (0,))
            self._age_t, self._ages = [age_t], [ages]
        return AoMSeries(
            t_ms=(t - self.start_us) / 1000.0,
            global_ms=glob / 1000.0,
            per_worker_ms=per / 1000.0,
            ages_t_ms=(age_t - self.start_us) / 1000.0,
            ages_ms=ages / 1000.0,
        )

    def fairness_gap_ms(self) -> float:
        """``max_t max_u |AoM_u(t) - mean_u AoM_u(t)|`` over the samples (DESIGN.md §5)."""
        per = self.series.per_worker_ms
        if not len(per):
            return math.nan
        return float(np.abs(per - per.mean(axis=1, keepdims=True)).max())

    def summary(self) -> dict:
        """Global AoM statistics at the top level (ms), then update age and per worker.

        ``{"mean", "p50", "p99", "max", "samples", "received", "update_age": {...},
        "per_worker": {"mean": [...], "max": [...], "last": [...]}, "fairness_gap_ms"}``,
        where ``last`` is each worker's AoM at the latest sample.
        """
        s = self.series
        glob = Stats.of(s.global_ms)
        per = s.per_worker_ms
        return {
            "mean": glob.mean,
            "p50": glob.p50,
            "p99": glob.p99,
            "max": glob.max,
            "samples": glob.count,
            "received": self.received,
            "update_age": Stats.of(s.ages_ms).as_dict(),
            "per_worker": {
                "mean": per.mean(axis=0).tolist() if len(per) else [math.nan] * self.workers,
                "max": per.max(axis=0).tolist() if len(per) else [math.nan] * self.workers,
                "last": per[-1].tolist() if len(per) else [math.nan] * self.workers,
            },
            "fairness_gap_ms": self.fairness_gap_ms(),
        }
