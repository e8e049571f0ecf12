"""The censored comparison of runs to a target (olaf/drl/censored.py): pairs, bounds,
Kaplan-Meier medians, and the interval's behaviour on synthetic data with a known answer."""

from __future__ import annotations

import math
import random

import pytest

from olaf.drl.censored import (
    AT_LEAST,
    AT_MOST,
    EXACT,
    NONE,
    Outcome,
    compare,
    km_median,
    pair,
    ratio_interval,
)


def runs(*values: float, budget: float = 500_000) -> list[Outcome]:
    """Outcomes from values; None stands for a run that missed and used the budget."""
    return [Outcome(budget, False) if v is None else Outcome(v, True) for v in values]


def test_a_pair_keeps_the_direction_of_its_bound() -> None:
    assert pair(Outcome(200, True), Outcome(100, True)) == pair(Outcome(200, True), Outcome(100, True))
    assert pair(Outcome(200, True), Outcome(100, True)).kind == EXACT
    # only the top reached: the baseline would have needed more than its budget
    assert pair(Outcome(500, False), Outcome(100, True)).kind == AT_LEAST
    # only the baseline reached: the top would have needed more
    assert pair(Outcome(100, True), Outcome(500, False)).kind == AT_MOST
    both = pair(Outcome(500, False), Outcome(500, False))
    assert both.kind == NONE and math.isnan(both.ratio)


def test_without_censoring_the_interval_is_the_t_interval_on_the_logs() -> None:
    base, top = runs(142208, 223744, 193536, 132480, 193920), runs(101376, 101632, 112256, 122368, 214144)
    c = compare(base, top)
    mean, low, high, n = ratio_interval([b.value / t.value for b, t in zip(base, top, strict=True)])
    assert (c.ratio, c.low, c.high) == (mean, low, high) and n == 5
    assert c.interval_text() == "1.39 [0.90, 2.16]" and c.verdict == "-" and not c.censored
    # the profile likelihood on the same exact data is the same interval (the method's
    # continuity: a cell that gains one censored pair does not jump to another method)
    from olaf.drl import censored

    logs = [(math.log(b.value / t.value), EXACT) for b, t in zip(base, top, strict=True)]
    got = censored._censored_interval(logs)
    assert got == pytest.approx((mean, low, high), rel=1e-6)


def test_pairs_where_both_missed_are_counted_not_averaged() -> None:
    exact = compare(runs(200, 300, 250), runs(100, 150, 125))
    padded = compare(runs(200, 300, 250, None, None), runs(100, 150, 125, None, None))
    assert padded.count(NONE) == 2 and padded.informative == 3
    assert (padded.ratio, padded.low, padded.high) == (exact.ratio, exact.low, exact.high)


def test_bounds_in_opposite_directions_alone_do_not_locate_the_ratio() -> None:
    # LunarLander at tor-1g, 32 workers: three pairs both missed, one >= 1.31, one <= 0.89
    c = compare(runs(None, None, None, None, 885_000, budget=1e6),
                runs(None, None, None, 762_000, None, budget=1e6))
    assert math.isnan(c.ratio) and c.interval_text() == "not estimable" and c.verdict == "-"


def test_bounds_all_one_way_say_at_least_and_cannot_be_significant_at_five_seeds() -> None:
    # 128 workers at D 400: the FIFO reached on none, OLAF on 4 of 5
    c = compare(runs(None, None, None, None, None), runs(222720, 490880, None, 274048, 312320))
    assert c.reached_baseline == 0 and c.reached_top == 4 and c.count(AT_LEAST) == 4
    assert math.isinf(c.ratio) and c.interval_text() == "≥ 1.02 (bounds)"
    assert c.verdict == "-"


def test_a_lower_bound_beyond_the_exact_pairs_pulls_the_ratio_up() -> None:
    exact = compare(runs(300, 330, 360), runs(100, 110, 120))
    with_bound = compare(runs(300, 330, 360, None, budget=600), runs(100, 110, 120, 100, budget=600))
    assert with_bound.count(AT_LEAST) == 1
    assert with_bound.ratio > exact.ratio * 0.999  # >= 6 cannot pull a ratio of 3 down
    naive = ratio_interval([3, 3, 3, 6])[0]  # the budget taken as the time
    assert with_bound.ratio >= naive * 0.999


