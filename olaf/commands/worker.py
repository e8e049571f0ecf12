"""``olaf worker``: a standalone OLAF worker sending synthetic gradients through a switch."""

from __future__ import annotations

import argparse
import sys

HELP = "send synthetic gradient updates of a given size at a given rate (UDP or raw Ethernet)"

OLAF_PORT = 20300
"""worker_transport.protocol.OLAF_PORT, repeated (and tested) so that building the parser
does not import scapy."""


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


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from worker_transport.policy import DEFAULT_ALPHA, DEFAULT_BETA

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
    p.add_argument("--policy", choices=("olaf", "always"), default="olaf",
                   help="olaf: P_s from ACK feedback; always: the baseline (default olaf)")
    p.add_argument("--capacity", type=int, default=64, help="switch queue slots (default 64)")
    p.add_argument("--alpha", type=float, default=DEFAULT_ALPHA, help=f"default {DEFAULT_ALPHA}")
    p.add_argument("--beta", type=float, default=DEFAULT_BETA,
                   help=f"per millisecond (default {DEFAULT_BETA})")
    p.add_argument("--ack-timeout", type=float, default=1.0,
                   help="seconds before an unanswered block counts as lost (default 1)")
    parser.add_argument("--stats-interval", type=float, default=1.0, metavar="S",
                        help="seconds between one-line stats on stdout (0: off; default 1)")


def stats_line(stats: dict, elapsed: float, worker_id: int) -> str:
    o = stats["outcomes"]
    rtt = "-" if stats["srtt_ms"] is None else f"{stats['srtt_ms']:.2f}ms"
    util = "-" if stats["queue_util"] is None else str(stats["queue_util"])
    return (
        f"worker {worker_id} t={elapsed:.1f}s updates={stats['updates']} "
        f"sent={stats['sent_updates']} skipped={stats['skipped_updates']} "
        f"blocks={stats['sent_blocks']} acked={stats['acked_blocks']} lost={stats['lost_blocks']} "
        f"enq={o['ENQUEUED']} merged={o['MERGED']} replaced={o['REPLACED']} "
        f"drop_reward={o['DROPPED_REWARD']} drop_full={o['DROPPED_FULL']} "
        f"invalid={o['DROPPED_INVALID']} p_s={stats['p_s']:.3f} srtt={rtt} util={util}"
    )


def run(args: argparse.Namespace) -> int:
    import json
    import signal
    import threading
    import time

    import numpy as np

    from worker_transport.policy import make_policy
    from worker_transport.sender import Sender
    from worker_transport.transport import transport_from_args

    def fail(message: str) -> int:
        print(f"olaf worker: error: {message}", file=sys.stderr)
        return 2

    if args.params < 1:
        return fail("--params must be >= 1")
    if args.rate < 0 or args.count < 0 or args.duration < 0 or args.stats_interval < 0:
        return fail("--rate, --count, --duration and --stats-interval must be >= 0")
    try:
        policy = make_policy(args.policy, capacity=args.capacity, alpha=args.alpha, beta=args.beta)
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

    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
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
    try:
        while not stop.is_set():
            now = time.monotonic()
            if args.duration and now - start >= args.duration:
                break
            if args.count and updates >= args.count:
                break
            if now >= next_stats:
                print(stats_line(sender.stats(), now - start, args.worker_id), flush=True)
                next_stats += args.stats_interval * max(1, int((now - next_stats)
                                                               / args.stats_interval) + 1)
            if now < next_send:
                stop.wait(min(next_send, next_stats) - now)
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
    print(stats_line(stats, elapsed, args.worker_id), flush=True)
    stats["elapsed_s"] = elapsed
    print("final " + json.dumps(stats), flush=True)
    return 0
