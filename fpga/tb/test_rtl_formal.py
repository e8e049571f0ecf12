"""Proofs of the OlafQueue invariants with yosys-smtbmc and cvc4: k-induction (every depth) plus
a bounded run from reset (DEPTH cycles), which is also the induction's base case.

olaf_queue.v carries, under ``ifdef FORMAL``, assertions that must hold in every
cycle after reset: ``occupied`` equals the number of live slots; free + live +
awaiting-readout segments = all segments, and the free ring holds exactly the free
ones; live slots own distinct segments, none of them in the free ring (no segment
handed out twice); at most PENDING_SEGS segments await readout; no internal FIFO is
pushed while full (axis_fifo adds its pointer bounds); a beat offered on m_axis
stays unchanged until taken. Inputs are free except that the reset-time
configuration is stable outside reset; reset is assumed in the first cycle only.

The proof model is fpga/formal/olaf_queue_model.ys: a small instance (64-bit stream,
V = 1, 2 slots, a 2 x 2 index, one pending segment) with the payload, the queue
rule's metadata comparisons and message validation cut to free values, which
over-approximates the design (see fpga/README.md, Proofs). The solver is cvc4
(Debian package ``cvc4``) with eager bit-blasting; z3 4.8.12 does not get through
parsing the transition relation.

The induction step (``yosys-smtbmc -i``) holds with k = IND_K thanks to strengthening
invariants in the same block that tie every segment held by the decide pipeline and
the decision / response FIFOs to the free-list bookkeeping; the model script binds
the FIFO internals those read (yosys 0.23 has no hierarchical references). Together
with the bounded run (at least IND_K cycles from reset) that proves the invariants for
every depth of the proof model.

A mutant (a copy of the RTL whose enqueue no longer marks its slot live) must be
refuted by the same flow, on the assertion it breaks, so the proof cannot pass
vacuously.
"""

from __future__ import annotations

import os
import re
import resource
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from harness import FPGA_DIR, RTL_SOURCES, mutated_rtl

DEPTH = int(os.environ.get("OLAF_FORMAL_DEPTH", "2"))
# k of the queue's k-induction; the bounded run from reset is its base case (DEPTH >= IND_K).
IND_K = 2
MODEL_SCRIPT = FPGA_DIR / "formal" / "olaf_queue_model.ys"
HOLD_WRAPPER = FPGA_DIR / "formal" / "axis_fifo_hold.v"
# k for the output FIFO's k-induction (base case and induction step); 2 is too short.
HOLD_K = 3
SOLVER = ["-s", "cvc4", "--noincr", "--logic", "QF_BV", "-S", "--bitblast=eager"]
TOOLS = {"yosys": "yosys", "yosys-smtbmc": "yosys", "cvc4": "cvc4"}

# An enqueue that forgets to mark its slot live: `occupied` then counts a slot that
# is not live, which the first assertion must catch at the first enqueue.
MUTANT = ("live[ws] <= 1'b1;", "live[ws] <= 1'b0;")
MUTANT_ASSERT = "assert (occupied == f_live_count);"
MUTANT_DEPTH = 14


def require_tools() -> None:
    missing = sorted({pkg for tool, pkg in TOOLS.items() if shutil.which(tool) is None})
    if missing:
        pytest.skip(f"formal tools missing (apt-get install {' '.join(missing)})")


def build_model(sources: list[Path], smt2: Path, *defines: str) -> None:
    # OLAF_FORMAL_NO_PAYLOAD: the payload-stability asserts are proved on the output
    # FIFO alone (test_output_fifo_holds), since the model cuts the payload.
    flags = " ".join(f"-D{name}" for name in ("OLAF_FORMAL_NO_PAYLOAD", *defines))
    script = (
        f"read_verilog -defer -formal -sv {flags} {' '.join(map(str, sources))}; "
        f"script {MODEL_SCRIPT}; write_smt2 -stbv {smt2}"
    )
    yosys(script)


