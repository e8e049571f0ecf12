"""``olaf worker``: a standalone OLAF worker sending synthetic gradients through a switch."""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable

import numpy as np

from olaf.shutdown import stop_on_signals
from worker_transport.policy import (
    DEFAULT_ALPHA,
    DEFAULT_BETA,
    DEFAULT_FEEDBACK_TTL_MS,
    POLICY_NAMES,
    make_policy,
)

HELP = "send synthetic gradient updates of a given size at a given rate (UDP or raw Ethernet)"

OLAF_PORT = 20300
"""worker_transport.protocol.OLAF_PORT, repeated (and tested) so that building the parser
does not import scapy."""
DEFAULT_SILENCE_WARN_S = 3.0
"""Seconds without any answer from the switch before a worker or PS says so."""


def add_transport_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags selecting and addressing a transport (UDP by default); see
    ``worker_transport.transport.transport_from_args``."""
    g = parser.add_argument_group("transport")
    g.add_argument("--switch", default=f"127.0.0.1:{OLAF_PORT}", metavar="HOST:PORT",
                   help="where packets go: the software switch's UDP address, or with --iface "
                   "the destination IPv4:port of the frames (default %(default)s)")
    g.add_argument("--bind", default=None, metavar="HOST:PORT",
                   help="UDP: local address (default: any address, a free port)")
    g.add_argument("--any-source", action="store_true",
                   help="UDP: accept replies from any address, not only from --switch")
    g.add_argument("--gso", choices=("auto", "on", "off"), default="auto",
                   help="UDP: send batches as UDP GSO super-datagrams, cut by the kernel; only "
                   "right where a UDP socket, not a raw-socket switch on a veth, receives them "
                   "(default auto: on for a loopback --switch)")
    g.add_argument("--iface", default=None,
                   help="send raw Ethernet/IPv4/UDP frames on this interface instead (root)")
    g.add_argument("--src-ip", default=None, help="with --iface: our IPv4 address")
    g.add_argument("--src-port", type=int, default=OLAF_PORT,
                   help="with --iface: our UDP port (default %(default)s)")
    g.add_argument("--dst-mac", default=None, help="with --iface: the next hop's MAC (the switch)")
    g.add_argument("--src-mac", default=None,
                   help="with --iface: our MAC (default: the interface's)")


def add_silence_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--silence-warn", type=float, default=DEFAULT_SILENCE_WARN_S, metavar="S",
                        help="warn on stderr when the switch has not answered for S seconds "
                        f"(default {DEFAULT_SILENCE_WARN_S:g}); a run it never answered exits 1")


def add_arguments(parser: argparse.ArgumentParser) -> None:

    add_transport_arguments(parser)
    w = parser.add_argument_group("worker")
    w.add_argument("--cluster-id", type=int, default=0, help="default 0")
    w.add_argument("--worker-id", type=int, default=0, help="default 0")
    w.add_argument("--params", type=int, default=10_000,
                   help="gradient size in float32 values (default %(default)s)")
    w.add_argument("--values", type=int, default=64, help="V, values per block (default 64)")
    w.add_argument("--frac-bits", type=int, default=16, help="fixed-point fraction bits (16)")
    w.add_argument("--rate", type=float, default=10.0,
                   help="updates per second; 0 sends back to back (default %(default)s)")
    w.add_argument("--count", type=int, default=0, help="stop after this many updates (0: no limit)")
    w.add_argument("--duration", type=float, default=0.0, help="stop after S seconds (0: no limit)")
    w.add_argument("--reward", type=float, default=100.0,
                   help="mean of the synthetic reward (default %(default)s)")
    w.add_argument("--reward-std", type=float, default=10.0, help="its spread (default 10)")
    w.add_argument("--grad-scale", type=float, default=0.01,
                   help="standard deviation of the synthetic gradient values (default 0.01)")
    w.add_argument("--seed", type=int, default=None, help="seed of gradients, rewards and P_s draws")
    p = parser.add_argument_group("transmission control (DESIGN.md §4)")
    p.add_argument("--policy", choices=POLICY_NAMES, default="olaf",
                   help="olaf: P_s from ACK feedback with the loss ceiling (revision 3); olaf-rev2: "
                        "revision 2, the paper's form; always: the baseline (default olaf)")
    p.add_argument("--alpha", type=float, default=DEFAULT_ALPHA, help=f"default {DEFAULT_ALPHA}")
    p.add_argument("--beta", type=float, default=DEFAULT_BETA,
                   help=f"per millisecond (default {DEFAULT_BETA})")
    p.add_argument("--feedback-ttl-ms", type=float, default=DEFAULT_FEEDBACK_TTL_MS, metavar="MS",
                   help="ACK feedback older than this no longer counts; the next update is sent "
                   f"as a probe, P_s = 1 (default {DEFAULT_FEEDBACK_TTL_MS:g})")
    p.add_argument("--ack-timeout", type=float, default=1.0,
                   help="seconds before an unanswered block counts as lost (default 1)")
    parser.add_argument("--stats-interval", type=float, default=1.0, metavar="S",
                        help="seconds between one-line stats on stdout (0: off; default 1)")
    add_silence_argument(parser)


def check_arguments(args: argparse.Namespace) -> str | None:
    """The first problem with the worker's flags, as one line, or None."""
    finite = {"--rate": args.rate, "--duration": args.duration, "--reward": args.reward,
              "--reward-std": args.reward_std, "--grad-scale": args.grad_scale,
              "--alpha": args.alpha, "--beta": args.beta, "--ack-timeout": args.ack_timeout,
              "--stats-interval": args.stats_interval, "--silence-warn": args.silence_warn}
    for flag, value in finite.items():
        if not math.isfinite(value):
            return f"{flag} must be a finite number, got {value}"
    checks = [
        (args.params >= 1, "--params must be >= 1"),
        (1 <= args.values <= 255, "--values (V) must be 1..255"),
        (0 <= args.frac_bits <= 31, "--frac-bits must be 0..31"),
        (0 <= args.cluster_id <= 0xFFFF, "--cluster-id must be 0..65535"),
        (0 <= args.worker_id <= 0xFFFF, "--worker-id must be 0..65535"),
        (args.values < 1 or -(-args.params // args.values) <= 1 << 16,
         "--params needs more than 65536 blocks of --values"),
        (min(args.rate, args.count, args.duration, args.stats_interval) >= 0,
         "--rate, --count, --duration and --stats-interval must be >= 0"),
        (args.reward_std >= 0 and args.grad_scale >= 0, "--reward-std and --grad-scale must be >= 0"),
        (args.alpha >= 0 and args.beta >= 0, "--alpha and --beta must be >= 0"),
        (args.feedback_ttl_ms > 0, "--feedback-ttl-ms must be > 0"),
        (args.ack_timeout > 0, "--ack-timeout must be > 0"),
        (args.silence_warn > 0, "--silence-warn must be > 0"),
    ]
    for ok, message in checks:
        if not ok:
            return message
    return None


class SilenceMonitor:
    """Says once on stderr when the switch stops answering, and once when it is back."""

    def __init__(self, who: str, peer: str, warn_after_s: float) -> None:
        self.who = who
        self.peer = peer
        self.warn_after_s = warn_after_s
        self.warnings = 0
        self.silent = False

    def check(self, silent_s: float, detail: Callable[[], str]) -> None:
        """``detail`` is called only for the warning (it may take locks or sum counters)."""
        if silent_s >= self.warn_after_s and not self.silent:
            self.silent = True
            self.warnings += 1
            print(f"{self.who}: warning: no answer from the switch at {self.peer} for "
                  f"{silent_s:.1f} s ({detail()})", file=sys.stderr, flush=True)
        elif silent_s == 0 and self.silent:
            self.silent = False
            print(f"{self.who}: the switch at {self.peer} answers again", file=sys.stderr,
                  flush=True)


def stats_line(stats: dict, elapsed: float, worker_id: int, p_s_mean: float | None = None) -> str:
    """One status line; ``p_s_mean`` is the mean P_s of the draws since the last line."""
    o = stats["outcomes"]
    rtt = "-" if stats["srtt_ms"] is None else f"{stats['srtt_ms']:.2f}ms"
    util = "-" if stats["queue_util"] is None else str(stats["queue_util"])
    mean = "-" if p_s_mean is None else f"{p_s_mean:.3f}"
    silent = f" silent={stats['silent_s']:.1f}s" if stats["silent_s"] >= 1.0 else ""
    # Revision 3's loss ceiling L and the answered share of the last update due.
    ceiling = ""
    if stats.get("loss_ceiling") is not None:
        share = stats.get("answered_share")
        ceiling = f" L={stats['loss_ceiling']:.3f} answered={'-' if share is None else f'{share:.2f}'}"
    return (
        f"worker {worker_id} t={elapsed:.1f}s updates={stats['updates']} "
        f"sent={stats['sent_updates']} skipped={stats['skipped_updates']} "
        f"probes={stats['probe_updates']} "
        f"blocks={stats['sent_blocks']} acked={stats['acked_blocks']} lost={stats['lost_blocks']} "
        f"enq={o['ENQUEUED']} merged={o['MERGED']} replaced={o['REPLACED']} "
        f"drop_reward={o['DROPPED_REWARD']} drop_full={o['DROPPED_FULL']} "
        f"invalid={o['DROPPED_INVALID']} p_s={stats['p_s']:.3f} p_s_mean={mean} srtt={rtt} "
        f"util={util}{ceiling}{silent}"
    )


class PsMean:
    """Mean P_s of the draws between two stats lines, from the sender's running sums."""

    def __init__(self) -> None:
        self.updates = 0
        self.p_sum = 0.0

    def __call__(self, stats: dict) -> float | None:
        n = stats["updates"] - self.updates
        mean = (stats["p_s_sum"] - self.p_sum) / n if n else None
        self.updates, self.p_sum = stats["updates"], stats["p_s_sum"]
        return mean


def run(args: argparse.Namespace) -> int:
    # The sender, its codec and transports: ~15 ms of imports that every `olaf ...` would pay
    # (cli.py builds every subcommand's parser), so imported when the command runs.
    from worker_transport.sender import Sender
    from worker_transport.transport import transport_from_args

    def fail(message: str) -> int:
        print(f"olaf worker: error: {message}", file=sys.stderr)
        return 2

    problem = check_arguments(args)
    if problem is not None:
        return fail(problem)
    try:
        policy = make_policy(args.policy, alpha=args.alpha, beta=args.beta,
                             feedback_ttl_ms=args.feedback_ttl_ms)
        transport = transport_from_args(args)
    except (ValueError, OSError) as e:
        return fail(str(e))
    try:
        sender = Sender(transport, cluster_id=args.cluster_id, worker_id=args.worker_id,
                        values=args.values, frac_bits=args.frac_bits, policy=policy,
                        seed=args.seed, ack_timeout=args.ack_timeout)
    except ValueError as e:
        transport.close()
        return fail(str(e))

    stop = stop_on_signals()
    rng = np.random.default_rng(args.seed)
    # A few gradients, reused in turn: generating 1e5 normals per update would make the
    # generator, not the transport, the cost being measured.
    pool = [(rng.standard_normal(args.params) * args.grad_scale).astype(np.float32)
            for _ in range(4)]
    print(f"worker {args.worker_id} cluster {args.cluster_id}: {args.params} params in "
          f"{-(-args.params // args.values)} blocks to {transport!r}, policy {policy!r}",
          flush=True)
    start = time.monotonic()
    next_send = start
    next_stats = start + args.stats_interval if args.stats_interval else float("inf")
    updates = 0
    silence = SilenceMonitor("olaf worker", args.switch, args.silence_warn)
    interval_mean = PsMean()
    try:
        while not stop.is_set():
            now = time.monotonic()
            if args.duration and now - start >= args.duration:
                break
            if args.count and updates >= args.count:
                break
            silence.check(sender.silent_us() / 1e6,
                          lambda: f"{sender.outstanding_blocks} blocks unanswered")
            if now >= next_stats:
                st = sender.stats()
                print(stats_line(st, now - start, args.worker_id, interval_mean(st)), flush=True)
                next_stats += args.stats_interval * max(1, int((now - next_stats)
                                                               / args.stats_interval) + 1)
            if now < next_send:
                # Woken at least every 0.5 s, so that a silence is reported on time.
                stop.wait(min(next_send, next_stats, now + 0.5) - now)
                continue
            reward = float(rng.normal(args.reward, args.reward_std))
            sender.send_gradient(pool[updates % len(pool)], reward=reward, model_version=updates)
            updates += 1
            if args.rate:
                # A fixed schedule; after a stall, resume from now instead of bursting.
                next_send = max(next_send + 1.0 / args.rate, now)
        # Blocks still unanswered after ack_timeout count as lost, so this wait is bounded.
        sender.wait_for_acks(args.ack_timeout + 0.1)
    finally:
        sender.close()
    stats = sender.stats()
    elapsed = time.monotonic() - start
    print(stats_line(stats, elapsed, args.worker_id, interval_mean(stats)), flush=True)
    stats["elapsed_s"] = elapsed
    stats["silence_warnings"] = silence.warnings
    print("final " + json.dumps(stats), flush=True)
    if stats["sent_blocks"] and not stats["answered"]:
        print(f"olaf worker: error: the switch at {args.switch} never answered "
              f"({stats['sent_blocks']} blocks sent, none acknowledged)", file=sys.stderr)
        return 1
    return 0
