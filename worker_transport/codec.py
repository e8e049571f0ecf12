"""Batch codec: many OLAF datagrams <-> numpy arrays, with no per-packet Python work
beyond handing buffers to ``bytes.join``.

A decoded batch is a ``Batch``: one ``HEADER_DTYPE`` record per packet, an ``(n, V)``
int32 array of values (zero where a packet carries fewer), the datagram lengths,
and, when validated, a ``Verdict`` per packet saying whether it is well formed and
if not, why (DESIGN.md §2, "Invalid input").

The learner's two ends of the format are here too, for the sender, the receiver and
the in-process path alike: a gradient as UPDATE blocks (``update_batch``,
``stamp_update``, ``gradient_updates``) and a DATA block's values as the mean of the
gradients summed into it (``mean_values``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum
from operator import itemgetter

import numpy as np

from worker_transport.fixedpoint import split_blocks, to_fixed
from worker_transport.protocol import (
    HEADER_DTYPE,
    HEADER_FIELDS,
    HEADER_LEN,
    VALUE_BYTES,
    VERSION,
    WIRE_DTYPE,
    MsgType,
)


class Verdict(IntEnum):
    """Why a datagram is or is not a well-formed OLAF message for this switch."""

    OK = 0
    SHORT = 1
    """Shorter than the 36-byte header: dropped silently."""
    BAD_VERSION = 2
    """version != 1: dropped silently."""
    BAD_TYPE = 3
    """Unknown msg_type: dropped silently."""
    BAD_PULL = 4
    """A PULL with num_values != 0 or bytes after the header: dropped silently."""
    NOT_FROM_HOST = 5
    """ACK, DATA or EMPTY arriving from a host: only the switch sends these."""
    BAD_LENGTH = 6
    """UPDATE whose num_values is not V or disagrees with the length: ACK DROPPED_INVALID."""
    BAD_FRAC_BITS = 7
    """UPDATE with another frac_bits than configured: ACK DROPPED_INVALID."""
    CLUSTER_RANGE = 8
    """UPDATE with cluster_id >= max_clusters: ACK DROPPED_INVALID."""
    BLOCK_RANGE = 9
    """UPDATE with block_id >= max_blocks: ACK DROPPED_INVALID."""

    @property
    def answered(self) -> bool:
        """True when the switch answers with an ACK whose outcome is DROPPED_INVALID."""
        return self >= Verdict.BAD_LENGTH


@dataclass
class Batch:
    """Decoded packets: ``headers[i]`` and ``values[i, :headers[i]['num_values']]``."""

    headers: np.ndarray
    values: np.ndarray
    lengths: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.headers)

    @classmethod
    def zeros(cls, n: int, values: int) -> Batch:
        return cls(np.zeros(n, HEADER_DTYPE), np.zeros((n, values), np.int32))


def packet_dtype(values: int) -> np.dtype:
    """Wire layout of one packet carrying ``values`` values."""
    return np.dtype([("h", WIRE_DTYPE), ("v", ">i4", (values,))])


def headers_to_wire(headers: np.ndarray) -> np.ndarray:
    wire = np.empty(len(headers), WIRE_DTYPE)
    wire["ver_type"] = (headers["version"] << 4) | (headers["msg_type"] & 0x0F)
    for name, _ in HEADER_FIELDS[2:]:
        wire[name] = headers[name]
    return wire


def headers_from_wire(wire: np.ndarray) -> np.ndarray:
    headers = np.empty(len(wire), HEADER_DTYPE)
    headers["version"] = wire["ver_type"] >> 4
    headers["msg_type"] = wire["ver_type"] & 0x0F
    for name, _ in HEADER_FIELDS[2:]:
        headers[name] = wire[name]
    return headers


def encode_array(batch: Batch) -> np.ndarray:
    """Every packet at full width V: an ``(n, 36 + 4V)`` uint8 array, one row a packet.

    Rows are valid datagrams when ``num_values == V``; shorter packets are the row's
    prefix of ``packet_length`` bytes (see ``encode``).
    """
    n, v = batch.values.shape
    rows = np.empty((n, HEADER_LEN + VALUE_BYTES * v), np.uint8)
    # Two plain byte copies: filling a nested structured field goes field by field.
    rows[:, :HEADER_LEN] = headers_to_wire(batch.headers).view(np.uint8).reshape(n, HEADER_LEN)
    rows[:, HEADER_LEN:] = batch.values.astype(">i4").view(np.uint8).reshape(n, VALUE_BYTES * v)
    return rows


def packet_lengths(headers: np.ndarray) -> np.ndarray:
    return HEADER_LEN + VALUE_BYTES * headers["num_values"].astype(np.int64)


def encode(batch: Batch) -> list[bytes]:
    """One datagram per packet, each ``36 + 4 * num_values`` bytes long."""
    rows = encode_array(batch)
    if not len(rows):
        return []
    stride = rows.shape[1]
    raw = rows.tobytes()
    ends = packet_lengths(batch.headers)
    if (ends == stride).all():
        return [raw[i : i + stride] for i in range(0, len(raw), stride)]
    starts = np.arange(len(rows)) * stride
    return [raw[s : s + e] for s, e in zip(starts.tolist(), ends.tolist(), strict=True)]


def decode(buffers: Sequence[bytes], values: int) -> Batch:
    """Decode datagrams into a batch of width ``values``; ``lengths`` keeps each size.

    Buffers shorter than the header decode to zero headers (classify them SHORT);
    values are decoded only for packets exactly ``36 + 4 * values`` long.
    """
    n = len(buffers)
    lengths = np.fromiter(map(len, buffers), np.int64, n)
    batch = Batch.zeros(n, values)
    batch.lengths = lengths
    full = HEADER_LEN + VALUE_BYTES * values
    for length in np.unique(lengths).tolist():
        if length < HEADER_LEN:
            continue
        index = np.flatnonzero(lengths == length)
        picked = itemgetter(*index.tolist())(buffers) if len(index) > 1 else (buffers[index[0]],)
        if length == full:
            wire = np.frombuffer(b"".join(picked), packet_dtype(values))
            np.put(batch.headers, index, headers_from_wire(wire["h"]))
            batch.values[index] = wire["v"]
        else:
            heads = b"".join([p[:HEADER_LEN] for p in picked]) if length > HEADER_LEN else b"".join(picked)
            np.put(batch.headers, index, headers_from_wire(np.frombuffer(heads, WIRE_DTYPE)))
    return batch


def decode_rows(rows: np.ndarray, lengths: np.ndarray, values: int) -> Batch:
    """Decode datagrams laid out one per row of a uint8 array (as ``recvmmsg`` fills it).

    Bytes past each datagram's length are ignored, whatever they hold.
    """
    n = len(rows)
    lengths = np.asarray(lengths, np.int64)
    full = HEADER_LEN + VALUE_BYTES * values
    if n and lengths.min() >= HEADER_LEN:
        headers = headers_from_wire(np.ascontiguousarray(rows[:, :HEADER_LEN]).view(WIRE_DTYPE).reshape(n))
    else:
        headers = np.zeros(n, HEADER_DTYPE)
        has_header = np.flatnonzero(lengths >= HEADER_LEN)
        wire = np.ascontiguousarray(rows[has_header, :HEADER_LEN]).view(WIRE_DTYPE).reshape(-1)
        # np.put copies whole records; fancy assignment would copy a structured array field by field.
        np.put(headers, has_header, headers_from_wire(wire))
    if rows.shape[1] >= full:
        body = rows[:, HEADER_LEN:full].view(">i4").astype(np.int32)
        body[lengths != full] = 0
    else:
        body = np.zeros((n, values), np.int32)
    return Batch(headers, body, lengths)


def update_batch(blocks: int, *, values: int, frac_bits: int, cluster_id: int, worker_id: int) -> Batch:
    """``blocks`` UPDATEs of one worker with the fields every update of it shares.

    Block ``i`` has block_id ``i``, agg_count 1 and the worker's contributors bit;
    seq, model_version, reward, gen_time_us (``stamp_update``) and the values are 0.
    """
    batch = Batch.zeros(blocks, values)
    h = batch.headers
    h["version"] = VERSION
    h["msg_type"] = MsgType.UPDATE
    h["cluster_id"] = cluster_id
    h["worker_id"] = worker_id
    h["block_id"] = np.arange(blocks)
    h["agg_count"] = 1
    h["num_values"] = values
    h["frac_bits"] = frac_bits
    h["contributors"] = 1 << (worker_id % 32)
    return batch


def stamp_update(
    headers: np.ndarray, *, seq: int, model_version: int, reward: float, gen_time_us: int, frac_bits: int
) -> None:
    """Write the fields of one update into all its blocks' headers, in place.

    ``headers`` are ``HEADER_DTYPE`` or ``WIRE_DTYPE`` records (the field names are the
    same). The counters wrap to their 32 bits; ``reward`` becomes fixed point.
    """
    headers["seq"] = seq & 0xFFFFFFFF
    headers["model_version"] = model_version & 0xFFFFFFFF
    headers["reward"] = int(to_fixed(np.array([reward]), frac_bits)[0])
    headers["gen_time_us"] = gen_time_us & 0xFFFFFFFF


def gradient_updates(
    flat: np.ndarray,
    *,
    values: int,
    frac_bits: int,
    cluster_id: int,
    worker_id: int,
    seq: int,
    model_version: int,
    reward: float,
    gen_time_us: int,
) -> Batch:
    """A flat gradient as one UPDATE per block of ``values`` values, the last zero-padded."""
    blocks = split_blocks(to_fixed(np.asarray(flat, np.float32), frac_bits), values)
    batch = update_batch(len(blocks), values=values, frac_bits=frac_bits, cluster_id=cluster_id,
                         worker_id=worker_id)
    stamp_update(batch.headers, seq=seq, model_version=model_version, reward=reward,
                 gen_time_us=gen_time_us, frac_bits=frac_bits)
    batch.values[:] = blocks
    return batch


def mean_values(values: np.ndarray, agg_count: np.ndarray | int, frac_bits: int) -> np.ndarray:
    """DATA values as float32 means: the fixed-point sums over the ``agg_count`` summed in.

    ``values`` is one block ``(V,)`` or rows ``(n, V)`` with an ``agg_count`` each. An
    ``agg_count`` below 1 (malformed; the switch never sends it) counts as 1, so one bad
    packet cannot make a read divide by zero.
    """
    # One float32 division by agg_count * 2**frac_bits, which is exact in float32
    # (agg_count has 16 bits), rounds once: the same float as converting from fixed point
    # and then dividing, with no float64 temporaries of the (n, V) values.
    divisor = np.ldexp(np.maximum(np.asarray(agg_count), 1).astype(np.float32), frac_bits)
    out = np.asarray(values).astype(np.float32)
    out /= divisor[..., None]
    return out


def classify(
    batch: Batch, *, values: int, frac_bits: int, max_clusters: int, max_blocks: int
) -> np.ndarray:
    """A ``Verdict`` per packet of a decoded batch, as the switch must judge it."""
    h = batch.headers
    lengths = batch.lengths if batch.lengths is not None else packet_lengths(h)
    t = h["msg_type"]
    nv = h["num_values"].astype(np.int64)
    is_update = t == MsgType.UPDATE
    # Later rules win, so the most basic failure is written last.
    rules = [
        (is_update & (h["block_id"] >= max_blocks), Verdict.BLOCK_RANGE),
        (is_update & (h["cluster_id"] >= max_clusters), Verdict.CLUSTER_RANGE),
        (is_update & (h["frac_bits"] != frac_bits), Verdict.BAD_FRAC_BITS),
        (
            is_update & ((nv != values) | (lengths != HEADER_LEN + VALUE_BYTES * nv)),
            Verdict.BAD_LENGTH,
        ),
        ((t == MsgType.ACK) | (t == MsgType.DATA) | (t == MsgType.EMPTY), Verdict.NOT_FROM_HOST),
        ((t == MsgType.PULL) & ((nv != 0) | (lengths != HEADER_LEN)), Verdict.BAD_PULL),
        ((t < MsgType.UPDATE) | (t > MsgType.MODEL), Verdict.BAD_TYPE),
        (h["version"] != VERSION, Verdict.BAD_VERSION),
        (lengths < HEADER_LEN, Verdict.SHORT),
    ]
    verdict = np.zeros(len(h), np.uint8)
    for mask, code in rules:
        verdict[mask] = code
    return verdict
