"""The relay of a two-level topology: drains a leaf switch's OlafQueue and sends every
DATA on toward the PS as an UPDATE, so a gradient is queued (and merged) by two switches.

Every OLAF switch answers OLAF messages on the port they came in on (UPDATE -> ACK,
PULL -> DATA/EMPTY), so a leaf's queue is emptied only by PULLs. The relay host has one
interface on the leaf (``eth0``: PULLs, DATA back) and one on the spine (``eth1``: the
UPDATEs, ACKs back). What it sends up is the leaf's slot as an UPDATE with:

* the values divided by the slot's ``agg_count`` (the leaf's mean gradient) and
  ``agg_count = 1``: the spine's merges add 1 per message, so the PS's division by the
  spine's ``agg_count`` gives the mean of the leaves' means;
* everything else of the slot unchanged: ``worker_id`` (first contributor), ``block_id``,
  ``model_version`` and ``gen_time_us`` (the oldest contributor's, so the PS's update age
  covers both hops), ``reward`` and ``contributors`` (so per-worker AoM still works);
* feedback fields, flags and outcome zero, as a host's UPDATE has them.

``python -m bmv2_topologies.relay --pull-from LEAF_IP:20300 --to PS_IP:20300 --pull-rate R``
prints ``ready``, then ``final {json}`` on SIGTERM.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading

import numpy as np

from worker_transport.codec import Batch, decode, encode_array
from worker_transport.fixedpoint import to_fixed
from worker_transport.protocol import VERSION, MsgType, Outcome
from worker_transport.receiver import DataBatch, Receiver
from worker_transport.transport import UdpTransport, parse_hostport


def data_as_updates(headers: np.ndarray, averaged: np.ndarray, frac_bits: int) -> np.ndarray:
    """UPDATE packets (rows) for DATA ``headers`` whose values are already averaged floats."""
    batch = Batch.zeros(len(headers), averaged.shape[1])
    h = batch.headers
    for name in ("cluster_id", "worker_id", "block_id", "num_values", "frac_bits", "seq",
                 "model_version", "reward", "gen_time_us", "contributors"):
        h[name] = headers[name]
    h["version"] = VERSION
    h["msg_type"] = MsgType.UPDATE
    h["agg_count"] = 1
    batch.values[:] = to_fixed(averaged, frac_bits)
    return encode_array(batch)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bmv2_topologies.relay", description=__doc__.split("\n")[0])
    p.add_argument("--pull-from", required=True, metavar="IP:PORT", help="an address through the leaf")
    p.add_argument("--to", required=True, metavar="IP:PORT", help="the PS (through the spine)")
    p.add_argument("--pull-rate", type=float, default=1500.0, help="PULLs per second (default 1500)")
    p.add_argument("--values", type=int, default=64, help="V (default 64)")
    p.add_argument("--frac-bits", type=int, default=16, help="fraction bits (default 16)")
    args = p.parse_args(argv)

    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    up = UdpTransport(parse_hostport(args.to))
    lock = threading.Lock()
    counts = {"forwarded": 0, "acks": 0, "foreign": 0}
    outcomes = np.zeros(len(Outcome), np.int64)

    def forward(batch: DataBatch) -> None:
        rows = data_as_updates(batch.headers, batch.values, args.frac_bits)
        up.send(rows)
        with lock:
            counts["forwarded"] += len(rows)

    receiver = Receiver(UdpTransport(parse_hostport(args.pull_from)), values=args.values,
                        frac_bits=args.frac_bits, pull_rate=args.pull_rate, on_batch=forward)
    receiver.start()
    print(f"ready relay {args.pull_from} -> {args.to}", flush=True)
    try:
        while not stop.is_set() and receiver.running:
            acks = decode(up.recv(0.1), args.values).headers
            is_ack = (acks["version"] == VERSION) & (acks["msg_type"] == MsgType.ACK)
            with lock:
                counts["acks"] += int(is_ack.sum())
                counts["foreign"] += int((~is_ack).sum())
                np.add.at(outcomes, np.minimum(acks["outcome"][is_ack], len(Outcome) - 1), 1)
    finally:
        error = None
        try:
            receiver.close()
        except Exception as e:
            error = e
        up.close()
    final = dict(counts, pulled=receiver.stats(),
                 outcomes={o.name: int(outcomes[o]) for o in Outcome})
    print("final " + json.dumps(final), flush=True)
    if error is not None:
        print(f"relay: receiver failed: {error!r}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
