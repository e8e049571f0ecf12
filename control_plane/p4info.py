"""What the OLAF P4 program exposes to a controller, and P4Runtime's integer encoding.

Every OLAF target (bmv2, Tofino, the software switch) is driven through the same
P4Runtime names, resolved to ids from whichever P4Info the controller pushed:

* ``OlafIngress.olaf_config``: keyless; its default action ``set_config`` carries the
  mode, reward threshold, congestion threshold and cluster quota (and the dimensions the
  program was built with);
* ``OlafIngress.ipv4_lpm``: forwarding of traffic the queue does not consume;
* ``OlafEgress.drop_sim``: per-egress-port drop probability (SwitchML-style loss);
* ``OlafIngress.update_source``/``pull_source``: the source checks (``permit``/``deny``
  by cluster and IPv4 source, dataplane/acl.py);
* counters ``outcome_counter`` (index ``Outcome``), ``msg_type_counter`` (index msg_type)
  and ``refused_counter`` (index ``Refusal``);
* registers with the queue state (occupancy, pointers, clusters, and the slots).

``Schema`` checks that a P4Info names all of this with the widths the software switch
can honour, and gives the id lookups the service needs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from google.protobuf import text_format
from p4.config.v1 import p4info_pb2

from dataplane.acl import Refusal
from dataplane.queue import SLOT_FIELDS, QueueConfig
from worker_transport.protocol import MsgType, Outcome

CONFIG_TABLE = "OlafIngress.olaf_config"
SET_CONFIG = "OlafIngress.set_config"
LPM_TABLE = "OlafIngress.ipv4_lpm"
IPV4_FORWARD = "OlafIngress.ipv4_forward"
DROP = "OlafIngress.drop"
DROP_SIM_TABLE = "OlafEgress.drop_sim"
SET_DROP_PROB = "OlafEgress.set_drop_prob"
NO_ACTION = "NoAction"
UTIL_LOOKUP_TABLE = "OlafIngress.util_lookup"
UPDATE_SOURCE_TABLE = "OlafIngress.update_source"
PULL_SOURCE_TABLE = "OlafIngress.pull_source"
PERMIT = "OlafIngress.permit"
DENY = "OlafIngress.deny"
REFUSED_COUNTER = "OlafIngress.refused_counter"
OUTCOME_COUNTER = "OlafIngress.outcome_counter"
MSG_TYPE_COUNTER = "OlafIngress.msg_type_counter"
REG_OCCUPIED = "OlafIngress.reg_occupied"
REG_READ_PTR = "OlafIngress.reg_read_ptr"
REG_WRITE_PTR = "OlafIngress.reg_write_ptr"
REG_ACTIVE_CLUSTERS = "OlafIngress.reg_active_clusters"
REG_CLUSTER_COUNT = "OlafIngress.reg_cluster_count"
REG_VALUES = "OlafIngress.reg_values"
REG_INDEX = "OlafIngress.reg_index"
REG_SLOT_PREFIX = "OlafIngress.reg_slot_"

STATE_REGISTERS = (REG_OCCUPIED, REG_READ_PTR, REG_WRITE_PTR, REG_ACTIVE_CLUSTERS)
"""Scalar queue state (size-1 registers) that every target must expose."""

CONFIG_PARAMS = {
    "mode": 8,
    "threshold": 32,
    "congestion_threshold": 8,
    "frac_bits": 8,
    "capacity": 16,
    "max_clusters": 16,
    "max_blocks": 16,
    "cluster_quota": 16,
    "feedback": 8,
}
"""``set_config`` parameters and their widths; ``threshold`` is raw fixed point, >= 0;
``cluster_quota`` is 1..capacity (DESIGN.md §3 step 4; capacity means no limit);
``feedback`` the feedback revision, 2 or 3 (DESIGN.md §3 Feedback)."""

ACTION_PARAMS: dict[str, dict[str, int]] = {
    SET_CONFIG: CONFIG_PARAMS,
    IPV4_FORWARD: {"dstAddr": 48, "port": 9},
    DROP: {},
    SET_DROP_PROB: {"prob": 16},
    NO_ACTION: {},
    PERMIT: {},
    DENY: {},
}

MatchSpec = tuple[tuple[str, int, int], ...]
"""(field name, MatchField.MatchType, bitwidth) in key order."""

TABLES: dict[str, tuple[MatchSpec, str]] = {
    CONFIG_TABLE: ((), SET_CONFIG),
    LPM_TABLE: ((("hdr.ipv4.dstAddr", p4info_pb2.MatchField.LPM, 32),), IPV4_FORWARD),
    DROP_SIM_TABLE: ((("standard_metadata.egress_port", p4info_pb2.MatchField.EXACT, 9),), SET_DROP_PROB),
    UPDATE_SOURCE_TABLE: ((("hdr.olaf.cluster_id", p4info_pb2.MatchField.EXACT, 16),
                           ("hdr.ipv4.srcAddr", p4info_pb2.MatchField.LPM, 32)), PERMIT),
    PULL_SOURCE_TABLE: ((("hdr.ipv4.srcAddr", p4info_pb2.MatchField.LPM, 32),), PERMIT),
}
"""Tables the switch serves: key, and the one action the table must offer."""

COUNTER_MIN_SIZE = {OUTCOME_COUNTER: len(Outcome), MSG_TYPE_COUNTER: max(MsgType) + 1,
                    REFUSED_COUNTER: len(Refusal)}


class OutOfRange(ValueError):
    """A bytestring that does not fit its P4 type (P4Runtime OUT_OF_RANGE)."""


def encode_uint(value: int, bitwidth: int) -> bytes:
    """Canonical (shortest) big-endian bytestring of an unsigned ``bit<W>`` value."""
    if not 0 <= value < 1 << bitwidth:
        raise OutOfRange(f"{value} does not fit bit<{bitwidth}>")
    return value.to_bytes(max(1, (value.bit_length() + 7) // 8), "big")


def encode_int(value: int, bitwidth: int) -> bytes:
    """Canonical two's complement bytestring of a signed ``int<W>`` value."""
    if not -(1 << (bitwidth - 1)) <= value < 1 << (bitwidth - 1):
        raise OutOfRange(f"{value} does not fit int<{bitwidth}>")
    return value.to_bytes(max(1, (value.bit_length() + 8) // 8), "big", signed=True)


def decode_uint(data: bytes, bitwidth: int) -> int:
    """Any-length bytestring as ``bit<W>``; leading zero bytes are allowed (spec §8.3)."""
    if not data:
        raise OutOfRange("empty bytestring")
    value = int.from_bytes(data, "big")
    if value >> bitwidth:
        raise OutOfRange(f"0x{data.hex()} does not fit bit<{bitwidth}>")
    return value


def decode_int(data: bytes, bitwidth: int) -> int:
    """Any-length sign-extended bytestring as ``int<W>``."""
    if not data:
        raise OutOfRange("empty bytestring")
    value = int.from_bytes(data, "big", signed=True)
    if not -(1 << (bitwidth - 1)) <= value < 1 << (bitwidth - 1):
        raise OutOfRange(f"0x{data.hex()} does not fit int<{bitwidth}>")
    return value


def load_p4info(path: str | Path) -> p4info_pb2.P4Info:
    """A P4Info from its text (``.txtpb``/``.txt``) or binary protobuf file."""
    data = Path(path).read_bytes()
    p4info = p4info_pb2.P4Info()
    try:
        text_format.Parse(data.decode(), p4info, allow_unknown_field=True)
    except (UnicodeDecodeError, text_format.ParseError):
        p4info = p4info_pb2.P4Info()
        p4info.ParseFromString(data)
    return p4info


@dataclass(frozen=True)
class Register:
    id: int
    name: str
    size: int
    bitwidth: int
    signed: bool


class PipelineRefused(ValueError):
    """The P4Info names something this switch cannot serve; the message lists every problem."""


class Schema:
    """Id lookups over a P4Info that the software switch has accepted."""

    def __init__(self, p4info: p4info_pb2.P4Info, queue: QueueConfig) -> None:
        self.p4info = p4info
        self.tables = {t.preamble.id: t for t in p4info.tables}
        self.actions = {a.preamble.id: a for a in p4info.actions}
        self.counters = {c.preamble.id: c for c in p4info.counters}
        self.registers: dict[int, Register] = {}
        for r in p4info.registers:
            bits = r.type_spec.bitstring
            kind = bits.WhichOneof("type_spec")
            width = getattr(bits, kind).bitwidth if kind in ("bit", "int") else 0
            self.registers[r.preamble.id] = Register(r.preamble.id, r.preamble.name, r.size, width,
                                                     kind == "int")
        self._ids: dict[str, int] = {}
        for group in (p4info.tables, p4info.actions, p4info.counters, p4info.registers):
            for obj in group:
                self._ids[obj.preamble.name] = obj.preamble.id
        problems = self._problems(queue)
        if problems:
            raise PipelineRefused("this P4Info cannot be served by the software switch: "
                                  + "; ".join(problems))

    def id(self, name: str) -> int:
        return self._ids[name]

    def has(self, name: str) -> bool:
        return name in self._ids

    def name(self, id_: int) -> str:
        for group in (self.tables, self.actions, self.counters):
            if id_ in group:
                return group[id_].preamble.name
        return self.registers[id_].name

    def params(self, action_id: int) -> dict[int, tuple[str, int]]:
        """Param id -> (name, bitwidth) of an action."""
        return {p.id: (p.name, p.bitwidth) for p in self.actions[action_id].params}

    def _problems(self, queue: QueueConfig) -> list[str]:
        p = self.p4info
        problems = []
        for kind in ("meters", "direct_counters", "direct_meters", "action_profiles", "digests",
                     "value_sets", "externs"):
            names = [o.preamble.name for o in getattr(p, kind)] if kind != "externs" else [
                i.preamble.name for e in p.externs for i in e.instances]
            if names:
                problems.append(f"{kind} are not supported ({', '.join(names)})")
        for t in p.tables:
            problems += self._table_problems(t)
        for name in TABLES:
            if name not in self._ids:
                problems.append(f"table {name} is missing")
        for name, params in ACTION_PARAMS.items():
            if name not in self._ids:
                continue
            have = {q.name: q.bitwidth for q in self.actions[self._ids[name]].params}
            if have != params:
                problems.append(f"action {name} has params {have}, expected {params}")
        for c in p.counters:
            if c.preamble.name not in COUNTER_MIN_SIZE:
                problems.append(f"counter {c.preamble.name} is not one the switch keeps")
            elif c.spec.unit != p4info_pb2.CounterSpec.PACKETS:
                problems.append(f"counter {c.preamble.name} must count PACKETS (the switch keeps no bytes)")
            elif c.size < COUNTER_MIN_SIZE[c.preamble.name]:
                problems.append(f"counter {c.preamble.name} has {c.size} cells, "
                                f"needs {COUNTER_MIN_SIZE[c.preamble.name]}")
        for name in COUNTER_MIN_SIZE:
            if name not in self._ids:
                problems.append(f"counter {name} is missing")
        for name in (*STATE_REGISTERS, REG_CLUSTER_COUNT):
            if name not in self._ids:
                problems.append(f"register {name} is missing")
                continue
            r = self.registers[self._ids[name]]
            if r.signed or r.bitwidth < 16:
                problems.append(f"register {name} must be bit<W> with W >= 16")
            if name == REG_CLUSTER_COUNT and r.size < queue.max_clusters:
                problems.append(f"register {name} has {r.size} cells, the switch runs "
                                f"{queue.max_clusters} clusters")
            elif name != REG_CLUSTER_COUNT and r.size != 1:
                problems.append(f"register {name} has {r.size} cells, expected 1")
        return problems

    def _table_problems(self, t: p4info_pb2.Table) -> list[str]:
        name = t.preamble.name
        if t.implementation_id or t.direct_resource_ids:
            return [f"table {name} uses an action profile or direct resources"]
        if name == UTIL_LOOKUP_TABLE:
            # The switch divides natively; the table's entries are kept for read-back only.
            return []
        if name not in TABLES:
            return [f"table {name} is not one the switch implements"]
        key, required = TABLES[name]
        have = tuple((m.name, m.match_type, m.bitwidth) for m in t.match_fields)
        problems = []
        if have != key:
            problems.append(f"table {name} has key {have}, expected {key}")
        action_names = {self.actions[a.id].preamble.name for a in t.action_refs if a.id in self.actions}
        if len(action_names) != len(t.action_refs):
            problems.append(f"table {name} refers to actions missing from the P4Info")
        if required not in action_names:
            problems.append(f"table {name} lacks action {required}")
        unknown = action_names - set(ACTION_PARAMS)
        if unknown:
            problems.append(f"table {name} has actions the switch cannot run: {sorted(unknown)}")
        return problems


def slot_register_field(name: str) -> str | None:
    """``reg_slot_<field>`` -> field, for the per-slot metadata registers."""
    if name.startswith(REG_SLOT_PREFIX) and name[len(REG_SLOT_PREFIX):] in SLOT_FIELDS:
        return name[len(REG_SLOT_PREFIX):]
    return None
