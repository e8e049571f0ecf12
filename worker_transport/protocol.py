"""The OLAF wire format (DESIGN.md §2), defined once for every part of the stack.

Three views of the same 36-byte header:

* ``HEADER_FIELDS``: the field table, the single source that the others and the
  P4/Verilog consistency tests are derived from;
* ``WIRE_DTYPE``: a big-endian numpy structured dtype, used by the batch codec in
  ``worker_transport.codec``;
* ``Olaf``: a scapy layer for crafting and inspecting packets (tests, pcaps).
"""

from __future__ import annotations

from enum import IntEnum

import numpy as np
from scapy.fields import (
    BitField,
    ByteField,
    FieldListField,
    FlagsField,
    ShortField,
    SignedIntField,
    XIntField,
)
from scapy.layers.inet import UDP
from scapy.packet import Packet, bind_layers

OLAF_PORT = 20300
"""UDP port of OLAF traffic in either direction (0x4F4C, "OL")."""

VERSION = 1
HEADER_LEN = 36
VALUE_BYTES = 4
DEFAULT_FRAC_BITS = 16
FLAG_CONGESTED = 0x01
DEFAULT_CONGESTION_THRESHOLD = 192
MAX_VALUES_P4 = 64
"""V on bmv2 / v1model (256 bytes of values, as in SwitchML)."""
MAX_VALUES_TNA = 32
"""V on Tofino: one register per value, 32 of the pipeline's 48 stateful ALUs (p4/README.md)."""
MAX_VALUES_SOFTWARE = 360
"""Largest V in software and on the FPGA: a 1500-byte segment."""
INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1


class MsgType(IntEnum):
    UPDATE = 1
    ACK = 2
    PULL = 3
    DATA = 4
    EMPTY = 5
    MODEL = 6


class Outcome(IntEnum):
    ENQUEUED = 0
    MERGED = 1
    REPLACED = 2
    DROPPED_REWARD = 3
    DROPPED_FULL = 4
    DROPPED_INVALID = 5


class Mode(IntEnum):
    OLAF = 0
    FIFO = 1


# (name, bits) in wire order. Everything else about the header derives from this.
HEADER_FIELDS: tuple[tuple[str, int], ...] = (
    ("version", 4),
    ("msg_type", 4),
    ("flags", 8),
    ("cluster_id", 16),
    ("worker_id", 16),
    ("block_id", 16),
    ("agg_count", 16),
    ("outcome", 8),
    ("active_clusters", 8),
    ("queue_util", 8),
    ("num_values", 8),
    ("frac_bits", 8),
    ("reserved", 8),
    ("seq", 32),
    ("model_version", 32),
    ("reward", 32),
    ("gen_time_us", 32),
    ("contributors", 32),
)
SIGNED_FIELDS = frozenset({"reward"})

assert sum(bits for _, bits in HEADER_FIELDS) == HEADER_LEN * 8

# numpy cannot hold 4-bit fields, so version and msg_type share one byte on the wire.
def _wire_type(name: str, bits: int) -> str:
    kind = "i" if name in SIGNED_FIELDS else "u"
    return (">" if bits > 8 else "|") + kind + str(bits // 8)


WIRE_DTYPE = np.dtype(
    [("ver_type", "u1")] + [(name, _wire_type(name, bits)) for name, bits in HEADER_FIELDS[2:]]
)
assert WIRE_DTYPE.itemsize == HEADER_LEN

HEADER_DTYPE = np.dtype(
    [("version", "u1"), ("msg_type", "u1")]
    + [(name, WIRE_DTYPE[name].newbyteorder("=")) for name, _ in HEADER_FIELDS[2:]]
)
"""Native-endian header, one record per packet: what the queue and hosts compute on."""
NUM_VALUES_OFFSET: int = WIRE_DTYPE.fields["num_values"][1]


class Olaf(Packet):
    """Scapy layer of the OLAF header and its values (DESIGN.md §2)."""

    name = "OLAF"
    fields_desc = [
        BitField("version", VERSION, 4),
        BitField("msg_type", MsgType.UPDATE, 4),
        FlagsField("flags", 0, 8, ["CONGESTED"]),
        ShortField("cluster_id", 0),
        ShortField("worker_id", 0),
        ShortField("block_id", 0),
        ShortField("agg_count", 1),
        ByteField("outcome", 0),
        ByteField("active_clusters", 0),
        ByteField("queue_util", 0),
        ByteField("num_values", None),
        ByteField("frac_bits", DEFAULT_FRAC_BITS),
        ByteField("reserved", 0),
        XIntField("seq", 0),
        XIntField("model_version", 0),
        SignedIntField("reward", 0),
        XIntField("gen_time_us", 0),
        XIntField("contributors", 0),
        FieldListField(
            "values", [], SignedIntField("", 0), count_from=lambda pkt: pkt.num_values
        ),
    ]

    def post_build(self, pkt: bytes, pay: bytes) -> bytes:
        if self.num_values is None:
            at = NUM_VALUES_OFFSET
            pkt = pkt[:at] + bytes([len(self.values) & 0xFF]) + pkt[at + 1 :]
        return pkt + pay


bind_layers(UDP, Olaf, dport=OLAF_PORT)
bind_layers(UDP, Olaf, sport=OLAF_PORT)
