"""pytest side of the RTL benches: one DUT build per (simulator, data width) per session."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from harness import build, simulator_available


@pytest.fixture(scope="session")
def dut_build() -> Callable[[str, int], Path]:
    """``dut_build(simulator, width)`` builds the DUT once and returns its build dir."""
    built: dict[tuple[str, int], Path] = {}

    def get(simulator: str, width: int) -> Path:
        if not simulator_available(simulator):
            pytest.skip(f"{simulator} is not installed")
        key = (simulator, width)
        if key not in built:
            built[key] = build(simulator, width)
        return built[key]

    return get
