"""``olaf ps``: a standalone parameter server that pulls blocks from an OLAF switch."""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from olaf.commands.worker import SilenceMonitor, add_silence_argument, add_transport_arguments
from olaf.shutdown import stop_on_signals

if TYPE_CHECKING:
    from worker_transport.receiver import DataBatch

HELP = "pull gradient blocks from the switch, apply (or discard) them, and measure AoM"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_transport_arguments(parser)
    p = parser.add_argument_group("parameter server")
    p.add_argument("--values", type=int, default=64, help="V, values per block (default 64)")
    p.add_argument("--frac-bits", type=int, default=16, help="fixed-point fraction bits (16)")
    p.add_argument("--pull-rate", type=float, default=0.0,
                   help="PULLs per second, the bottleneck; 0 pulls as fast as blocks are "
                   "applied (default 0)")
    p.add_argument("--window", type=int, default=32,
                   help="with --pull-rate 0: PULLs in flight (default %(default)s)")
    p.add_argument("--pull-timeout-ms", type=float, default=50.0,
                   help="with --pull-rate 0: a PULL unanswered this long is lost (default 50)")
    p.add_argument("--params", type=int, default=0,
                   help="model size: apply each block as model[block] -= lr * values; "
                   "0 discards the blocks (default 0)")
    p.add_argument("--lr", type=float, default=0.01, help="learning rate of --params (0.01)")
    a = parser.add_argument_group("age of model")
    a.add_argument("--sample-ms", type=float, default=10.0,
                   help="AoM sampling interval in ms (default %(default)s)")
    a.add_argument("--workers", type=int, default=32,
                   help="contributor bits tracked for per-worker AoM, 1..32 (default 32)")
    a.add_argument("--aom-out", default=None, metavar="FILE.npz",
                   help="write the AoM time series (numpy .npz) here at the end")
    parser.add_argument("--duration", type=float, default=0.0, help="stop after S seconds (0: no)")
    parser.add_argument("--stats-interval", type=float, default=1.0, metavar="S",
                        help="seconds between one-line stats on stdout (0: off; default 1)")
    add_silence_argument(parser)


def check_arguments(args: argparse.Namespace) -> str | None:
    """The first problem with the PS's flags, as one line, or None (nothing is created)."""
    finite = {"--pull-rate": args.pull_rate, "--pull-timeout-ms": args.pull_timeout_ms,
              "--lr": args.lr, "--sample-ms": args.sample_ms, "--duration": args.duration,
              "--stats-interval": args.stats_interval, "--silence-warn": args.silence_warn}
    for flag, value in finite.items():
        if not math.isfinite(value):
            return f"{flag} must be a finite number, got {value}"
    checks = [
        (1 <= args.values <= 255, "--values (V) must be 1..255"),
        (0 <= args.frac_bits <= 31, "--frac-bits must be 0..31"),
        (min(args.pull_rate, args.params, args.duration, args.stats_interval) >= 0,
         "--pull-rate, --params, --duration and --stats-interval must be >= 0"),
        (args.sample_ms > 0 and args.pull_timeout_ms > 0,
         "--sample-ms and --pull-timeout-ms must be > 0"),
        (args.window >= 1, "--window must be >= 1"),
        (1 <= args.workers <= 32, "--workers must be 1..32"),
        (args.silence_warn > 0, "--silence-warn must be > 0"),
    ]
    for ok, message in checks:
        if not ok:
            return message
    if args.aom_out:
        # Checked now, not after the run: a typo must not cost the whole measurement.
        parent = os.path.dirname(os.path.abspath(args.aom_out))
        if not os.path.isdir(parent):
            return f"--aom-out: directory {parent} does not exist"
        if not os.access(parent, os.W_OK):
            return f"--aom-out: directory {parent} is not writable"
        if os.path.isdir(args.aom_out):
            return f"--aom-out: {args.aom_out} is a directory"
    return None


