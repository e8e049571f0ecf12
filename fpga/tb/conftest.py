"""pytest side of the RTL benches: one DUT build per (simulator, data width) per session, and
the induction proof started in the background as soon as the session has collected it."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
from formal import INDUCTION, BackgroundProof, missing_packages
from sim_runner import V, build, simulator_available


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Start the induction step now if it was collected: it runs at the lowest priority
    while the rest of the suite does, and its test only waits for the verdict."""
    wanted = any(getattr(item, "originalname", "") == "test_invariants_by_induction" for item in items)
    if wanted and not missing_packages() and INDUCTION not in config.stash:
        config.stash[INDUCTION] = BackgroundProof.start(Path(tempfile.mkdtemp(prefix="olaf-formal-")))


def pytest_unconfigure(config: pytest.Config) -> None:
    proof = config.stash.get(INDUCTION, None)
    if proof is not None:
        proof.stop()
        shutil.rmtree(proof.report.parent, ignore_errors=True)


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