def yosys(script: str) -> None:
    proc = subprocess.run(["yosys", "-q", "-p", script], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


def smtbmc(smt2: Path, depth: int, *mode: str) -> tuple[subprocess.CompletedProcess[str], float, float]:
    """Run the BMC (or ``-i``: the induction step); returns the process, wall seconds and
    CPU seconds of the children it reaped."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    proc = subprocess.run(
        ["yosys-smtbmc", *SOLVER, "--noprogress", *mode, "-t", str(depth), str(smt2)],
        capture_output=True, text=True,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return proc, time.monotonic() - start, cpu


@pytest.fixture(scope="module")
def queue_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require_tools()
    smt2 = tmp_path_factory.mktemp("formal") / "olaf_queue.smt2"
    build_model(RTL_SOURCES, smt2)
    return smt2


def test_invariants_bounded(queue_model: Path) -> None:
    assert DEPTH >= IND_K, "the bounded run is the induction's base case"
    proc, wall, cpu = smtbmc(queue_model, DEPTH)
    print(f"formal: invariants hold for {DEPTH} cycles from reset "
          f"(yosys-smtbmc + cvc4, {cpu:.0f} s CPU, {wall:.0f} s wall)")
    assert proc.returncode == 0 and "Status: PASSED" in proc.stdout, proc.stdout[-4000:]
    # Every step was checked: a model that loses its assertions would pass trivially.
    assert f"Checking assertions in step {DEPTH - 1}.." in proc.stdout, proc.stdout[-2000:]


def test_invariants_by_induction(queue_model: Path) -> None:
    """The induction step: IND_K consecutive states that satisfy every assertion (from
    any start, reachable or not) are followed by one that does too. With the bounded
    run from reset this proves the invariants for every depth."""
    proc, wall, cpu = smtbmc(queue_model, IND_K, "-i")
    print(f"formal: invariants inductive with k = {IND_K} "
          f"(yosys-smtbmc + cvc4, {cpu:.0f} s CPU, {wall:.0f} s wall)")
    assert proc.returncode == 0 and "Temporal induction successful." in proc.stdout, proc.stdout[-4000:]


def test_output_fifo_holds(tmp_path: Path) -> None:
    """The payload half of "a beat offered on m_axis stays put": an unbounded proof
    (k-induction) on an axis_fifo with output_fifo's parameters in the proof model."""
    require_tools()
    smt2 = tmp_path / "axis_fifo_hold.smt2"
    fifo = next(src for src in RTL_SOURCES if src.name == "axis_fifo.v")
    yosys(
        f"read_verilog -defer -formal -sv {fifo} {HOLD_WRAPPER}; prep -top axis_fifo_hold; flatten; "
        f"memory_map; opt -fast; async2sync; dffunmap; write_smt2 -stbv {smt2}"
    )
    base, _, _ = smtbmc(smt2, HOLD_K)
    assert base.returncode == 0 and "Status: PASSED" in base.stdout, base.stdout[-3000:]
    step, _, _ = smtbmc(smt2, HOLD_K, "-i")
    assert step.returncode == 0 and "Status: PASSED" in step.stdout, step.stdout[-3000:]
    # One step shorter must fail: an induction step that passes for any k would point
    # at contradictory assumptions rather than at a proof.
    short, _, _ = smtbmc(smt2, HOLD_K - 1, "-i")
    assert short.returncode != 0 and "Temporal induction failed" in short.stdout, short.stdout[-3000:]


def test_mutant_is_refuted(tmp_path: Path) -> None:
    require_tools()
    text = RTL_SOURCES[-1].read_text()
    sources = mutated_rtl(*MUTANT, tmp_path)
    # Line of the assertion the mutant must break (the edit keeps line numbers); yosys
    # locates an assert by a span that ends on its line.
    line = next(n for n, row in enumerate(text.splitlines(), 1) if MUTANT_ASSERT in row)

    smt2 = tmp_path / "mutant.smt2"
    # The mutant needs 8 cycles to show; the strengthening invariants (only there for the
    # induction) would make that bounded run ten times slower.
    build_model(sources, smt2, "OLAF_FORMAL_NO_STRENGTHEN")
    proc, wall, cpu = smtbmc(smt2, MUTANT_DEPTH)
    print(f"formal: mutant refuted ({cpu:.0f} s CPU, {wall:.0f} s wall)")
    assert proc.returncode != 0 and "Status: FAILED" in proc.stdout, proc.stdout[-4000:]
    failed = re.findall(r"Assert failed in olaf_queue: (\S+)", proc.stdout)
    assert any(re.search(rf"olaf_queue\.v:[\d.]+-{line}\.", loc) for loc in failed), proc.stdout[-4000:]
