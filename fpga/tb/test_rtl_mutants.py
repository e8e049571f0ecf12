"""Mutation tests: each mutant of the RTL must fail some bench.

Each mutant is a one-line textual edit of the queue's RTL (applied to a copy of the
sources, in whichever stage file holds the line; the line must occur exactly once in
all of them, so the list cannot silently go stale when the RTL changes). The copy is
built on Icarus and the one bench meant to catch it is run; the test passes only if
that bench fails. These four survived the benches of the first RTL (issue 17); the
hazard benches in test_rtl_hazards.py exist to kill them.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from sim_runner import FPGA_DIR, build, build_dir, mutated_rtl, run, simulator_available
from test_rtl_hazards import HAZARD_PARAMS, HAZARD_V

MUTANTS = {
    # agg_count no longer saturates at 65535 on a merge.
    "agg_saturation": (
        "c_merged_agg <= (r_s_agg == 16'hffff) ? r_s_agg : r_s_agg + 16'd1;",
        "c_merged_agg <= r_s_agg + 16'd1;",
        "agg_count_saturates",
    ),
    # A merge's read misses the write made at its own clock edge.
    "write_forwarding": (
        "wire [W-1:0] s2_old = fwd ? fwd_data : seg_rd_a;",
        "wire [W-1:0] s2_old = seg_rd_a;",
        "back_to_back_same_key",
    ),
    # A lookup misses the index write of the message just ahead.
    "index_bypass": (
        "wire [SW-1:0] s = (lw_valid && lw_addr == l_key) ? lw_data : idx_rd;",
        "wire [SW-1:0] s = idx_rd;",
        "back_to_back_same_key",
    ),
    # PULLs may pop more segments than PENDING_SEGS while their DATA waits.
    "pending_guard": (
        "&& dq_room && pend_room;",
        "&& dq_room;",
        "pending_segments_not_reused",
    ),
}


def mutate(name: str, directory: Path) -> list[Path]:
    original, replacement, _ = MUTANTS[name]
    return mutated_rtl(original, replacement, directory)


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_mutant_is_killed(name: str) -> None:
    if not simulator_available("icarus"):
        pytest.skip("icarus is not installed")
    tag = f"mutant_{name}"
    sources = mutate(name, FPGA_DIR / f"sim_build_mutant_src_{name}")
    build("icarus", 512, HAZARD_V, sources=sources, tag=tag, overrides=HAZARD_PARAMS)
    bench = MUTANTS[name][2]
    # The runner exits (under pytest) or raises (outside it) when a cocotb test fails.
    with pytest.raises((SystemExit, RuntimeError)):
        run("icarus", 512, "test_rtl_hazards", testcases=[bench], values=HAZARD_V, tag=tag)
    # Killed means: the bench ran to a verdict, and the verdict was a failure.
    from cocotb_tools.runner import get_results

    results = build_dir("icarus", 512, HAZARD_V, tag) / f"test_rtl_hazards_{bench}.results.xml"
    tests, failed = get_results(results)
    assert (tests, failed) == (1, 1), f"mutant {name}: {failed} of {tests} runs of {bench} failed"
