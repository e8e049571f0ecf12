"""Codec throughput: a 1M-parameter float32 gradient -> UPDATE datagrams -> gradient.

Compared in the same run with a per-packet scapy encoder (the obvious way to
build the same bytes), so the ratio holds on a noisy, shared machine.
Run: ``.venv/bin/python benchmarks/bench_codec.py``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from worker_transport.codec import Batch, decode, decode_rows, encode, encode_array
from worker_transport.fixedpoint import from_fixed, join_blocks, split_blocks, to_fixed
from worker_transport.protocol import DEFAULT_FRAC_BITS, MsgType, Olaf


def gradient_to_batch(grad: np.ndarray, values: int) -> Batch:
    blocks = split_blocks(to_fixed(grad, DEFAULT_FRAC_BITS), values)
    batch = Batch.zeros(len(blocks), values)
    h = batch.headers
    h["version"], h["msg_type"], h["agg_count"] = 1, MsgType.UPDATE, 1
    h["block_id"], h["num_values"], h["frac_bits"] = np.arange(len(blocks)), values, DEFAULT_FRAC_BITS
    batch.values[:] = blocks
    return batch


def gradient_to_rows(grad: np.ndarray, values: int) -> np.ndarray:
    """One row per datagram: what the Sender hands to sendmmsg / UDP GSO."""
    return encode_array(gradient_to_batch(grad, values))


def gradient_to_datagrams(grad: np.ndarray, values: int) -> list[bytes]:
    """One ``bytes`` object per datagram: what a per-packet ``sendto`` loop needs."""
    return encode(gradient_to_batch(grad, values))


def batch_to_gradient(batch: Batch, n: int) -> np.ndarray:
    order = np.argsort(batch.headers["block_id"], kind="stable")
    return from_fixed(join_blocks(batch.values[order], n), DEFAULT_FRAC_BITS)


def rows_to_gradient(rows: np.ndarray, values: int, n: int) -> np.ndarray:
    """From rows as recvmmsg fills them (the switch's and PS's path)."""
    lengths = np.full(len(rows), rows.shape[1], np.int64)
    return batch_to_gradient(decode_rows(rows, lengths, values), n)


def datagrams_to_gradient(datagrams: list[bytes], values: int, n: int) -> np.ndarray:
    return batch_to_gradient(decode(datagrams, values), n)


def scapy_encode(grad: np.ndarray, values: int, limit: int) -> list[bytes]:
    blocks = split_blocks(to_fixed(grad, DEFAULT_FRAC_BITS), values)[:limit]
    return [bytes(Olaf(msg_type=MsgType.UPDATE, block_id=i, values=b.tolist())) for i, b in enumerate(blocks)]


def best_of(repeats: int, fn) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--params", type=int, default=1_000_000)
    p.add_argument("--values", type=int, default=64)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--scapy-packets", type=int, default=2000, help="packets timed for the scapy baseline")
    args = p.parse_args()

    grad = np.random.default_rng(0).standard_normal(args.params).astype(np.float32)
    mb = grad.nbytes / 1e6
    datagrams = gradient_to_datagrams(grad, args.values)
    back = datagrams_to_gradient(datagrams, args.values, args.params)
    assert np.abs(back - grad).max() <= 2.0**-DEFAULT_FRAC_BITS

    rows = gradient_to_rows(grad, args.values)
    assert [r.tobytes() for r in rows[:3]] == datagrams[:3]
    assert np.array_equal(rows_to_gradient(rows, args.values, args.params), back)
    t_rows = best_of(args.repeats, lambda: gradient_to_rows(grad, args.values))
    t_rows_dec = best_of(args.repeats, lambda: rows_to_gradient(rows, args.values, args.params))
    t_enc = best_of(args.repeats, lambda: gradient_to_datagrams(grad, args.values))
    t_dec = best_of(args.repeats, lambda: datagrams_to_gradient(datagrams, args.values, args.params))
    n_scapy = min(args.scapy_packets, len(datagrams))
    t_scapy = best_of(1, lambda: scapy_encode(grad, args.values, n_scapy)) * len(datagrams) / n_scapy
    assert scapy_encode(grad, args.values, 3) == datagrams[:3]

    print(f"gradient: {args.params} float32 ({mb:.1f} MB) -> {len(datagrams)} UPDATE datagrams of "
          f"{len(datagrams[0])} bytes (V={args.values})")
    print(f"encode to packet rows   : {t_rows * 1e3:8.1f} ms  {mb / t_rows:8.0f} MB/s  "
          f"{len(datagrams) / t_rows / 1e6:.2f} Mpkt/s")
    print(f"decode from packet rows : {t_rows_dec * 1e3:8.1f} ms  {mb / t_rows_dec:8.0f} MB/s")
    print(f"encode to bytes objects : {t_enc * 1e3:8.1f} ms  {mb / t_enc:8.0f} MB/s  "
          f"{len(datagrams) / t_enc / 1e6:.2f} Mpkt/s")
    print(f"decode from bytes       : {t_dec * 1e3:8.1f} ms  {mb / t_dec:8.0f} MB/s")
    print(f"scapy, per packet       : {t_scapy * 1e3:8.1f} ms  {mb / t_scapy:8.1f} MB/s  "
          f"(timed on {n_scapy} packets, scaled)")
    print(f"ratio encode numpy/scapy: {t_scapy / t_rows:.0f}x to rows, "
          f"{t_scapy / t_enc:.0f}x to bytes objects")


if __name__ == "__main__":
    main()
