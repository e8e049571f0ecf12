"""Fixed point, saturation and parameter blocks (DESIGN.md §2)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from worker_transport.fixedpoint import (
    from_fixed,
    join_blocks,
    resolution,
    sat_add,
    split_blocks,
    to_fixed,
)
from worker_transport.protocol import INT32_MAX, INT32_MIN


def test_known_values() -> None:
    assert to_fixed(np.array([1.0, -1.0, 0.5, 0.0]), 16).tolist() == [65536, -65536, 32768, 0]
    assert from_fixed(np.array([65536, -98304]), 16).tolist() == [1.0, -1.5]
    assert resolution(16) == 2**-16


def test_saturation_and_infinities() -> None:
    x = np.array([1e12, -1e12, np.inf, -np.inf, 32767.99999], np.float64)
    assert to_fixed(x, 16).tolist() == [INT32_MAX, INT32_MIN, INT32_MAX, INT32_MIN, INT32_MAX]


def test_nan_is_rejected() -> None:
    with pytest.raises(ValueError, match="NaN"):
        to_fixed(np.array([0.0, np.nan], np.float32), 16)


@settings(max_examples=200, deadline=None)
@given(arrays(np.float32, st.integers(1, 500), elements=st.floats(-3e4, 3e4, width=32)),
       st.integers(8, 20))
def test_round_trip_within_half_an_lsb(x: np.ndarray, frac_bits: int) -> None:
    limit = 2.0 ** (31 - frac_bits) - 1
    x = np.clip(x, -limit, limit)
    back = from_fixed(to_fixed(x, frac_bits), frac_bits).astype(np.float64)
    err = np.abs(back - x.astype(np.float64))
    # Half an LSB from rounding, plus float32's own rounding of the result.
    assert (err <= resolution(frac_bits) / 2 + np.abs(x) * 2**-23 + 1e-12).all()


@given(st.lists(st.tuples(st.integers(INT32_MIN, INT32_MAX), st.integers(INT32_MIN, INT32_MAX)),
                min_size=1, max_size=50))
def test_sat_add_is_p4_saturating_add(pairs: list[tuple[int, int]]) -> None:
    a = np.array([p[0] for p in pairs], np.int32)
    b = np.array([p[1] for p in pairs], np.int32)
    want = [max(INT32_MIN, min(INT32_MAX, x + y)) for x, y in pairs]
    assert sat_add(a, b).tolist() == want


def test_sat_add_matches_bmv2_figures() -> None:
    # The values P4-NOTES.md records from simple_switch.
    a = np.array([2147483638, -2147483643, 2147483647, -2147483648], np.int32)
    b = np.array([100, -100, 2147483647, -1], np.int32)
    assert sat_add(a, b).tolist() == [2147483647, -2147483648, 2147483647, -2147483648]


@given(st.integers(1, 1000), st.integers(1, 70))
def test_blocks_split_pad_and_join(n: int, values: int) -> None:
    flat = np.arange(1, n + 1, dtype=np.int32)
    blocks = split_blocks(flat, values)
    assert blocks.shape == (-(-n // values), values)
    assert (blocks.reshape(-1)[n:] == 0).all()
    assert (join_blocks(blocks, n) == flat).all()


@settings(max_examples=300, deadline=None)
@given(arrays(np.float32, st.integers(1, 200),
              elements=st.floats(width=32, allow_nan=False, allow_infinity=True)),
       st.integers(0, 31))
def test_float32_fast_path_equals_the_float64_path(x: np.ndarray, frac_bits: int) -> None:
    assert (to_fixed(x, frac_bits) == to_fixed(x.astype(np.float64), frac_bits)).all()


def test_float32_saturation_edges() -> None:
    x = np.array([32767.99, 32768.0, -32768.0, -32768.01, 1e30, -1e30, 0.5 / 65536, 1.5 / 65536],
                 np.float32)
    assert to_fixed(x, 16).tolist() == [2147483008, INT32_MAX, INT32_MIN, INT32_MIN, INT32_MAX, INT32_MIN,
                                        0, 2]
    with pytest.raises(ValueError, match="NaN"):
        to_fixed(np.array([np.nan], np.float32), 16)
