"""verify-aom scaling: solve time against workers N and horizon T, with model sizes.

Every row checks one property of the default deployment (``verification.config``)
with N and T changed. Times are the process's CPU seconds (z3 runs in-process, so
this is solver + model construction on one core, and it does not swing with the
load of a shared machine) and wall seconds. The baseline is measured in the same
process: the explicit encoding (one position per message) on small sizes, and the
segment encoding with its options switched off, so the ratios show what each
encoding choice buys.

The all-T search (``verification.unbounded``, explicit-state closure of the reachable
set) is timed against the bounded check of the same deployment and property, run first
in the same process (ratio = search / bounded check); ``--all-t-per-worker S`` also runs
the fairness search per worker instead of counted, with ``S`` seconds of budget, as the
baseline the counted search replaced.

    .venv/bin/python benchmarks/bench_verify.py            # the README tables
    .venv/bin/python benchmarks/bench_verify.py --quick    # a minute or two
    .venv/bin/python benchmarks/bench_verify.py --all-t-only --all-t-per-worker 60
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from verification import unbounded  # noqa: E402
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


ALL_T_HEADER = ("|   N | property       | bounded (T)    | CPU s  | all-T search | states  | slot | "
                "CPU s  | wall s | search / bounded |\n"
                "|-----|----------------|----------------|--------|--------------|---------|------|"
                "--------|--------|------------------|")


def search_timed(dep: Deployment, prop: str, budget: float, counted: bool = True) -> dict:
    c0 = time.process_time()
    w0 = time.monotonic()
    r = unbounded.search(dep, prop, deadline=w0 + budget, counted=counted)
    return {"cpu": time.process_time() - c0, "wall": time.monotonic() - w0, "status": r.status,
            "states": r.states, "depth": r.depth, "abstraction": r.abstraction}


def all_t_rows(sizes: list[int], args: argparse.Namespace) -> None:
    """Per (N, property): the bounded check (the baseline), then the all-T search alone."""
    print(ALL_T_HEADER)
    for n in sizes:
        dep = replace(Deployment(), workers=n, clusters=min(Deployment().clusters, n))
        for prop in PROPS:
            bounded = run(dep, prop, Options(), args.timeout)
            found = search_timed(dep, prop, args.all_t_budget)
            ratio = found["cpu"] / max(bounded["cpu"], 1e-9)
            print(f"| {n:>3} | {prop:<14} | {bounded['status']:<8} T={dep.horizon:<3} | "
                  f"{bounded['cpu']:>6.2f} | {found['status']:<12} | {found['states']:>7} | "
                  f"{found['depth']:>4} | {found['cpu']:>6.2f} | {found['wall']:>6.1f} | "
                  f"x{ratio:.2f} |", flush=True)
            if prop == "fairness" and args.all_t_per_worker > 0:
                named = search_timed(dep, prop, args.all_t_per_worker, counted=False)
                speedup = named["cpu"] / max(found["cpu"], 1e-9)
                bound = ">=" if named["status"] == "open" else ""
                print(f"|     | fairness, per worker (counted=False) |  |  | {named['status']:<12} | "
                      f"{named['states']:>7} | {named['depth']:>4} | {named['cpu']:>6.2f} | "
                      f"{named['wall']:>6.1f} | counted is {bound}x{speedup:.1f} faster |",
                      flush=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="small sweep only")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per check")
    p.add_argument("--skip-baseline", action="store_true")
    p.add_argument("--all-t-only", action="store_true",
                   help="only the all-T search against the bounded check")
    p.add_argument("--all-t-budget", type=float, default=60.0,
                   help="seconds per all-T search (default 60, verify-aom's)")
    p.add_argument("--all-t-per-worker", type=float, default=0.0, metavar="S",
                   help="also run the per-worker fairness search with S seconds (0: skip)")
    args = p.parse_args()
    base = Deployment()
    load = os.getloadavg()[0]
    print(f"load average {load:.1f} on {os.cpu_count()} cores; default deployment: "
          f"{base.as_dict()}")

    print("\n## All-T search against the bounded check (baseline, same process)\n")
    all_t_rows([2, 4, 8] if args.quick else [2, 3, 4, 8], args)
    if args.all_t_only:
        return 0

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
