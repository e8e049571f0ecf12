"""verify-aom scaling: solve time against workers N and horizon T, with model sizes.

Every row checks one property of the default deployment (``verification.config``)
with N and T changed. Times are the process's CPU seconds (z3 runs in-process, so
this is solver + model construction on one core, and it does not swing with the
load of a shared machine) and wall seconds. The baseline is measured in the same
process: the explicit encoding (one position per message) on small sizes, and the
segment encoding with its options switched off, so the ratios show what each
encoding choice buys.

    .venv/bin/python benchmarks/bench_verify.py            # the README table
    .venv/bin/python benchmarks/bench_verify.py --quick    # a minute or two
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from verification.check import check_property  # noqa: E402
from verification.config import Deployment  # noqa: E402
from verification.model import Options  # noqa: E402

PROPS = ("responsiveness", "fairness", "starvation")


def run(dep: Deployment, prop: str, options: Options, timeout: float) -> dict:
    c0 = time.process_time()
    w0 = time.monotonic()
    r = check_property(dep, prop, timeout, options)
    return {
        "cpu": time.process_time() - c0,
        "wall": time.monotonic() - w0,
        "status": r.status,
        **r.size,
    }


def row(label: str, dep: Deployment, prop: str, res: dict) -> str:
    return (f"| {label:<9} | {dep.workers:>3} | {dep.clusters:>2} | {dep.horizon:>4} | "
            f"{prop:<14} | {res['status']:<9} | {res['cpu']:>7.2f} | {res['wall']:>7.1f} | "
            f"{res.get('message_positions', 0):>6} | {res.get('constants', 0):>7} | "
            f"{res.get('assertions', 0):>7} |")


HEADER = ("| encoding  |   N |  C |    T | property       | result    |  CPU s  | wall s  "
          "| msgs   | consts  | asserts |\n"
          "|-----------|-----|----|------|----------------|-----------|---------|---------"
          "|--------|---------|---------|")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="small sweep only")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per check")
    p.add_argument("--skip-baseline", action="store_true")
    args = p.parse_args()
    base = Deployment()
    load = os.getloadavg()[0]
    print(f"load average {load:.1f} on {os.cpu_count()} cores; default deployment: "
          f"{base.as_dict()}")

    if not args.skip_baseline:
        print("\n## Encodings on the same problems (baseline = explicit)\n")
        print(HEADER)
        sizes = [(4, 12), (8, 12)] if args.quick else [(4, 12), (8, 12), (8, 24)]
        for n, t in sizes:
            dep = replace(base, workers=n, horizon=t)
            for prop in PROPS[:2]:  # counting does not encode starvation
                explicit = run(dep, prop, Options(engine="explicit"), args.timeout)
                print(row("explicit", dep, prop, explicit), flush=True)
                variants = [
                    ("segments", Options(engine="segments")),
                    ("seg-nosym", Options(engine="segments", symmetry_breaking=False)),
                    ("counting", Options(engine="counting")),
                ]
                if (n, t) == sizes[0]:
                    # One query over the whole horizon: far slower, so only the smallest size.
                    variants.append(("seg-1shot", Options(engine="segments", incremental=False)))
                for label, opt in variants:
                    res = run(dep, prop, opt, args.timeout)
                    ratio = explicit["cpu"] / max(res["cpu"], 1e-9)
                    print(row(label, dep, prop, res) + f" x{ratio:.1f} vs explicit", flush=True)

    print("\n## Scaling of the default encoding (segments)\n")
    print(HEADER)
    if args.quick:
        grid = [(n, 24) for n in (2, 8, 32)] + [(32, 50)]
    else:
        grid = [(n, 50) for n in (2, 4, 8, 16, 32, 64)] + [(32, t) for t in (10, 25, 75, 100)]
        grid += [(64, 100)]
    for n, t in grid:
        dep = replace(base, workers=n, horizon=t, clusters=min(base.clusters, n))
        for prop in PROPS:
            res = run(dep, prop, Options(), args.timeout)
            print(row("segments", dep, prop, res), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
