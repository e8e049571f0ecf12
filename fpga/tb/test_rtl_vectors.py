"""Replay every shared packet vector (tests/vectors/*.json and rtl_pending/*.json, the
cluster_quota files) through the RTL OlafQueue.

Each file's config is loaded into the DUT under reset, its inputs are sent in order
and every response is compared byte for byte with the file's ``out`` and with the
reference OlafQueue fed the same stream.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Callable
from pathlib import Path

import cocotb
import pytest
from queue_bench import QueueBench, config_from_vector, random_pauses
from sim_runner import full_matrix_only, run

VECTOR_DIR = Path(__file__).resolve().parents[2] / "tests" / "vectors"


def vector_files() -> list[Path]:
    # rtl_pending/ too: the RTL has cluster_quota (tests/vectors/generate.py RTL_PENDING).
    files = [*VECTOR_DIR.glob("*.json"), *(VECTOR_DIR / "rtl_pending").glob("*.json")]
    return sorted(files, key=lambda f: f.name)


@cocotb.test()
async def replay_vectors(dut) -> None:  # noqa: ANN001 - cocotb handle
    """Every vector file back to back, then (when OLAF_TB_GAPS=1) with tvalid/tready gaps."""
    bench = QueueBench(dut)
    files = vector_files()
    assert files, f"no vector files in {VECTOR_DIR}"
    rng = random.Random(5)
    passes = (False, True) if os.environ.get("OLAF_TB_GAPS") == "1" else (False,)
    for gaps in passes:
        if gaps:
            bench.source.set_pause_generator(random_pauses(rng, 0.3))
            bench.sink.set_pause_generator(random_pauses(rng, 0.3))
        for path in files:
            vector = json.loads(path.read_text())
            await bench.reset(config_from_vector(vector["config"]))
            inputs = [bytes.fromhex(step["in"]) for step in vector["steps"]]
            outputs = [step["out"] for step in vector["steps"]]
            file_expected = [bytes.fromhex(out) for out in outputs if out is not None]
            # The file and the reference must agree before the DUT is judged against them.
            assert bench.reference.process(inputs) == file_expected, f"{path.name} is stale"
            await bench.reset()
            await bench.exchange(inputs)
            await bench.check_state()
            dut._log.info("%s: %d responses match", path.name, len(file_expected))


@pytest.mark.parametrize(("simulator", "width"), [
    *(("verilator", width) for width in (512, 64)),
    ("icarus", 512),
    # Icarus at 64 bits (8x the beats) was the slowest FPGA test in CI and checks no RTL path
    # the Verilator 64-bit run does not.
    pytest.param("icarus", 64, marks=full_matrix_only()),
])
def test_rtl_vectors(dut_build: Callable[..., Path], simulator: str, width: int) -> None:
    dut_build(simulator, width)
    # One gapless pass keeps CI short; Verilator's 512-bit build also replays every file under
    # random backpressure (Icarus meets random gaps in test_rtl_random_traffic).
    gaps = (simulator, width) == ("verilator", 512)
    run(simulator, width, "test_rtl_vectors", extra_env={"OLAF_TB_GAPS": "1" if gaps else "0"})
