"""``olaf selftest``: encode and decode an update through the codec and the reference queue."""

from __future__ import annotations

import argparse

import numpy as np

from worker_transport.fixedpoint import from_fixed, join_blocks, resolution, split_blocks, to_fixed
from worker_transport.protocol import DEFAULT_FRAC_BITS, MsgType

HELP = "encode a gradient into UPDATE packets, run them through an OlafQueue, decode them back"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--params", type=int, default=10_000, help="gradient size (default 10000)")
    parser.add_argument("--values", type=int, default=64, help="V, values per block (default 64)")


def run(args: argparse.Namespace) -> int:
    # The queue and the codec: ~15 ms of imports that every `olaf ...` would pay (cli.py
    # builds every subcommand's parser), so imported when the command runs.
    from dataplane.queue import OlafQueue, QueueConfig
    from worker_transport.codec import Batch, decode, encode

    if args.params < 1 or not 1 <= args.values <= 255:
        raise SystemExit("olaf selftest: error: --params must be >= 1 and --values 1..255")
    grad = np.random.default_rng(0).standard_normal(args.params).astype(np.float32)
    blocks = split_blocks(to_fixed(grad, DEFAULT_FRAC_BITS), args.values)
    n = len(blocks)
    batch = Batch.zeros(n, args.values)
    h = batch.headers
    h["version"], h["msg_type"], h["agg_count"] = 1, MsgType.UPDATE, 1
    h["block_id"], h["num_values"], h["frac_bits"] = np.arange(n), args.values, DEFAULT_FRAC_BITS
    batch.values[:] = blocks
    queue = OlafQueue(QueueConfig(capacity=n, values=args.values, max_blocks=max(n, 1)))
    acks, _, _ = queue.process(decode(encode(batch), args.values))
    pulls = Batch.zeros(n, args.values)
    pulls.headers["version"], pulls.headers["msg_type"] = 1, MsgType.PULL
    data, _, _ = queue.process(decode(encode(pulls), args.values))
    back = from_fixed(join_blocks(data.values[np.argsort(data.headers["block_id"])], args.params),
                      DEFAULT_FRAC_BITS)
    err = float(np.abs(back - grad).max())
    ok = err <= resolution(DEFAULT_FRAC_BITS) and (data.headers["msg_type"] == MsgType.DATA).all()
    print(f"{args.params} params -> {n} UPDATE packets -> {len(acks)} ACKs -> {len(data)} DATA; "
          f"max error {err:.2e} (resolution {resolution(DEFAULT_FRAC_BITS):.2e}): "
          f"{'OK' if ok else 'FAILED'}")
    return 0 if ok else 1
