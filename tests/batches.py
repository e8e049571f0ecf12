"""DATA batches built by hand, as the PS's receiver hands them to ``PsApply`` and
``RunPolicies.apply``."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from worker_transport.protocol import HEADER_DTYPE
from worker_transport.receiver import DataBatch


def data_batch(block_ids: Sequence[int], values: np.ndarray, agg_counts: Sequence[int],
               model_versions: Sequence[int], rewards: Sequence[float] | None = None,
               received_at_us: int = 0) -> DataBatch:
    """One read's DATA: the given header columns (the rest zero) and averaged values."""
    n = len(block_ids)
    headers = np.zeros(n, HEADER_DTYPE)
    headers["block_id"] = block_ids
    headers["agg_count"] = agg_counts
    headers["model_version"] = model_versions
    rewards = np.zeros(n) if rewards is None else np.asarray(rewards, np.float64)
    return DataBatch(headers, np.asarray(values, np.float32), rewards, received_at_us)
