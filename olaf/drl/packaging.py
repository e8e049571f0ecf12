"""A flat gradient as OLAF UPDATE blocks, and a DATA block back as an averaged gradient.

This is the learner's side of the wire format: fixed point with ``frac_bits``,
``split_blocks`` into V values, one UPDATE per block (DESIGN.md §2). Used by the
in-process link (tests, the queue-only path) and to check that a codec round trip
moves an update by less than the fixed-point resolution.
"""

from __future__ import annotations

import numpy as np

from worker_transport.codec import Batch
from worker_transport.fixedpoint import from_fixed, split_blocks, to_fixed
from worker_transport.protocol import VERSION, MsgType


def gradient_updates(
    flat: np.ndarray,
    *,
    values: int,
    frac_bits: int,
    cluster_id: int,
    worker_id: int,
    seq: int,
    model_version: int,
    reward: float,
    gen_time_us: int,
) -> Batch:
    """One UPDATE per block of ``flat``; the last block is zero-padded to V."""
    blocks = split_blocks(to_fixed(np.asarray(flat, np.float32), frac_bits), values)
    n = len(blocks)
    batch = Batch.zeros(n, values)
    h = batch.headers
    h["version"] = VERSION
    h["msg_type"] = MsgType.UPDATE
    h["cluster_id"] = cluster_id
    h["worker_id"] = worker_id
    h["block_id"] = np.arange(n)
    h["agg_count"] = 1
    h["num_values"] = values
    h["frac_bits"] = frac_bits
    h["seq"] = seq & 0xFFFFFFFF
    h["model_version"] = model_version & 0xFFFFFFFF
    h["reward"] = int(to_fixed(np.array([reward]), frac_bits)[0])
    h["gen_time_us"] = gen_time_us & 0xFFFFFFFF
    h["contributors"] = 1 << (worker_id % 32)
    batch.values[:] = blocks
    return batch


def averaged_block(values: np.ndarray, agg_count: int, frac_bits: int) -> np.ndarray:
    """A DATA block's values as the mean of the ``agg_count`` gradients summed into it."""
    if agg_count < 1:
        raise ValueError(f"agg_count must be >= 1, got {agg_count}")
    return from_fixed(values, frac_bits) / np.float32(agg_count)
