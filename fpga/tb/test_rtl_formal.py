"""Proofs of the OlafQueue invariants with yosys-smtbmc and cvc4: k-induction (every depth) plus
a bounded run from reset (DEPTH cycles), which is also the induction's base case.

olaf_queue.v (the top that composes the pipeline stages) carries, under ``ifdef FORMAL``,
assertions that must hold in every cycle after reset: ``occupied`` equals the number of
live slots; free + live +
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
from pathlib import Path

import pytest
from formal import (
    IND_K,
    INDUCTION,
    BackgroundProof,
    build_model,
    missing_packages,
    smtbmc,
    yosys,
)
from sim_runner import FPGA_DIR, RTL_SOURCES, mutated_rtl, rtl_file_with

DEPTH = int(os.environ.get("OLAF_FORMAL_DEPTH", "2"))
HOLD_WRAPPER = FPGA_DIR / "formal" / "axis_fifo_hold.v"
# k for the output FIFO's k-induction (base case and induction step); 2 is too short.
HOLD_K = 3
# The induction step alone takes about three minutes of one core.
INDUCTION_TIMEOUT = 540

# An enqueue that forgets to mark its slot live: `occupied` then counts a slot that
# is not live, which the first assertion must catch at the first enqueue.
MUTANT = ("live[ws] <= 1'b1;", "live[ws] <= 1'b0;")
MUTANT_ASSERT = "assert (occupied == f_live_count);"
MUTANT_DEPTH = 14


def require_tools() -> None:
    missing = missing_packages()
    if missing:
        pytest.skip(f"formal tools missing (apt-get install {' '.join(missing)})")


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


def test_invariants_by_induction(request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """The induction step: IND_K consecutive states that satisfy every assertion (from
    any start, reachable or not) are followed by one that does too. With the bounded
    run from reset this proves the invariants for every depth.

    The suite started it in the background when it collected this test (conftest.py);
    run on its own, the test starts it here."""
    require_tools()
    proof = request.config.stash.get(INDUCTION, None) or BackgroundProof.start(tmp_path)
    held, report = proof.result(INDUCTION_TIMEOUT)
    print(report.splitlines()[-1])
    assert held, report[-4000:]


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
    sources = mutated_rtl(*MUTANT, tmp_path)
    # File and line of the assertion the mutant must break (the edit keeps line numbers);
    # yosys locates an assert by a span that ends on its line.
    where = rtl_file_with(MUTANT_ASSERT)
    line = next(n for n, row in enumerate(where.read_text().splitlines(), 1) if MUTANT_ASSERT in row)

    smt2 = tmp_path / "mutant.smt2"
    # The mutant needs 8 cycles to show; the strengthening invariants (only there for the
    # induction) would make that bounded run ten times slower.
    build_model(sources, smt2, "OLAF_FORMAL_NO_STRENGTHEN")
    proc, wall, cpu = smtbmc(smt2, MUTANT_DEPTH)
    print(f"formal: mutant refuted ({cpu:.0f} s CPU, {wall:.0f} s wall)")
    assert proc.returncode != 0 and "Status: FAILED" in proc.stdout, proc.stdout[-4000:]
    failed = re.findall(r"Assert failed in olaf_queue: (\S+)", proc.stdout)
    at_line = re.compile(rf"{re.escape(where.name)}:[\d.]+-{line}\.")
    assert any(at_line.search(loc) for loc in failed), proc.stdout[-4000:]
