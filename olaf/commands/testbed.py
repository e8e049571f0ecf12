"""``olaf testbed``: the main job across Mininet hosts, through the software switch or bmv2."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from bmv2_topologies import bmv2
from bmv2_topologies.experiment import run_synthetic
from bmv2_topologies.mininet_api import MininetMissing, missing_requirements
from bmv2_topologies.shaping import LinkShape, ShapingError
from bmv2_topologies.testbed import Testbed, TestbedError
from bmv2_topologies.topology import TopologyError, load, shipped_names
from olaf.commands.compare import MODES
from olaf.drl.config import RunConfig

HELP = "run the DRL experiment (or synthetic traffic) on a Mininet topology (needs root)"

# RunConfig's and ImpactConfig's defaults, repeated (and tested) so that building the
# parser does not import the wire format (scapy).
RUN_DEFAULTS = SimpleNamespace(env_id="CartPole-v1", pull_rate=1000.0, capacity=64, values=64,
                               algo="impact", total_steps=1_000_000)
LEARNER_DEFAULTS = SimpleNamespace(hidden=32)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    r = sub.add_parser("run", help="build the topology, run an experiment on it, tear it down",
                       description="Build TOPO on Mininet, start the switches, program them over "
                       "P4Runtime, run the experiment on the hosts, write metrics and plots, and "
                       "remove every interface, namespace and process it created.")
    r.add_argument("topology", metavar="TOPO",
                   help="a topology.json file or a shipped name (olaf testbed list)")
    r.add_argument("--switch", choices=("soft", "bmv2"), default="soft",
                   help="soft: olaf switch -i; bmv2: simple_switch_grpc with p4/olaf.p4 (default soft)")
    r.add_argument("--bmv2", choices=("fast", "debug"), default=None,
                   help="with --switch bmv2, which build runs: fast (default), the -O3 build without "
                   "logging macros (.p4tools/bmv2-fast), or debug, the logging build (.p4tools/p4tools), "
                   "the only one whose --log-console/--log-level debug show a per-packet trace (the fast "
                   "build prints none); both log to logs/bmv2-<switch> at level warn")
    r.add_argument("--experiment", choices=("drl", "synthetic"), default="drl",
                   help="drl: the main job's training (olaf run's learner, judged by greedy "
                   "evaluation); synthetic: olaf worker/olaf ps traffic")
    r.add_argument("--out", type=Path, default=None,
                   help="directory for logs, metrics and plots (default runs/testbed-<topo>-<switch>-<time>)")
    r.add_argument("--tag", default=None,
                   help="3 characters in this run's interface names (default: random)")

    d = r.add_argument_group("experiment (defaults as olaf run; workers come from the topology)")
    rc, lc = RUN_DEFAULTS, LEARNER_DEFAULTS
    d.add_argument("--env", default=rc.env_id, help=f"gymnasium id (default {rc.env_id})")
    d.add_argument("--mode", choices=tuple(MODES), default="olaf",
                   help="olaf: merge/replace/drop queue, workers send with P_s (DESIGN §4); "
                   "olaf-always: the same queue, workers always send (P_s = 1); fifo: drop-tail "
                   "queue, workers always send (as olaf compare's modes)")
    d.add_argument("--duration", type=float, default=60.0,
                   help="seconds of training, a cap beside --total-steps (default 60)")
    d.add_argument("--total-steps", type=int, default=rc.total_steps,
                   help=f"budget in environment steps over all workers (default {rc.total_steps:,})")
    d.add_argument("--algo", choices=("impact", "a2c"), default=rc.algo,
                   help=f"the learner, as olaf run's (default {rc.algo})")
    d.add_argument("--target-reward", type=float, default=None,
                   help="stop once a greedy evaluation's mean return reaches this (default: the "
                   "environment's spec.reward_threshold, 475 CartPole-v1)")
    d.add_argument("--eval-every", type=int, default=10_000,
                   help="env steps between greedy evaluations (default 10,000)")
    d.add_argument("--pull-rate", type=float, default=rc.pull_rate,
                   help=f"PULLs/s of the PS, split among relays (default {rc.pull_rate:g})")
    d.add_argument("--capacity", type=int, default=rc.capacity, help=f"queue slots (default {rc.capacity})")
    d.add_argument("--values", type=int, default=rc.values,
                   help=f"V, values per block (default {rc.values}; bmv2 needs 64)")
    d.add_argument("--broadcast-period", type=float, default=0.2,
                   help="seconds between the PS's MODEL broadcasts (default 0.2)")
    d.add_argument("--lr", type=float, default=None,
                   help="the learner's learning rate (default: its own, impact 5e-4, a2c 1e-3)")
    d.add_argument("--hidden", type=int, default=lc.hidden, help=f"hidden width (default {lc.hidden})")
    d.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    d.add_argument("--rate", type=float, default=50.0, help="synthetic: updates/s per worker (default 50)")
    d.add_argument("--params", type=int, default=640, help="synthetic: gradient size (default 640)")

    e = r.add_argument_group("impairment (software switch only: the kernel here has no netem)")
    e.add_argument("--drop-prob", action="append", default=[], metavar="[PORT:]P",
                   help="olaf switch --drop-prob on every switch (repeatable)")
    e.add_argument("--delay-ms", action="append", default=[], metavar="[PORT:]MS",
                   help="olaf switch --delay-ms on every switch (repeatable)")

    b = r.add_argument_group(
        "bottleneck (DESIGN §7: tc on the switch-side end of the PS's link, the egress DATA queues at)")
    b.add_argument("--ps-link-rate", default=None, metavar="RATE",
                   help="HTB rate C toward the PS, in tc units: 10mbit, 800kbit (bits/s) or 500kbps "
                   "(bytes/s, as tc reads it); prints C in bytes/s and the DATA blocks/s it allows")
    b.add_argument("--ps-link-limit", default=None, metavar="LIMIT",
                   help="the FIFO behind it: bytes B (65536, 64kb = 65,536 B; a bfifo) or packets "
                   "(100p; a pfifo); default 1000p (a veth's txqueuelen); needs --ps-link-rate")

    sub.add_parser("list", help="the shipped topologies")
    s = sub.add_parser("show", help="a topology's hosts, links and derived routes")
    s.add_argument("topology", metavar="TOPO")
    sub.add_parser("check", help="whether Mininet (and bmv2) can run here, and why not")


def _show(t: Any) -> None:
    """``t``: a ``bmv2_topologies.topology.Topology``."""
    print(f"{t.name}: {len(t.workers)} workers, PS {t.ps.name} {t.ps.ip}, "
          f"{len(t.relays)} relays, switches {', '.join(t.switches)}")
    for sw in t.switches:
        print(f"  {sw}:")
        for r in t.routes(sw):
            print(f"    {r.prefix:18} -> port {r.port} ({r.mac})")


def _ps_link_summary(testbed: Any, shape: Any, values: int) -> dict[str, Any]:
    """``{"ps_link": ...}``: the shaping's derived numbers and the FIFO's counters, read before
    teardown deletes the interface; empty when the link is not shaped. Prints the counters."""
    if shape is None:
        return {}
    stats = testbed.ps_link_stats()
    print(f"olaf testbed: PS link FIFO ({stats['qdisc']} on {stats['interface']}): sent "
          f"{stats['sent_packets']} packets ({stats['sent_bytes']} B), dropped {stats['dropped']}",
          flush=True)
    return {"ps_link": {**shape.derived(values), **stats}}


def run_config(args: argparse.Namespace, workers: int) -> RunConfig:
    """The ``RunConfig`` of ``olaf testbed run``'s flags for a topology of ``workers`` worker
    hosts (one worker process each). ``--mode`` maps as ``olaf compare``'s modes: olaf-always
    is the OLAF queue with workers that always send. Raises ``ValueError`` on values the
    configuration refuses. Imports the learners (torch)."""
    from olaf.drl.a2c import A2CConfig
    from olaf.drl.evaluation import default_target
    from olaf.drl.impact import ImpactConfig

    switch_mode, always_send, _ = MODES[args.mode]
    target = args.target_reward if args.target_reward is not None else default_target(args.env)
    lr = {} if args.lr is None else {"learning_rate": args.lr}
    return RunConfig(algo=args.algo, env_id=args.env, workers=workers, processes=workers,
                     mode=switch_mode, always_send=always_send, total_steps=args.total_steps,
                     pull_rate=args.pull_rate, capacity=args.capacity, values=args.values,
                     duration=args.duration, target_reward=target, eval_every=args.eval_every,
                     broadcast_period=args.broadcast_period, seed=args.seed,
                     impact=ImpactConfig(hidden=args.hidden, **lr),
                     learner=A2CConfig(hidden=args.hidden, **lr))


def run(args: argparse.Namespace) -> int:
    def fail(message: str) -> int:
        print(f"olaf testbed: error: {message}", file=sys.stderr)
        return 2

    if args.action == "list":
        for name in shipped_names():
            t = load(name)
            print(f"{name:10} {len(t.workers):3} workers  {len(t.switches)} switch(es)  "
                  f"{len(t.relays)} relay(s)  {len(t.links)} links")
        return 0
    if args.action == "check":
        mn = missing_requirements()
        print(f"mininet: {'ok' if mn is None else mn}")
        for build in ("fast", "debug"):
            bm = bmv2.missing(build)
            print(f"bmv2 {build + ':':6} {'ok' if bm is None else bm}")
        return 0 if mn is None else 1
    try:
        topo = load(args.topology)
    except TopologyError as e:
        return fail(str(e))
    if args.action == "show":
        _show(topo)
        return 0

    if args.switch == "bmv2" and (args.drop_prob or args.delay_ms):
        return fail("--drop-prob/--delay-ms are options of the software switch; bmv2 drops "
                    "through the drop_sim table (olaf ctl set)")
    if args.tag is not None and (len(args.tag) > 3 or not args.tag.isalnum()):
        return fail("--tag must be 1-3 letters or digits")
    if args.bmv2 is not None and args.switch != "bmv2":
        return fail("--bmv2 picks the bmv2 build and needs --switch bmv2")
    ps_link = None
    if args.ps_link_limit is not None and args.ps_link_rate is None:
        return fail("--ps-link-limit needs --ps-link-rate (without a rate nothing queues there)")
    if args.ps_link_rate is not None:
        try:
            ps_link = LinkShape.parse(args.ps_link_rate, args.ps_link_limit)
        except ShapingError as e:
            return fail(f"--ps-link-rate/--ps-link-limit: {e}")
    try:
        # torch and gymnasium (the learners, the evaluation): imported when the command runs,
        # so `olaf --help` stays fast. One worker process per worker host, the learner of
        # olaf run: IMPACT refreshes its weights just before each loss from the newest MODEL
        # version the host assembled.
        cfg = run_config(args, len(topo.workers))
    except ValueError as e:
        return fail(str(e))
    reason = missing_requirements()
    if reason:
        return fail(reason)
    # torch and gymnasium (the DRL job): imported when the command runs, so `olaf --help`
    # stays fast.
    from olaf.testbed.drl import run_drl, write_report

    out = args.out or Path("runs") / time.strftime(f"testbed-{topo.name}-{args.switch}-%Y%m%d-%H%M%S")
    extra = [f"--drop-prob={v}" for v in args.drop_prob] + [f"--delay-ms={v}" for v in args.delay_ms]
    testbed = Testbed(topo, out / "logs", switch=args.switch, tag=args.tag,
                      queue={"mode": cfg.mode, "capacity": cfg.capacity, "values": cfg.values,
                             "frac_bits": cfg.frac_bits, "feedback": cfg.feedback},
                      switch_args={"*": extra}, bmv2_build=args.bmv2 or "fast", ps_link=ps_link)
    kind = f"bmv2 ({args.bmv2 or 'fast'} build)" if args.switch == "bmv2" else args.switch
    print(f"olaf testbed: {topo.name} on Mininet ({len(topo.hosts)} hosts, {len(topo.switches)} "
          f"{kind} switch(es), interfaces olaf{testbed.tag}*), mode {cfg.variant} (workers send "
          f"{MODES[cfg.variant][2]}), logs in {out / 'logs'}", flush=True)
    if ps_link is not None:
        print(f"olaf testbed: PS link, egress of {testbed.ps_link_interface()} (switch side): "
              f"{ps_link.describe(cfg.values)}", flush=True)
    # A SIGTERM unwinds like Ctrl-C, so the finally below still tears the testbed down.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        testbed.start()
    except (MininetMissing, TestbedError, OSError, ConnectionError) as e:
        return fail(f"cannot build the testbed: {e}")
    left: list[str] = []
    try:
        if args.experiment == "synthetic":
            summary = run_synthetic(testbed, duration=args.duration, rate=args.rate, params=args.params)
            summary |= _ps_link_summary(testbed, ps_link, cfg.values)
            (out / "synthetic.json").write_text(json.dumps(summary, indent=1, default=str))
            print(json.dumps(summary["switches"], indent=1))
            print(f"wrote {out / 'synthetic.json'}")
        else:
            printed = [-5.0]

            def progress(s: Any) -> None:
                """``s``: an ``olaf.drl.results.Snapshot``, every 0.5 s; one line every 5 s."""
                if s.elapsed - printed[0] >= 5.0:
                    printed[0] = s.elapsed
                    print(f"t={s.elapsed:5.1f}s steps={s.env_steps} episodes={s.episodes} "
                          f"return={s.mean_return:.1f} version={s.model_version} "
                          f"applied={s.blocks_applied} aom={s.aom_ms:.1f}ms "
                          f"threshold={s.threshold}", flush=True)

            result = run_drl(testbed, cfg, progress=progress)
            summary = result.summary()
            summary |= {"testbed": {"topology": topo.name, "switch": args.switch,
                                    "bmv2_build": (args.bmv2 or "fast") if args.switch == "bmv2" else None,
                                    "per_switch": result.switch.get("per_switch", {}),
                                    **_ps_link_summary(testbed, ps_link, cfg.values)}}
            files = write_report(result, out)
            (out / "testbed_summary.json").write_text(json.dumps(summary, indent=1, default=str))
            print(json.dumps({k: v for k, v in summary.items() if k != "testbed"}, indent=1, default=str))
            print(f"wrote {len(files) + 1} files to {out}/")
    except (TestbedError, OSError, ValueError, ConnectionError) as e:
        print(f"olaf testbed: error: {e}", file=sys.stderr)
        return 1
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the teardown itself is not interrupted
        left = testbed.close()
        if left:
            print("olaf testbed: teardown left behind: " + "; ".join(left), file=sys.stderr)
    return 1 if left else 0
