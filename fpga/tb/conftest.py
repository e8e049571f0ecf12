"""pytest side of the RTL benches: one DUT build per (simulator, data width) per session."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from harness import V, build, simulator_available


@pytest.fixture(scope="session")
def dut_build() -> Callable[..., Path]:
    """``dut_build(simulator, width[, values])`` builds the DUT once, returns its build dir."""
    built: dict[tuple[str, int, int], Path] = {}

    def get(simulator: str, width: int, values: int = V) -> Path:
        if not simulator_available(simulator):
            pytest.skip(f"{simulator} is not installed")
        key = (simulator, width, values)
        if key not in built:
            built[key] = build(simulator, width, values)
        return built[key]

    return get
