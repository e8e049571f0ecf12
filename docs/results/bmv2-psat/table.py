"""table.csv of the bmv2 P_s study (olaf vs olaf-always on bmv2), from the run directories here.

Run from anywhere: ``python docs/results/bmv2-psat/table.py``. Reads each run's
testbed_summary.json and summary.json, runs-load.txt (``uptime`` before and after each run)
and loadavg-samples.txt (the 1-minute load every 10 s, from the second run on).

UPDATE blocks, per run, summed over the workers (the senders' counters, summary.json
``senders``; bmv2's counter, testbed_summary.json ``testbed.per_switch.s1.msg_types``):

* sent: ``sent_blocks``, the blocks of every update the workers sent;
* acked_in_time: ``acked_blocks``, answered within the sender's ack timeout (1 s);
* acked_late: ``unexpected_acks``, ACKs matching no pending update, i.e. of an update
  whose 1-s timeout had expired (bmv2 never duplicates, and no ACK had a bad block id);
* bmv2_counted_update: the UPDATEs that entered bmv2's pipeline (each is answered);
* unanswered_pct: 1 - acked_in_time / sent, what the senders count as lost;
* never_processed_pct: 1 - bmv2_counted_update / sent, the blocks bmv2 never took in.
"""

import csv
import datetime
import json
import re
from pathlib import Path

HERE = Path(__file__).resolve().parent


def loads() -> tuple[dict[str, dict[str, float]], dict[str, dict[str, float]], list[tuple[int, float]]]:
    at: dict[str, dict[str, float]] = {}
    times: dict[str, dict[str, float]] = {}
    samples = [(int(w[0]), float(w[1])) for w in
               (line.split() for line in (HERE / "loadavg-samples.txt").read_text().splitlines())]
    day = datetime.date.fromtimestamp(samples[0][0])  # runs-load.txt has times of day only
    for line in (HERE / "runs-load.txt").read_text().splitlines():
        name, what, hms = line.split()[:3]
        at.setdefault(name, {})[what] = float(re.search(r"load average: ([\d.]+)", line).group(1))
        stamp = datetime.datetime.combine(day, datetime.time.fromisoformat(hms)).timestamp()
        times.setdefault(name, {})[what] = stamp
    return at, times, samples


def main() -> None:
    at, times, samples = loads()
    rows = []
    for d in sorted(p for p in HERE.iterdir() if p.is_dir()):
        s = json.loads((d / "testbed_summary.json").read_text())
        run = json.loads((d / "summary.json").read_text())
        senders, receiver = run["senders"], run["receiver"]
        bm = s["testbed"]["per_switch"]["s1"]["msg_types"]
        sent = sum(w["sent_blocks"] for w in senders)
        acked = sum(w["acked_blocks"] for w in senders)
        late = sum(w["unexpected_acks"] for w in senders)
        wall = s["wall_time_s"]
        t = times.get(d.name, {})
        during = [v for ts, v in samples if t.get("start", 0) <= ts <= t.get("end", 0)]
        rows.append({
            "run": d.name, "topology": s["testbed"]["topology"], "variant": s["variant"],
            "seed": s["seed"], "load_start": at[d.name]["start"], "load_end": at[d.name]["end"],
            "load_mean_during": round(sum(during) / len(during), 1) if during else "",
            "stopped_by": s["stopped_by"], "wall_s": round(wall, 1), "env_steps": s["env_steps"],
            "best_greedy": s["best_eval_return"], "last_greedy": s["greedy_eval_return_last"],
            "time_to_475_s": "" if s["time_to_target_s"] is None else round(s["time_to_target_s"], 1),
            "steps_to_475": s["steps_to_target"] or "",
            "train_return_first": round(s["initial_return"], 1),
            "train_return_last": round(s["final_return"], 1),
            "p_s_mean": round(s["p_s_mean"], 3), "skipped_share": round(s["skipped_share"], 3),
            "update_blocks_sent": sent, "acked_in_time": acked, "acked_late": late,
            "bmv2_counted_update": bm["UPDATE"],
            "unanswered_pct": round(100 * (sent - acked) / sent, 1),
            "never_processed_pct": round(100 * (sent - bm["UPDATE"]) / sent, 1),
            "late_share_of_acks_pct": round(100 * late / (acked + late), 1),
            "offered_blocks_per_s": round(sent / wall), "bmv2_update_per_s": round(bm["UPDATE"] / wall),
            "pulls_sent": receiver["pulls_sent"], "bmv2_counted_pull": bm["PULL"],
            "bmv2_counted_model": bm["MODEL"], "bmv2_msgs_per_s": round(sum(bm.values()) / wall),
            "applied_per_s": round(s["blocks_applied"] / wall, 1),
            "aom_mean_ms": round(s["aom_mean_ms"], 1), "aom_p99_ms": round(s["aom_p99_ms"], 1),
            "update_age_mean_ms": round(s["update_age_mean_ms"], 1),
            "staleness_p50": s["staleness_p50"], "staleness_p90": s["staleness_p90"],
            "ps_version": s["model_version"],
            "worker_versions": "/".join(str(w["model_version"]) for w in senders),
        })
    with open(HERE / "table.csv", "w", newline="") as fh:
        out = csv.DictWriter(fh, fieldnames=list(rows[0]))
        out.writeheader()
        out.writerows(rows)


if __name__ == "__main__":
    main()
