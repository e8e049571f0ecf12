"""Bounded proofs of the OlafQueue invariants (yosys, from reset, DEPTH cycles).

olaf_queue.v carries, under ``ifdef FORMAL``, assertions that must hold in every
cycle after reset: ``occupied`` equals the number of live slots; free + live +
awaiting-readout segments = all segments, and the free ring holds exactly the free
ones; live slots own distinct segments, none of them in the free ring (no segment
handed out twice); at most PENDING_SEGS segments await readout; no internal FIFO is
pushed while full (axis_fifo adds its pointer bounds); a beat offered on m_axis
stays unchanged until taken. Inputs are free except that the reset-time
configuration is stable outside reset; the initial state is free too (reset is
assumed in the first cycle only).

The instance is small (64-bit stream, V = 1, 2 slots, a 2 x 2 index, one pending
segment) and the proof is bounded model checking with yosys's built-in SAT solver
(``sat -seq``), not an induction proof. yosys-smtbmc with z3 was tried on the same
model first and did not finish even its first step in minutes, so it is not used.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time

import pytest
from harness import RTL_SOURCES

DEPTH = int(os.environ.get("OLAF_FORMAL_DEPTH", "12"))
PARAMS = {"DATA_WIDTH": 64, "V": 1, "MAX_CAPACITY": 2, "MAX_CLUSTERS": 2, "MAX_BLOCKS": 2,
          "PENDING_SEGS": 1, "ID_WIDTH": 1}


def prove(depth: int) -> subprocess.CompletedProcess[str]:
    chparam = " ".join(f"-set {k} {v}" for k, v in PARAMS.items())
    script = (
        f"read_verilog -defer -formal -sv {' '.join(map(str, RTL_SOURCES))}; "
        f"chparam {chparam} olaf_queue; prep -top olaf_queue; flatten; memory_map; opt -fast; "
        f"async2sync; dffunmap; sat -seq {depth} -prove-asserts -set-assumes -verify olaf_queue"
    )
    return subprocess.run(["yosys", "-p", script], capture_output=True, text=True)


def test_invariants_bounded() -> None:
    if shutil.which("yosys") is None:
        pytest.skip("yosys is not installed (apt-get install yosys)")
    start = time.monotonic()
    proc = prove(DEPTH)
    print(f"formal: invariants hold for {DEPTH} cycles from reset ({time.monotonic() - start:.0f} s)")
    assert proc.returncode == 0 and "SUCCESS" in proc.stdout, proc.stdout[-4000:]
