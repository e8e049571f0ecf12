"""Fixed point and parameter blocks (DESIGN.md §2).

Values on the wire are signed 32-bit fixed point with ``frac_bits`` fraction bits,
saturated to the int32 range. NaN has no fixed-point meaning and would poison every
aggregate it is merged into, so ``to_fixed`` rejects it with ``ValueError``; +/-inf
saturate to the int32 limits like any other out-of-range value.
"""

from __future__ import annotations

import numpy as np

from worker_transport.protocol import INT32_MAX, INT32_MIN


def to_fixed(x: np.ndarray | float, frac_bits: int) -> np.ndarray:
    """Round to nearest (ties to even), saturate to int32. Raises ``ValueError`` on NaN."""
    a = np.asarray(x)
    if a.dtype == np.float32:
        return _float32_to_fixed(a, frac_bits)
    if np.isnan(a).any():
        raise ValueError("cannot convert NaN to fixed point")
    # float64 holds every int32 exactly, so rounding and clipping happen before the cast.
    scaled = np.ldexp(a.astype(np.float64).reshape(-1), frac_bits)
    np.rint(scaled, out=scaled)
    np.clip(scaled, INT32_MIN, INT32_MAX, out=scaled)
    return scaled.astype(np.int32).reshape(a.shape)


def _float32_to_fixed(a: np.ndarray, frac_bits: int) -> np.ndarray:
    """The float32 fast path (gradients): scaling by a power of two is exact in float32,
    so only saturation needs care, because float32 cannot represent INT32_MAX."""
    with np.errstate(over="ignore"):  # an overflow to inf saturates below, as intended
        scaled = np.multiply(a.reshape(-1), np.float32(2.0**frac_bits), dtype=np.float32)
    if np.isnan(scaled).any():
        raise ValueError("cannot convert NaN to fixed point")
    np.rint(scaled, out=scaled)
    too_big = scaled >= np.float32(2.0**31)
    np.clip(scaled, np.float32(INT32_MIN), np.float32(2.0**31 - 128), out=scaled)
    q = scaled.astype(np.int32)
    q[too_big] = INT32_MAX
    return q.reshape(a.shape)


def from_fixed(q: np.ndarray | int, frac_bits: int) -> np.ndarray:
    return np.ldexp(np.asarray(q, dtype=np.float64), -frac_bits).astype(np.float32)


def resolution(frac_bits: int) -> float:
    """The value of one least significant bit."""
    return 2.0**-frac_bits


def sat_add(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Signed saturating int32 addition, as P4's ``|+|`` on ``int<32>``."""
    s = np.asarray(a, np.int64) + np.asarray(b, np.int64)
    return np.clip(s, INT32_MIN, INT32_MAX).astype(np.int32)


def num_blocks(n: int, values: int) -> int:
    return -(-n // values)


def split_blocks(flat: np.ndarray, values: int) -> np.ndarray:
    """A flat vector as ``(num_blocks, values)`` rows, the last zero-padded."""
    flat = np.asarray(flat).reshape(-1)
    blocks = np.zeros((num_blocks(len(flat), values), values), flat.dtype)
    blocks.reshape(-1)[: len(flat)] = flat
    return blocks


def join_blocks(blocks: np.ndarray, n: int) -> np.ndarray:
    """Inverse of ``split_blocks``: the first ``n`` values, padding dropped."""
    return np.asarray(blocks).reshape(-1)[:n]
