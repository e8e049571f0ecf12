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


STALENESS_COLUMNS = (
    ("AoM mean (ms)", "aom_mean"), ("staleness p50 (versions)", "staleness_p50"),
    ("staleness p90", "staleness_p90"), ("staleness p99", "staleness_p99"),
    ("update age p50 (ms)", "update_age_p50"), ("update age p90 (ms)", "update_age_p90"),
    ("update age p99 (ms)", "update_age_p99"),
)
"""(header, key) of the age columns every table shows side by side (DESIGN.md §5): how long
the PS waited (AoM), and how old what it applied was, in versions and in milliseconds."""


def staleness_cells(runs: list[dict]) -> dict[str, str]:
    """The ``STALENESS_COLUMNS`` cells of one table row: means ± std over the runs' summaries."""
    return {
        "aom_mean": plus_minus([r.get("aom_mean_ms") for r in runs], 2),
        **{f"staleness_{q}": plus_minus([r.get(f"staleness_{q}") for r in runs], 1)
           for q in ("p50", "p90", "p99")},
        **{f"update_age_{q}": plus_minus([r.get(f"update_age_{q}_ms") for r in runs], 1)
           for q in ("p50", "p90", "p99")},
    }
