"""Seed statistics of olaf compare / olaf ablation tables."""

from __future__ import annotations

import math

from olaf.drl.stats import mean_std, plus_minus


def test_mean_and_sample_std_skip_missing_values() -> None:
    mean, std = mean_std([1.0, None, 3.0, math.nan, 5.0])
    assert mean == 3.0 and std == 2.0
    assert mean_std([4.0]) == (4.0, 0.0)
    assert all(math.isnan(x) for x in mean_std([None, math.inf]))


def test_table_cells() -> None:
    assert plus_minus([1.0, 3.0]) == "2.0 ± 1.4"
    assert plus_minus([1000.0, 3000.0], 0) == "2,000 ± 1,414"
    assert plus_minus([]) == "-"
