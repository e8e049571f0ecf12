"""AoM (DESIGN.md §5) on synthetic arrival traces with answers worked out by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from worker_transport.aom import WRAP_US, AoMTracker, Stats, age_us, wrap_us

MS = 1000
START = 5_000_000_000_000  # an unwrapped microsecond clock, well past several 2**32 wraps


def tracker(**kwargs: int) -> AoMTracker:
    return AoMTracker(start_us=START, clock=lambda: START, **kwargs)


def test_periodic_arrivals_give_a_sawtooth() -> None:
    # One update every 10 ms from t = 10 ms, sampled every 1 ms for 100 ms:
    # global AoM at g ms is g mod 10, i.e. ten each of 0..9.
    aom = tracker(interval_us=1 * MS, workers=1)
    for k in range(1, 10):
        aom.record(START + 10 * k * MS, contributors=1, gen_time_us=wrap_us(START + 10 * k * MS))
    aom.advance(START + 99 * MS)
    s = aom.series
    assert s.t_ms.tolist() == list(range(100))
    assert s.global_ms.tolist() == [g % 10 for g in range(100)]
    summary = aom.summary()
    # Sorted samples are ten 0s, ..., ten 9s: median between the 50th and 51st, 4.5;
    # p99 at rank 98.01 of 0..99, both neighbours 9.
    assert (summary["mean"], summary["p50"], summary["p99"], summary["max"]) == (4.5, 4.5, 9, 9)
    assert summary["samples"] == 100 and summary["received"] == 9
    # gen_time == arrival time: every update is 0 ms old.
    assert summary["update_age"]["max"] == 0 and summary["update_age"]["count"] == 9


def test_per_worker_aom_follows_contributor_bits() -> None:
    # Samples every 10 ms at 0, 10, 20, 30, 40 ms.
    # t=5:  DATA from worker 0 (bit 0)
    # t=25: DATA from worker 1 (bit 1)
    # t=30: a merged DATA from both (contributors 0b11)
    aom = tracker(interval_us=10 * MS, workers=2)
    for t, contributors in ((5, 0b01), (25, 0b10), (30, 0b11)):
        aom.record(START + t * MS, contributors, wrap_us(START))
    aom.advance(START + 40 * MS)
    s = aom.series
    assert s.t_ms.tolist() == [0, 10, 20, 30, 40]
    assert s.global_ms.tolist() == [0, 5, 15, 0, 10]  # 20 - 5; at 30 the arrival counts
    assert s.per_worker_ms[:, 0].tolist() == [0, 5, 15, 0, 10]
    # Worker 1 counts from the start until t=25, then 30.
    assert s.per_worker_ms[:, 1].tolist() == [0, 10, 20, 0, 10]
    # max over samples of |AoM_u - mean|: (5, 10) and (15, 20) are 2.5 off their mean.
    assert aom.fairness_gap_ms() == 2.5
    summary = aom.summary()
    assert summary["per_worker"]["mean"] == [6.0, 8.0]
    assert summary["per_worker"]["max"] == [15.0, 20.0]
    assert summary["per_worker"]["last"] == [10.0, 10.0]
    # Update ages: every update was generated at START.
    assert s.ages_ms.tolist() == [5, 25, 30]


def test_starved_worker_grows_for_the_whole_run() -> None:
    aom = tracker(interval_us=10 * MS, workers=3)
    for k in range(1, 11):
        aom.record(START + 10 * k * MS, 0b011, wrap_us(START + 10 * k * MS))
    aom.advance(START + 100 * MS)
    per = aom.series.per_worker_ms
    assert per[:, 2].tolist() == [10.0 * k for k in range(11)]
    assert per[:, :2].max() == 0
    # At 100 ms: workers (0, 0, 100), mean 33.3: the starved one is 66.7 off.
    assert aom.fairness_gap_ms() == pytest.approx(200 / 3)


def test_bits_alias_beyond_32_workers() -> None:
    aom = tracker(interval_us=10 * MS, workers=32)
    worker_id = 33
    aom.record(START + 10 * MS, 1 << (worker_id % 32), 0)
    aom.advance(START + 20 * MS)
    per = aom.series.per_worker_ms
    assert per[-1, 1] == 10 and per[-1, 0] == 20  # worker 33 refreshed worker 1's bit
    aom.record(START + 30 * MS, 0, 0)
    assert aom.untracked == 1


def test_update_age_across_the_32_bit_wrap() -> None:
    # Receive 1000 us after a wrap of the 32-bit clock, for an update generated 1800 us
    # earlier (i.e. before the wrap).
    received = 7 * WRAP_US + 1000
    gen = wrap_us(received - 1800)
    assert gen > WRAP_US - 1000  # it really was generated before the wrap
    assert age_us(wrap_us(received), gen) == 1800
    # A sender clock 300 us ahead: a small negative age, not ~71 minutes.
    assert age_us(wrap_us(received), wrap_us(received + 300)) == -300
    ages = age_us(np.array([wrap_us(received)] * 2), np.array([gen, wrap_us(received + 300)]))
    assert ages.tolist() == [1800, -300]
    aom = AoMTracker(start_us=received - 5000, interval_us=MS, clock=lambda: 0)
    aom.record(received, 1, gen)
    assert aom.series.ages_ms.tolist() == [1.8]


def test_batch_record_equals_single_records() -> None:
    a, b = tracker(interval_us=3 * MS, workers=4), tracker(interval_us=3 * MS, workers=4)
    contributors = np.array([1, 2, 8, 0], np.uint32)
    gens = np.array([wrap_us(START + k * MS) for k in range(4)], np.uint32)
    a.record_batch(START + 7 * MS, contributors, gens)
    for c, g in zip(contributors.tolist(), gens.tolist(), strict=True):
        b.record(START + 7 * MS, c, g)
    for t in (a, b):
        t.advance(START + 20 * MS)
    sa, sb = a.series, b.series
    for name in ("t_ms", "global_ms", "per_worker_ms", "ages_t_ms", "ages_ms"):
        assert np.array_equal(getattr(sa, name), getattr(sb, name)), name
    assert a.untracked == b.untracked == 1
    assert sa.ages_ms.tolist() == [7, 6, 5, 4]
    # Bit 2 never arrived: its AoM at 18 ms is 18.
    assert sa.per_worker_ms[-1].tolist() == [11, 11, 18, 11]


def test_series_does_not_depend_on_when_advance_is_called() -> None:
    """Reproducibility: the same trace gives the same series, however the PS loop polls."""
    rng = np.random.default_rng(42)
    arrivals = START + np.cumsum(rng.exponential(4 * MS, 500)).astype(np.int64)
    contributors = (1 << rng.integers(0, 8, 500)).astype(np.int64)
    gens = [wrap_us(int(t) - int(d)) for t, d in zip(arrivals, rng.integers(0, 3 * MS, 500),
                                                       strict=True)]
    end = int(arrivals[-1]) + 50 * MS

    def run(poll_times: np.ndarray) -> AoMTracker:
        aom = tracker(interval_us=MS, workers=8)
        polls = iter(sorted(poll_times.tolist()))
        next_poll = next(polls, None)
        for t, c, g in zip(arrivals.tolist(), contributors.tolist(), gens, strict=True):
            while next_poll is not None and next_poll < t:
                aom.advance(next_poll)
                next_poll = next(polls, None)
            aom.record(t, c, g)
        aom.advance(end)
        return aom

    lazy = run(np.array([], np.int64))
    busy = run(rng.integers(START, end, 3000))
    for name in ("t_ms", "global_ms", "per_worker_ms", "ages_ms"):
        assert np.array_equal(getattr(lazy.series, name), getattr(busy.series, name)), name
    assert lazy.summary() == busy.summary()
    # And it is the definition: at each grid point, time since the last arrival <= it.
    g = START + MS * np.arange(lazy.samples)
    last = np.concatenate([[START], arrivals])[np.searchsorted(arrivals, g, side="right")]
    assert np.array_equal(lazy.series.global_ms, (g - last) / 1000)


def test_a_joining_worker_starts_at_aom_0_and_earlier_samples_keep_the_old_state() -> None:
    aom = tracker(interval_us=10 * MS, workers=2)
    first = aom.join(np.array([False, True]), START + 25 * MS)
    assert first == 3  # the samples at 0, 10 and 20 ms came before the join
    aom.advance(START + 40 * MS)
    s = aom.series
    assert s.per_worker_ms[:, 1].tolist() == [0, 10, 20, 5, 15]
    assert s.per_worker_ms[:, 0].tolist() == [0, 10, 20, 30, 40]
    assert s.global_ms.tolist() == [0, 10, 20, 30, 40]  # a join is no update
    assert aom.received == 0


def test_a_clock_stepping_back_never_gives_negative_aom() -> None:
    aom = tracker(interval_us=MS, workers=1)
    aom.record(START + 10 * MS, 1, 0)
    aom.record(START + 4 * MS, 1, 0)  # earlier than the previous event: treated as equal
    aom.advance(START + 12 * MS)
    assert aom.series.global_ms.min() >= 0
    assert aom.series.global_ms[-3:].tolist() == [0, 1, 2]


def test_empty_tracker_and_stats() -> None:
    aom = tracker(interval_us=MS)
    summary = aom.summary()
    assert summary["samples"] == 0 and math.isnan(summary["mean"])
    assert math.isnan(summary["update_age"]["mean"])
    stats = Stats.of(np.array([1.0, 2.0, 3.0, 10.0]))
    assert (stats.mean, stats.p50, stats.max, stats.count) == (4.0, 2.5, 10.0, 4)
    assert stats.p99 == pytest.approx(3 + 0.97 * 7)  # rank 2.97: 3 + 0.97 * (10 - 3)


@pytest.mark.parametrize("kwargs", [{"interval_us": 0}, {"workers": 0}, {"workers": 33}])
def test_tracker_rejects_bad_configuration(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        tracker(**kwargs)
