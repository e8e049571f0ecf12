"""The one list of the FPGA's Verilog sources, read by every bench, proof and synthesis script.

Simulators (fpga/tb/sim_runner.py, eth_bench.py), the proof model (formal.py), yosys
synthesis (fpga/scripts/sta.py, benchmarks/bench_fpga.py --yosys) and any place-and-route
script take their file lists from here, so a module added to the RTL is added once. From
a script outside fpga/tb::

    sys.path.insert(0, str(FPGA_DIR / "tb"))
    from rtl_sources import sources_for
    files = sources_for("olaf_top")

Each list holds a top and every module below it, leaves first (the order does not matter
to the tools; it is kept stable so that build logs and copies compare).
"""

from __future__ import annotations

from pathlib import Path

RTL_DIR = Path(__file__).resolve().parent.parent / "rtl"

QUEUE_FILES = (
    "axis_fifo.v",
    "olaf_verdict.v",
    "olaf_util_of.v",
    "olaf_queue_ingest.v",
    "olaf_queue_decide.v",
    "olaf_queue_counters.v",
    "olaf_queue_apply.v",
    "olaf_queue_seg_mem.v",
    "olaf_queue_output.v",
    "olaf_queue.v",
)
"""``olaf_queue``: the queue's pipeline stages (one module each) and the top that composes them."""

SHELL_FILES = ("olaf_udp.v", "olaf_axil_regs.v", "olaf_top.v")
"""What ``olaf_top`` adds around the queue: the Ethernet/UDP shell and the AXI-Lite registers."""

QUEUE_SOURCES = [RTL_DIR / name for name in QUEUE_FILES]
"""Sources of ``olaf_queue`` (the queue benches, the proofs, the mutants)."""

TOP_SOURCES = [RTL_DIR / name for name in QUEUE_FILES + SHELL_FILES]
"""Sources of ``olaf_top``, which contain those of ``olaf_udp`` and ``olaf_axil_regs`` too."""

TOPS = {"olaf_queue": QUEUE_SOURCES, "olaf_top": TOP_SOURCES}


def sources_for(top: str) -> list[Path]:
    """The sources to read for ``top``: the queue's for ``olaf_queue``, every file otherwise
    (``olaf_top`` and the modules inside it; the tools elaborate only what ``top`` uses)."""
    return list(TOPS.get(top, TOP_SOURCES))