def test_kaplan_meier_median() -> None:
    assert km_median(runs(10, 20, 30, 40, 50)) == 30
    assert km_median(runs(10, 20, None, None, None)) is None  # 3 of 5 missed: not reached
    assert km_median(runs(10, 20, 30, None, None)) == 30
    assert km_median(runs(10, None)) == 10  # half reached at 10
    assert km_median([]) is None


def test_the_interval_covers_a_known_ratio_on_censored_synthetic_data() -> None:
    """Five seeds a cell, log-normal times whose true baseline/top ratio is 1.3, a budget
    that censors about half of the baseline's runs. The censored interval should cover
    1.3 in about 95 % of cells; taking the budget as the time (the old way) biases the
    ratio toward 1."""
    rng = random.Random(20261207)
    true, budget, cells = 1.3, 200e3, 120
    covered, naive_logs, censored_logs, censored_baseline = 0, [], [], 0
    for _ in range(cells):
        base, top = [], []
        for _seed in range(5):
            seed_effect = rng.gauss(0, 0.3)
            t = 150e3 * math.exp(seed_effect + rng.gauss(0, 0.2))
            b = 150e3 * true * math.exp(seed_effect + rng.gauss(0, 0.2))
            base.append(Outcome(min(b, budget), b <= budget))
            top.append(Outcome(min(t, budget), t <= budget))
        censored_baseline += sum(not o.reached for o in base)
        c = compare(base, top)
        covered += c.low <= true <= c.high if not math.isnan(c.low) else True
        if math.isfinite(c.ratio) and c.ratio > 0:
            censored_logs.append(math.log(c.ratio))
        naive_logs.append(math.log(ratio_interval([b.value / t.value for b, t in
                                                   zip(base, top, strict=True)])[0]))
    assert 0.35 < censored_baseline / (5 * cells) < 0.65
    assert covered / cells >= 0.90
    naive = math.exp(sum(naive_logs) / len(naive_logs))
    estimate = math.exp(sum(censored_logs) / len(censored_logs))
    assert naive < 1.22 and 1.25 < estimate < 1.45  # the old way is biased toward 1; this is not


def test_unequal_lengths_are_refused() -> None:
    with pytest.raises(ValueError):
        compare(runs(1, 2), runs(1))


def test_ratio_interval() -> None:
    mean, lo, hi, n = ratio_interval([2.0, 2.0, 2.0])
    assert (mean, lo, hi, n) == (pytest.approx(2.0), pytest.approx(2.0), pytest.approx(2.0), 3)
    mean, lo, hi, n = ratio_interval([0.5, 2.0])
    assert mean == pytest.approx(1.0) and lo < 1 < hi and lo == pytest.approx(1 / hi)
    # t with 1 degree of freedom: exp(12.706 * sd / sqrt(2)), sd = ln(4) / sqrt(2).
    assert hi == pytest.approx(math.exp(12.706 * math.log(4) / 2))
    assert ratio_interval([])[3] == 0


def test_olaf_compare_reads_missed_targets_as_bounds_through_the_same_comparison() -> None:
    from olaf.commands.compare import compare_row, versus

    def summary(steps: int | None, budget: int = 300_000) -> dict:
        return {"steps_to_target": steps, "env_steps": budget, "time_to_target_s": None if steps is None
                else steps / 10_000, "wall_time_s": budget / 10_000}

    fifo = [summary(None), summary(200_000), summary(None)]
    olaf = [summary(100_000), summary(100_000), summary(None)]
    c = versus(fifo, olaf, "steps")
    assert [p.kind for p in c.pairs] == [AT_LEAST, EXACT, NONE]
    assert c.reached_baseline == 1 and c.reached_top == 2 and c.informative == 2
    assert c.pairs[0].ratio == 3.0  # the FIFO's budget over OLAF's steps: a lower bound
    assert versus(fifo, olaf, "time").pairs[1].ratio == 2.0
    row = {**compare_row("fifo", [{**s, "final_return": 0.0, "aom_p99_ms": 0.0, "bytes_to_ps": 0,
                                    "mean_agg_count": 1.0} for s in fifo])}
    assert row["reached"] == "1/3" and row["steps"] == "not reached"
