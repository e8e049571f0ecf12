"""Rebuild table.csv from the runs beside this file and print the paired ratios.

Run names are POINT-SWITCH-MODE-sSEED (POINT: S, the switch's queue holds the buffer; K,
the kernel's pfifo does). A run that missed 475 within its 180 s is censored at the env steps
it had taken (olaf.drl.censored, as olaf sweep and olaf compare read a missed target).
Run with the project's Python: ``.venv/bin/python docs/results/tc-bottleneck/table.py``
(``--report``: the ratios from the committed table.csv alone).
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

from olaf.drl.censored import Outcome, compare

HERE = Path(__file__).resolve().parent
COLUMNS = ("run", "point", "switch", "mode", "seed", "stopped_by", "steps_to_target",
           "time_to_target_s", "env_steps", "best_eval_return", "rho_wire", "update_age_mean_ms",
           "mean_staleness_versions", "staleness_p90", "mean_agg_count", "skipped_share",
           "dropped_full_share", "dropped_reward_share", "tc_sent", "tc_dropped", "blocks_applied")


def row(path: Path) -> dict[str, object]:
    d = json.loads((path / "testbed_summary.json").read_text())
    point, switch, mode, seed = path.name.split("-")
    link, out = d["testbed"]["ps_link"], d["outcomes"]
    total = sum(out.values()) or 1
    return {"run": path.name, "point": point, "switch": switch, "mode": mode, "seed": int(seed[1:]),
            "stopped_by": d["stopped_by"], "steps_to_target": d["steps_to_target"],
            "time_to_target_s": d["time_to_target_s"], "env_steps": d["env_steps"],
            "best_eval_return": d["best_eval_return"],
            # offered UPDATE bytes over what the link carries of DATA (334-byte frames)
            "rho_wire": round(d["offered_bytes_per_s"] / (link["wire_data_frames_per_s"] * 292), 2),
            "update_age_mean_ms": round(d["update_age_mean_ms"], 1),
            "mean_staleness_versions": round(d["mean_staleness_versions"], 2),
            "staleness_p90": d["staleness_p90"], "mean_agg_count": round(d["mean_agg_count"], 2),
            "skipped_share": round(d["skipped_share"], 3),
            "dropped_full_share": round(out["DROPPED_FULL"] / total, 3),
            "dropped_reward_share": round(out["DROPPED_REWARD"] / total, 3),
            "tc_sent": link["sent_packets"], "tc_dropped": link["dropped"],
            "blocks_applied": d["blocks_applied"]}


def main() -> None:
    if sys.argv[1:] == ["--report"]:
        print(report_from_csv(), end="")
        return
    rows = [row(p) for p in sorted(HERE.iterdir()) if (p / "testbed_summary.json").exists()]
    with (HERE / "table.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows(rows)
    print(report(rows), end="")


def report_from_csv() -> str:
    """``report`` of the committed table.csv (docs/results/tables.py's source for it)."""
    with (HERE / "table.csv").open(newline="") as f:
        rows = [{**r, "seed": int(r["seed"]), "steps_to_target": r["steps_to_target"] or None}
                for r in csv.DictReader(f)]
    return report(rows)


def report(rows: list[dict[str, object]]) -> str:
    """FIFO/OLAF env steps to 475 per point and switch, paired by seed, censored."""
    runs = {(r["point"], r["switch"], r["mode"], r["seed"]):
            Outcome(float(r["steps_to_target"] or r["env_steps"]), r["steps_to_target"] is not None)
            for r in rows}
    out = []
    for point, switch in sorted({(r["point"], r["switch"]) for r in rows}):
        seeds = sorted(s for (p, w, m, s) in runs if (p, w, m) == (point, switch, "olaf")
                       and (point, switch, "fifo", s) in runs)
        c = compare([runs[(point, switch, "fifo", s)] for s in seeds],
                    [runs[(point, switch, "olaf", s)] for s in seeds])
        per_seed = ", ".join(f"{p.ratio:.2f}" + ("" if p.kind == "exact" else f" ({p.kind})")
                             for p in c.pairs)
        out.append(f"{point}-{switch}: fifo/olaf env steps per seed {per_seed}"
                   f": {c.interval_text()}, reached fifo {c.reached_baseline}/{c.n}, olaf "
                   f"{c.reached_top}/{c.n}, OLAF ahead on {c.top_ahead} of {c.informative}\n")
    return "".join(out)


if __name__ == "__main__":
    main()
