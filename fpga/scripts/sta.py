"""Synthesis-only timing and resources of the RTL OlafQueue with yosys.

Runs Debian's yosys 0.23: ``synth_xilinx -family xc7 -noiopad`` on the
``olaf_queue`` (or ``--top``) sources that fpga/tb/rtl_sources.py lists (default
parameters unless overridden), then ``sta`` (cell
delays from the prjxray-derived specify blocks of yosys's 7-series cell library;
no routing delay, so a real placed design is slower) and ``stat``. Prints the
worst register-to-register path, the clock it allows, the cells on that path and
the LUT / flip-flop / block-RAM counts.

Run: ``.venv/bin/python fpga/scripts/sta.py [--param V=64 ...] [--rtl FILE]``.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

FPGA_DIR = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(FPGA_DIR / "tb"))
from rtl_sources import TOP_SOURCES, sources_for  # noqa: E402  (fpga/tb: the one list of RTL files)

DEFAULT_SOURCES = TOP_SOURCES
"""Every module of the design; yosys elaborates only what the top uses."""


def yosys_script(sources: list[Path], top: str, params: dict[str, int], stat_file: Path,
                 sta_file: Path) -> str:
    chparam = " ".join(f"-set {k} {v}" for k, v in params.items())
    reads = "; ".join(f"read_verilog -defer {src}" for src in sources)
    chparam_cmd = f"chparam {chparam} {top}; " if chparam else ""
    return (
        f"{reads}; {chparam_cmd}hierarchy -top {top}; "
        f"synth_xilinx -family xc7 -noiopad -flatten -top {top}; "
        f"tee -q -o {stat_file} stat; tee -q -o {sta_file} sta"
    )


def parse_sta(text: str) -> tuple[float, list[str]]:
    """Worst arrival time in ns and the cell lines of the path that sets it."""
    matches = re.findall(r"Latest arrival time in '(.*?)' is (\d+)", text)
    if len(matches) != 1:
        raise RuntimeError(f"expected one flattened module in the sta output, got {len(matches)}")
    path = [line.strip() for line in text.splitlines() if re.match(r"\s+\d+\s", line)]
    return int(matches[0][1]) / 1000.0, path


def parse_stat(text: str) -> dict[str, int]:
    cells = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0].isupper() and parts[1].isdigit():
            cells[parts[0]] = int(parts[1])
    return cells


def summarize(cells: dict[str, int]) -> str:
    luts = sum(n for name, n in cells.items() if name.startswith("LUT"))
    flops = sum(n for name, n in cells.items() if name.startswith("FD"))
    lutram = sum(n for name, n in cells.items() if name.startswith("RAM") and not name.startswith("RAMB"))
    listed = ", ".join(f"{name} {n}" for name, n in sorted(cells.items()))
    return (f"LUTs {luts}, flip-flops {flops}, LUTRAM macros {lutram}, RAMB18 {cells.get('RAMB18E1', 0)},"
            f" RAMB36 {cells.get('RAMB36E1', 0)}; {listed}")


def run(sources: list[Path], params: dict[str, int],
        top: str = "olaf_queue") -> tuple[float, list[str], dict[str, int]]:
    if shutil.which("yosys") is None:
        raise RuntimeError("yosys is not installed (apt-get install yosys)")
    with tempfile.TemporaryDirectory() as tmp:
        stat_file, sta_file = Path(tmp) / "stat.txt", Path(tmp) / "sta.txt"
        script = yosys_script(sources, top, params, stat_file, sta_file)
        proc = subprocess.run(["yosys", "-q", "-p", script], capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"yosys failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
        worst, path = parse_sta(sta_file.read_text())
        cells = parse_stat(stat_file.read_text())
    return worst, path, cells


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                        help="override a module parameter (repeatable)")
    parser.add_argument("--rtl", action="append", type=Path,
                        help="source files (default: the top's, from fpga/tb/rtl_sources.py)")
    parser.add_argument("--path", action="store_true", help="print every cell on the worst path")
    parser.add_argument("--top", default="olaf_queue",
                        help="top module (olaf_queue, olaf_udp, olaf_top, ...)")
    args = parser.parse_args()
    params = {}
    for item in args.param:
        name, _, value = item.partition("=")
        if not value.isdigit():
            print(f"sta.py: --param needs NAME=INTEGER, got {item!r}", file=sys.stderr)
            return 2
        params[name] = int(value)
    sources = args.rtl or sources_for(args.top)
    worst, path, cells = run(sources, params, args.top)
    print(f"yosys synth_xilinx -family xc7 + sta, {args.top} {params or 'default parameters'}")
    print(f"worst path {worst:.3f} ns (cell delays only, no routing) -> {1000 / worst:.0f} MHz")
    if path:
        shown = path if args.path else path[:2] + ["..."] + path[-3:]
        print("path:\n  " + "\n  ".join(shown))
    print(summarize(cells))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
