"""Summary statistics over seeds, shared by ``olaf compare`` and ``olaf ablation``."""

from __future__ import annotations

import math
from collections.abc import Iterable


def mean_std(values: Iterable[float | None]) -> tuple[float, float]:
    """Mean and sample standard deviation of the finite values (NaN, NaN if none; std 0 for one)."""
    v = [x for x in values if x is not None and math.isfinite(x)]
    if not v:
        return math.nan, math.nan
    mean = sum(v) / len(v)
    std = math.sqrt(sum((x - mean) ** 2 for x in v) / (len(v) - 1)) if len(v) > 1 else 0.0
    return mean, std


def plus_minus(values: Iterable[float | None], digits: int = 1) -> str:
    """``mean ± std`` for a table cell, ``-`` when there is nothing to average."""
    mean, std = mean_std(values)
    return "-" if not math.isfinite(mean) else f"{mean:,.{digits}f} ± {std:,.{digits}f}"
