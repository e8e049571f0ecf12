"""RTL OlafQueue throughput: cycles per UPDATE and per PULL with no backpressure.

Runs fpga/tb/throughput.py on the Verilator build (V=64, 512-bit AXI-Stream by
default) and prints, per stream, cycles per message against the one-beat-per-cycle
ideal (``max(input beats, output beats)`` per message) and the resulting rate at
250 MHz. Baseline in the same run: the software reference OlafQueue processing
the same messages, so the ratio survives a noisy shared machine.
With ``--yosys`` (Debian's yosys on PATH) it also prints a Xilinx 7-series cell
estimate from ``synth_xilinx`` (about a minute of CPU).

Run: ``.venv/bin/python benchmarks/bench_fpga.py [--simulator icarus] [--width 64] [--yosys]``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "fpga" / "tb"))

import harness  # noqa: E402  (lives in fpga/tb, found through the path above)

CLOCK_HZ = 250e6


def reference_rate(width_messages: dict[str, list[bytes]]) -> dict[str, float]:
    """Messages per second of the Python reference OlafQueue on the same streams."""
    from dataplane.queue import QueueConfig

    rates = {}
    for name, messages in width_messages.items():
        best = float("inf")
        for _ in range(5):  # best of 5: the first call pays for numpy warm-up
            reference = harness.Reference(QueueConfig(capacity=harness.MAX_CAPACITY))
            if name == "pull_data":
                reference.process(width_messages["update_enqueue"])
            # The whole stream in one batch: the software switch's fastest path.
            start = time.perf_counter()
            reference.process(messages)
            best = min(best, time.perf_counter() - start)
        rates[name] = len(messages) / best
    return rates


def reference_streams() -> dict[str, list[bytes]]:
    import numpy as np

    n = harness.MAX_CAPACITY
    v = harness.V

    def update(cluster: int, worker: int, block: int) -> bytes:
        return harness.update_message(
            cluster=cluster, worker=worker, block=block, reward=1 << 16,
            values=np.arange(v, dtype=np.int32) * (worker + 1),
        )

    return {
        "update_enqueue": [update(k % 16, k % 8, k) for k in range(n)],
        "pull_data": [harness.pull_message()] * n,
        "update_merge": [update(0, 1 + k % 30, k % 4) for k in range(4 * n)],
    }


def yosys_estimate(width: int) -> str:
    """Xilinx 7-series cell counts from yosys ``synth_xilinx`` (no place and route, no timing)."""
    params = harness.parameters(width)
    chparam = " ".join(f"-set {k} {v}" for k, v in params.items())
    with tempfile.TemporaryDirectory() as tmp:
        stat = Path(tmp) / "stat.txt"
        script = (
            f"read_verilog -defer {harness.RTL_SOURCES[0]}; "
            f"chparam {chparam} {harness.TOPLEVEL}; hierarchy -top {harness.TOPLEVEL}; "
            f"synth_xilinx -family xc7 -noiopad -top {harness.TOPLEVEL}; tee -q -o {stat} stat"
        )
        subprocess.run(["yosys", "-q", "-p", script], capture_output=True, text=True, check=True)
        return f"params {params}\n" + summarize_stat(stat.read_text())


def summarize_stat(text: str) -> str:
    """The cell lines of a yosys ``stat`` report, with LUTs added up."""
    cells = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0].isupper() and parts[1].isdigit():
            cells[parts[0]] = int(parts[1])
    luts = sum(n for name, n in cells.items() if name.startswith("LUT"))
    flops = sum(n for name, n in cells.items() if name.startswith("FD"))
    listed = ", ".join(f"{name} {n}" for name, n in sorted(cells.items()))
    return f"LUTs {luts}, flip-flops {flops}; {listed}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--simulator", choices=harness.SIMULATORS, default="verilator")
    parser.add_argument("--width", type=int, default=512, choices=[64, 512])
    parser.add_argument("--yosys", action="store_true", help="also print a yosys estimate")
    args = parser.parse_args()

    harness.build(args.simulator, args.width)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "throughput.json"
        harness.run(args.simulator, args.width, "throughput",
                    extra_env={"OLAF_BENCH_OUT": str(out)})
        result = json.loads(out.read_text())
    rates = reference_rate(reference_streams())

    print(f"RTL OlafQueue, V={result['values']}, {result['data_width']}-bit AXI-Stream, "
          f"{args.simulator}, no backpressure, clock {CLOCK_HZ / 1e6:.0f} MHz")
    header = (f"{'stream':<15}{'msgs':>6}{'beats in':>10}{'beats out':>10}{'cycles':>8}"
              f"{'cyc/msg':>9}{'ideal':>7}{'eff':>6}{'stalls':>8}{'lat':>5}"
              f"{'Mmsg/s':>9}{'Gbit/s in':>10}{'x ref':>9}")
    print(header)
    bytes_per_beat = result["data_width"] // 8
    for s in result["streams"]:
        per_msg = s["cycles"] / s["messages"]
        ideal = max(s["in_beats"], s["out_beats"]) / s["messages"]
        rate = CLOCK_HZ / per_msg
        gbit = rate * s["in_beats"] / s["messages"] * bytes_per_beat * 8 / 1e9
        ratio = f"{rate / rates[s['name']]:9.0f}" if s["name"] in rates else f"{'-':>9}"
        print(f"{s['name']:<15}{s['messages']:>6}{s['in_beats']:>10}{s['out_beats']:>10}"
              f"{s['cycles']:>8}{per_msg:>9.2f}{ideal:>7.2f}{ideal / per_msg:>6.2f}"
              f"{s['in_stall_cycles']:>8}{s['first_response_latency']:>5}"
              f"{rate / 1e6:>9.2f}{gbit:>10.1f}{ratio}")
    print("cyc/msg: first input beat to last output beat / messages (includes pipeline fill);"
          " ideal: one beat per cycle on the busier side; lat: last input beat -> first"
          " response beat; x ref: RTL at 250 MHz / Python reference OlafQueue"
          f" ({', '.join(f'{k} {v / 1e3:.1f} k msg/s' for k, v in rates.items())}).")
    if args.yosys:
        if shutil.which("yosys") is None:
            print("yosys not installed (apt-get install yosys)")
        else:
            print("yosys synth_xilinx -family xc7 estimate (cells; no place and route):")
            print(yosys_estimate(args.width))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
