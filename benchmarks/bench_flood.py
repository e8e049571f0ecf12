"""Isolation measured (issue 28, item 3): a neighbour cluster floods the switch while a
victim trains, with and without ``cluster_quota`` (DESIGN.md §3 steps 4-5).

The victim is ``olaf run`` (CartPole-v1, IMPACT, 8 workers, all in cluster 0, one seed,
the default target 475, its embedded software switch with ``--max-clusters 2`` so that
cluster id 1 belongs to nobody in the run). Once the run is training (its ``run.json``
names the switch's UDP address), the attacker, ``olaf worker`` in its own process, floods
that address from cluster 1 at line rate: ``--rate 0 --policy always``, every block id the
queue accepts (distinct ``(cluster, block)`` keys, each new once the PS pops it). Settings:

* ``baseline``: no attacker, no quota (the reference every ratio is taken against);
* ``flood``: the attacker, no quota (``cluster_quota`` = capacity);
* ``flood-q{capacity/2}``: the attacker, quota capacity/2, which is also capacity/K with
  K = 2, the clusters present (victim and attacker), so the two settings of the issue are
  one run here;
* ``flood-q{capacity/4}``: the attacker, a tighter quota (as if provisioned for 4 tenants);
* ``quota-q{capacity/2}``: no attacker, quota capacity/2: what the quota costs the victim
  by itself (it caps the victim's own cluster too).

Per setting: the victim's DROPPED_FULL share (its 8 senders' ACK outcomes), AoM mean and
p99 (the PS tracks the victim's worker bits only: the attacker is worker 31), staleness of
the victim's DATA (``data.csv`` rows; the attacker's are told apart by its reward, -1,
which no CartPole worker sends), the share of the PS's DATA that was the attacker's, env
steps and seconds to the greedy target, the final greedy return, and the attacker's sent
and ENQUEUED rates; ratios against the baseline of the same seed.

What the attacker's DATA does at the PS is not isolated by the quota: a PULL pops the
head slot whatever its cluster, and the run's PS applies it (docs/security.md, "PULL
isolation"). The attacker sends zero gradients (``--grad-scale 0``), the least it can
send, but even a zero block is an Adam step on the victim's weights (the first moment
keeps moving them) and a publication that advances the model version the victim's
staleness is counted in; its rewards (-1) enter the controller's mean of recent DATA
rewards. The attacker's process and the switch thread serving it also take CPU from the
victim on this 2-core machine. All of that is the same with a quota as without: compare
the flood settings with each other for what the quota changes in the queue.

Run: ``.venv/bin/python benchmarks/bench_flood.py [--seeds 0 1] [--duration 120]``
(about 5 runs of up to ``--duration`` s per seed; loopback only; every process it starts
is stopped by its PID).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
_SCRIPT = Path(sys.executable).parent / "olaf"
OLAF = ([str(_SCRIPT)] if _SCRIPT.exists()
        else [sys.executable, "-c", "import sys; from olaf.cli import main; sys.exit(main())"])
"""The ``olaf`` command of this interpreter's environment."""
ATTACKER_CLUSTER = 1
ATTACKER_WORKER = 31
"""Outside the victim's 8 worker bits, so the PS's AoM does not count the attacker."""
ATTACKER_REWARD = -1.0
"""A reward no CartPole worker sends (returns are >= 0): tells the attacker's DATA rows apart."""
START_TIMEOUT_S = 180.0
"""Seconds for ``olaf run`` to start training (importing torch at load 15+ is slow)."""


@dataclass(frozen=True)
class Setting:
    name: str
    attack: bool
    quota: int
    """``--cluster-quota``; 0: none (capacity)."""


def settings(capacity: int) -> list[Setting]:
    half, quarter = capacity // 2, capacity // 4
    return [Setting("baseline", False, 0), Setting("flood", True, 0),
            Setting(f"flood-q{half}", True, half), Setting(f"flood-q{quarter}", True, quarter),
            Setting(f"quota-q{half}", False, half)]