class ModelApplier:
    """``model[block] -= lr * values`` for each DATA, a whole read at a time."""

    def __init__(self, params: int, values: int, lr: float) -> None:
        self.params = params
        self.blocks = -(-params // values)
        self.model = np.zeros((self.blocks, values), np.float32)
        self.lr = lr
        self.applied = 0
        self.out_of_range = 0

    def __call__(self, batch: DataBatch) -> None:
        # worker_transport.receiver: as in run.
        from worker_transport.receiver import scatter_add

        ids = batch.headers["block_id"].astype(np.int64)
        ok = ids < self.blocks
        if ok.all():
            scatter_add(self.model, ids, batch.values, -self.lr)
        else:
            self.out_of_range += int((~ok).sum())
            scatter_add(self.model, ids[ok], batch.values[ok], -self.lr)
        self.applied += int(ok.sum())


def json_safe(value: Any) -> Any:
    """JSON has no NaN: statistics of an empty run become null."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    return value


def _ms(x: float) -> str:
    return "-" if math.isnan(x) else f"{x:.2f}ms"


def stats_line(stats: dict, aom: dict, elapsed: float, rate: float) -> str:
    util = "-" if stats["queue_util"] is None else str(stats["queue_util"])
    age = aom["update_age"]
    silent = f" silent={stats['silent_s']:.1f}s" if stats["silent_s"] >= 1.0 else ""
    return (
        f"ps t={elapsed:.1f}s pulls={stats['pulls_sent']} data={stats['data_blocks']} "
        f"empty={stats['empty']} expired={stats['expired_pulls']} bad={stats['bad_data']} "
        f"updates={stats['aggregated_updates']} blocks/s={rate:.0f} util={util} "
        f"aom_mean={_ms(aom['mean'])} aom_p99={_ms(aom['p99'])} "
        f"age_mean={_ms(age['mean'])} age_p99={_ms(age['p99'])}{silent}"
    )


def run(args: argparse.Namespace) -> int:
    # The receiver, its codec and transports: ~15 ms of imports that every `olaf ...` would pay
    # (cli.py builds every subcommand's parser), so imported when the command runs.
    from worker_transport.receiver import Receiver
    from worker_transport.transport import transport_from_args

    def fail(message: str) -> int:
        print(f"olaf ps: error: {message}", file=sys.stderr)
        return 2

    problem = check_arguments(args)
    if problem is not None:
        return fail(problem)
    applier = ModelApplier(args.params, args.values, args.lr) if args.params else None
    try:
        transport = transport_from_args(args)
    except (ValueError, OSError) as e:
        return fail(str(e))
    try:
        receiver = Receiver(
            transport, values=args.values, frac_bits=args.frac_bits,
            pull_rate=args.pull_rate or None, on_batch=applier, window=args.window,
            pull_timeout=args.pull_timeout_ms / 1000, sample_interval_us=int(args.sample_ms * 1000),
            workers=args.workers,
        )
    except ValueError as e:
        transport.close()
        return fail(str(e))

    stop = stop_on_signals()
    pacing = f"{args.pull_rate:g} PULL/s" if args.pull_rate else f"window {args.window}"
    print(f"ps: pulling from {transport!r}, {pacing}, "
          f"{'applying to ' + str(args.params) + ' params' if applier else 'discarding'}",
          flush=True)
    start = time.monotonic()
    last_t, last_blocks = start, 0
    silence = SilenceMonitor("olaf ps", args.switch, args.silence_warn)
    receiver.start()
    error = None
    try:
        while not stop.is_set() and receiver.running:
            # At least every 0.5 s, so that a silence is reported on time.
            timeout = min(args.stats_interval or 0.5, 0.5)
            if args.duration:
                timeout = min(timeout, max(start + args.duration - time.monotonic(), 0))
            stop.wait(timeout)
            now = time.monotonic()
            silence.check(receiver.silent_us() / 1e6,
                          lambda: f"{receiver.stats()['pulls_sent']} PULLs sent")
            if args.stats_interval and not stop.is_set() and now - last_t >= args.stats_interval:
                stats = receiver.stats()
                rate = (stats["data_blocks"] - last_blocks) / max(now - last_t, 1e-9)
                last_t, last_blocks = now, stats["data_blocks"]
                print(stats_line(stats, receiver.aom.summary(), now - start, rate), flush=True)
            if args.duration and now - start >= args.duration:
                break
    finally:
        try:
            receiver.close()
        except Exception as e:  # the apply callback or the socket failed: report, exit 1
            error = e
    elapsed = time.monotonic() - start
    stats = receiver.stats()
    aom = receiver.aom.summary()
    print(stats_line(stats, aom, elapsed, stats["data_blocks"] / max(elapsed, 1e-9)), flush=True)
    final = dict(stats, elapsed_s=elapsed, aom=aom, silence_warnings=silence.warnings)
    if applier is not None:
        final["applied"] = applier.applied
        final["out_of_range"] = applier.out_of_range
        final["model_norm"] = float(np.linalg.norm(applier.model))
    if args.aom_out:
        s = receiver.aom.series
        try:
            np.savez(args.aom_out, t_ms=s.t_ms, global_ms=s.global_ms,
                     per_worker_ms=s.per_worker_ms, ages_t_ms=s.ages_t_ms, ages_ms=s.ages_ms)
        except OSError as e:  # checked at start-up, but the disk can still fill or vanish
            error = error or e
    print("final " + json.dumps(json_safe(final)), flush=True)
    if error is not None:
        print(f"olaf ps: error: {error}", file=sys.stderr)
        return 1
    if stats["pulls_sent"] and not stats["answered"]:
        print(f"olaf ps: error: the switch at {args.switch} never answered "
              f"({stats['pulls_sent']} PULLs sent, no DATA or EMPTY back)", file=sys.stderr)
        return 1
    return 0