def gradient_blocks(values: int) -> int:
    """Blocks of one CartPole-v1 IMPACT gradient: the queue's ``max_blocks`` in the run."""
    from olaf.algorithm import env_spaces
    from olaf.drl.config import RunConfig
    from olaf.drl.learners import make_algorithm

    model = make_algorithm(RunConfig()).make_model(*env_spaces("CartPole-v1"))
    params = sum(p.numel() for p in model.parameters())
    return -(-params // values)


def stop(proc: subprocess.Popen, grace: float) -> None:
    """SIGINT to this one PID (both commands then shut down their own children), SIGKILL
    after ``grace`` seconds."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def wait_for_switch(proc: subprocess.Popen, out: Path) -> tuple[str, int] | None:
    """The embedded switch's address from the run's ``run.json`` (written once training runs)."""
    deadline = time.monotonic() + START_TIMEOUT_S
    status = out / "run.json"
    while time.monotonic() < deadline and proc.poll() is None:
        if status.exists():
            try:
                address = json.loads(status.read_text()).get("switch_address")
            except (json.JSONDecodeError, OSError):
                address = None  # written atomically, but be safe with a half-read file
            if address:
                return address[0], int(address[1])
        time.sleep(0.2)
    return None


def run_setting(setting: Setting, seed: int, args: argparse.Namespace, blocks: int,
                root: Path) -> dict[str, Any]:
    """One ``olaf run`` (and the attacker, if any) to its end; the figures."""
    out = root / f"seed{seed}-{setting.name}"
    cmd = [*OLAF, "run", "--env", "CartPole-v1", "--workers", str(args.workers), "--clusters", "1",
           "--max-clusters", "2", "--capacity", str(args.capacity), "--seed", str(seed),
           "--total-steps", str(args.total_steps), "--duration", str(args.duration), "--out", str(out)]
    if setting.quota:
        cmd += ["--cluster-quota", str(setting.quota)]
    load0 = os.getloadavg()[0]
    log = (root / f"seed{seed}-{setting.name}.log").open("w")
    victim = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    attacker: subprocess.Popen | None = None
    attacker_out = ""
    try:
        if setting.attack:
            address = wait_for_switch(victim, out)
            if address is None:
                raise RuntimeError(f"{setting.name}: the run never wrote its switch address")
            attacker = subprocess.Popen(
                [*OLAF, "worker", "--switch", f"{address[0]}:{address[1]}",
                 "--cluster-id", str(ATTACKER_CLUSTER), "--worker-id", str(ATTACKER_WORKER),
                 "--params", str(blocks * args.values), "--values", str(args.values),
                 "--rate", "0", "--policy", "always", "--reward", str(ATTACKER_REWARD),
                 "--reward-std", "0", "--grad-scale", "0", "--seed", str(seed),
                 "--duration", str(args.duration + START_TIMEOUT_S), "--stats-interval", "0"],
                cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        victim.wait(args.duration + 2 * START_TIMEOUT_S)
    finally:
        if attacker is not None:
            stop(attacker, 15.0)
            attacker_out = attacker.stdout.read() if attacker.stdout else ""
        stop(victim, 60.0)
        log.close()
    return figures(setting, seed, out, attacker_out, load0, os.getloadavg()[0], blocks)


def figures(setting: Setting, seed: int, out: Path, attacker_out: str, load0: float, load1: float,
            blocks: int) -> dict[str, Any]:
    summary = json.loads((out / "summary.json").read_text())
    outcomes: dict[str, int] = {}
    for sender in summary["senders"]:
        for name, count in sender.get("outcomes", {}).items():
            outcomes[name] = outcomes.get(name, 0) + count
    answered = sum(outcomes.values())
    victim_stale: list[float] = []
    attacker_data = 0
    with (out / "data.csv").open() as f:
        for row in csv.DictReader(f):
            if float(row["reward"]) == ATTACKER_REWARD:
                attacker_data += 1
            else:
                victim_stale.append(float(row["staleness_versions"]))
    rows = attacker_data + len(victim_stale)
    attack: dict[str, Any] = {}
    for line in attacker_out.splitlines():
        if line.startswith("final "):
            a = json.loads(line[len("final "):])
            elapsed = a.get("elapsed_s") or math.nan
            attack = {"attacker_sent_blocks_per_s": a["sent_blocks"] / elapsed,
                      "attacker_enqueued_per_s": a["outcomes"]["ENQUEUED"] / elapsed,
                      "attacker_drop_full_share": (a["outcomes"]["DROPPED_FULL"]
                                                   / max(1, sum(a["outcomes"].values()))),
                      "attacker_invalid": a["outcomes"]["DROPPED_INVALID"],
                      "attacker_seconds": elapsed}
    if setting.attack and not attack:
        attack = {"attacker_error": "no final line from olaf worker"}
    stale = sorted(victim_stale)
    return {
        "setting": setting.name, "seed": seed, "attack": setting.attack, "quota": setting.quota,
        "load_start": load0, "load_end": load1,
        "victim_drop_full_share": outcomes.get("DROPPED_FULL", 0) / answered if answered else math.nan,
        "victim_enqueued_share": outcomes.get("ENQUEUED", 0) / answered if answered else math.nan,
        "victim_blocks_answered": answered,
        "aom_mean_ms": summary["aom_mean_ms"], "aom_p99_ms": summary["aom_p99_ms"],
        "staleness_mean": statistics.fmean(stale) if stale else math.nan,
        "staleness_p99": stale[min(len(stale) - 1, int(0.99 * len(stale)))] if stale else math.nan,
        "attacker_data_share": attacker_data / rows if rows else math.nan,
        "env_steps": summary["env_steps"], "steps_to_target": summary["steps_to_target"],
        "time_to_target_s": summary["time_to_target_s"], "wall_time_s": summary["wall_time_s"],
        "final_eval_return": summary["final_eval_return"], "stopped_by": summary["stopped_by"],
        "blocks_per_gradient": summary["blocks_per_gradient"], "attacker_blocks": blocks,
        **attack,
    }


def ratio(value: Any, base: Any) -> float:
    if value is None or base is None or not base or math.isnan(value) or math.isnan(base):
        return math.nan
    return value / base


def fmt(value: Any, spec: str = ".3g") -> str:
    if value is None:
        return "-"
    if isinstance(value, float) and math.isnan(value):
        return "nan"
    return format(value, spec) if isinstance(value, (int, float)) else str(value)


def report(results: list[dict[str, Any]]) -> None:
    base = {r["seed"]: r for r in results if r["setting"] == "baseline"}
    head = ("setting", "seed", "load", "drop_full", "enq", "AoM ms", "p99 ms", "stale", "st p99",
            "atk DATA", "atk blk/s", "atk enq/s", "steps", "t->475 s", "final",
            "xAoM", "xp99", "xsteps", "xt")
    print(" | ".join(head))
    for r in results:
        b = base.get(r["seed"], {})
        print(" | ".join([
            r["setting"], str(r["seed"]), f"{r['load_start']:.1f}-{r['load_end']:.1f}",
            fmt(r["victim_drop_full_share"]), fmt(r["victim_enqueued_share"]),
            fmt(r["aom_mean_ms"]), fmt(r["aom_p99_ms"]), fmt(r["staleness_mean"]), fmt(r["staleness_p99"]),
            fmt(r["attacker_data_share"]), fmt(r.get("attacker_sent_blocks_per_s")),
            fmt(r.get("attacker_enqueued_per_s")), fmt(r["steps_to_target"] or r["env_steps"]),
            fmt(r["time_to_target_s"]), fmt(r["final_eval_return"]),
            fmt(ratio(r["aom_mean_ms"], b.get("aom_mean_ms"))),
            fmt(ratio(r["aom_p99_ms"], b.get("aom_p99_ms"))),
            fmt(ratio(r["steps_to_target"], b.get("steps_to_target"))),
            fmt(ratio(r["time_to_target_s"], b.get("time_to_target_s"))),
        ]), flush=True)


def mean_of(rows: list[dict[str, Any]], key: str) -> float:
    values = [r[key] for r in rows if isinstance(r.get(key), (int, float)) and not math.isnan(r[key])]
    return statistics.fmean(values) if values else math.nan


def markdown(results: list[dict[str, Any]]) -> None:
    """Per setting, the mean over seeds (as docs/security.md shows it); "reached" counts the
    seeds whose run got to the greedy target."""
    print("| setting | victim DROPPED_FULL | AoM mean / p99 ms | staleness mean / p99 | "
          "attacker share of DATA | attacker blocks/s sent | env steps | reached 475 | "
          "time to 475 s | final greedy return |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name in dict.fromkeys(r["setting"] for r in results):
        rows = [r for r in results if r["setting"] == name]
        reached = [r for r in rows if r["time_to_target_s"] is not None]
        print(f"| {name} | {mean_of(rows, 'victim_drop_full_share'):.1%} | "
              f"{mean_of(rows, 'aom_mean_ms'):.0f} / {mean_of(rows, 'aom_p99_ms'):.0f} | "
              f"{mean_of(rows, 'staleness_mean'):.2f} / {mean_of(rows, 'staleness_p99'):.1f} | "
              f"{mean_of(rows, 'attacker_data_share'):.1%} | "
              f"{fmt(mean_of(rows, 'attacker_sent_blocks_per_s'), ',.0f')} | "
              f"{mean_of(rows, 'env_steps'):,.0f} | {len(reached)}/{len(rows)} | "
              f"{fmt(mean_of(reached, 'time_to_target_s'), '.0f')} | "
              f"{mean_of(rows, 'final_eval_return'):.0f} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--only", nargs="+", default=None, metavar="SETTING",
                        help="run only these settings (names as printed; baseline is always run)")
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--capacity", type=int, default=64)
    parser.add_argument("--values", type=int, default=64, help="V of the run (its default, 64)")
    parser.add_argument("--duration", type=float, default=120.0, help="wall cap per run, s")
    parser.add_argument("--total-steps", type=int, default=500_000)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--table", type=Path, default=None, metavar="JSON",
                        help="print the tables of a finished run's bench_flood.json and exit")
    args = parser.parse_args()
    if args.table is not None:
        results = json.loads(args.table.read_text())
        report(results)
        markdown(results)
        return 0
    if args.capacity < 4 or args.workers < 1 or args.duration <= 0 or len(args.seeds) > 5:
        print("bench_flood: error: --capacity >= 4, --workers >= 1, --duration > 0, at most 5 seeds",
              file=sys.stderr)
        return 2
    root = args.out or ROOT / "runs" / time.strftime("bench-flood-%Y%m%d-%H%M%S")
    root.mkdir(parents=True, exist_ok=True)
    blocks = gradient_blocks(args.values)
    chosen = [s for s in settings(args.capacity)
              if args.only is None or s.name in args.only or s.name == "baseline"]
    print(f"bench_flood: {len(args.seeds)} seed(s) x {len(chosen)} settings, capacity "
          f"{args.capacity}, attacker cluster {ATTACKER_CLUSTER} over {blocks} block ids, "
          f"load {os.getloadavg()[0]:.1f}, into {root}", flush=True)
    results = []
    for seed in args.seeds:
        for setting in chosen:
            t = time.monotonic()
            r = run_setting(setting, seed, args, blocks, root)
            results.append(r)
            print(f"  seed {seed} {setting.name}: {time.monotonic() - t:.0f} s, stopped by "
                  f"{r['stopped_by']}, drop_full {fmt(r['victim_drop_full_share'])}", flush=True)
            (root / "bench_flood.json").write_text(json.dumps(results, indent=2) + "\n")
    report(results)
    markdown(results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
