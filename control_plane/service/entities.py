"""Table entries, actions and indices of P4Runtime messages, checked against the pushed P4Info.

What the Write and Read RPCs share: the canonical key and the action of a ``TableEntry``,
the action of an entry read back, an entity's index, and the switch cells behind a counter.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2

from control_plane.p4info import (
    OUTCOME_COUNTER,
    REFUSED_COUNTER,
    OutOfRange,
    Schema,
    decode_uint,
    encode_uint,
)
from control_plane.service.errors import Code, P4RuntimeError
from dataplane.switch import Pipeline

Key = tuple[tuple[int, int, int], ...]
"""A canonical table key: (field id, value, prefix length) per match field."""
MatchType = p4info_pb2.MatchField.MatchType


@dataclass(frozen=True)


class Action:
    """A table entry's action: its name and its params' values."""

    name: str
    params: dict[str, int]


def action_of(schema: Schema, table: p4info_pb2.Table, entry: p4runtime_pb2.TableEntry,
              default: bool) -> Action | None:
    """The direct action of ``entry`` with its params decoded; None if it has none."""
    which = entry.action.WhichOneof("type")
    if which is None:
        return None
    if which != "action":
        raise P4RuntimeError(Code.INVALID_ARGUMENT,
                             f"table {table.preamble.name} has no action profile: give a direct action")
    a = entry.action.action
    refs = {r.id: r.scope for r in table.action_refs}
    if a.action_id not in refs:
        raise P4RuntimeError(Code.INVALID_ARGUMENT,
                             f"action id {a.action_id} is not an action of table {table.preamble.name}")
    forbidden = p4info_pb2.ActionRef.TABLE_ONLY if default else p4info_pb2.ActionRef.DEFAULT_ONLY
    if refs[a.action_id] == forbidden:
        where = "the default action" if default else "an entry's action"
        raise P4RuntimeError(Code.INVALID_ARGUMENT,
                             f"action {schema.name(a.action_id)} cannot be {where}")
    declared = schema.params(a.action_id)
    values: dict[str, int] = {}
    for p in a.params:
        if p.param_id not in declared:
            raise P4RuntimeError(Code.INVALID_ARGUMENT,
                                 f"action {schema.name(a.action_id)} has no param id {p.param_id}")
        pname, width = declared[p.param_id]
        if pname in values:
            raise P4RuntimeError(Code.INVALID_ARGUMENT, f"param {pname} given twice")
        try:
            values[pname] = decode_uint(p.value, width)
        except OutOfRange as e:
            raise P4RuntimeError(Code.OUT_OF_RANGE, f"param {pname}: {e}") from None
    missing = sorted({n for n, _ in declared.values()} - set(values))
    if missing:
        raise P4RuntimeError(Code.INVALID_ARGUMENT,
                             f"action {schema.name(a.action_id)} is missing params {missing}")
    return Action(schema.name(a.action_id), values)


def key_of(table: p4info_pb2.Table, matches: Any) -> Key:
    """Canonical key: (field id, value, prefix length) per field, in p4info order."""
    fields = {m.id: m for m in table.match_fields}
    got: dict[int, tuple[int, int]] = {}
    for fm in matches:
        mf = fields.get(fm.field_id)
        if mf is None:
            raise P4RuntimeError(Code.INVALID_ARGUMENT,
                                 f"table {table.preamble.name} has no match field id {fm.field_id}")
        if fm.field_id in got:
            raise P4RuntimeError(Code.INVALID_ARGUMENT, f"match field {mf.name} given twice")
        kind = fm.WhichOneof("field_match_type")
        try:
            if mf.match_type == p4info_pb2.MatchField.EXACT and kind == "exact":
                got[fm.field_id] = (decode_uint(fm.exact.value, mf.bitwidth), mf.bitwidth)
            elif mf.match_type == p4info_pb2.MatchField.LPM and kind == "lpm":
                plen = fm.lpm.prefix_len
                if not 1 <= plen <= mf.bitwidth:
                    raise P4RuntimeError(Code.INVALID_ARGUMENT,
                                         f"{mf.name}: prefix_len must be 1..{mf.bitwidth} "
                                         "(a /0 match is expressed by omitting the field)")
                value = decode_uint(fm.lpm.value, mf.bitwidth)
                if value & ((1 << (mf.bitwidth - plen)) - 1):
                    raise P4RuntimeError(Code.INVALID_ARGUMENT,
                                         f"{mf.name}: bits beyond the /{plen} prefix must be 0")
                got[fm.field_id] = (value, plen)
            else:
                raise P4RuntimeError(Code.INVALID_ARGUMENT,
                                     f"{mf.name} is a {MatchType.Name(mf.match_type)} field, "
                                     f"got a {kind} match")
        except OutOfRange as e:
            raise P4RuntimeError(Code.OUT_OF_RANGE, f"{mf.name}: {e}") from None
    key = []
    for mf in table.match_fields:
        if mf.id in got:
            key.append((mf.id, *got[mf.id]))
        elif mf.match_type == p4info_pb2.MatchField.LPM:
            key.append((mf.id, 0, 0))
        else:
            raise P4RuntimeError(Code.INVALID_ARGUMENT,
                                 f"exact match field {mf.name} cannot be omitted")
    return tuple(key)


def set_action(schema: Schema, entry: p4runtime_pb2.TableEntry, name: str, **params: int) -> None:
    """Give ``entry`` the action ``name`` with ``params``, encoded as the P4Info declares them."""
    action = entry.action.action
    action.action_id = schema.id(name)
    for pid, (pname, width) in sorted(schema.params(action.action_id).items()):
        action.params.add(param_id=pid, value=encode_uint(params[pname], width))


def index_of(entry: Any, size: int, name: str) -> int:
    """The index of a counter or register entity, checked against the ``size`` cells of ``name``."""
    i = entry.index.index
    if i < 0:
        raise P4RuntimeError(Code.INVALID_ARGUMENT, f"{name}: negative index {i}")
    if i >= size:
        raise P4RuntimeError(Code.OUT_OF_RANGE, f"{name}: index {i} is beyond its {size} cells")
    return i


def counter_array(pipeline: Pipeline, name: str) -> Any:
    """The switch's cells behind a counter (a list or an array, written in place)."""
    if name == REFUSED_COUNTER:
        return pipeline.acl.refused
    c = pipeline.queue.counters
    return c.outcomes if name == OUTCOME_COUNTER else c.msg_types


def counter_cells(pipeline: Pipeline, name: str, size: int) -> list[int]:
    """A counter's cells as ints, cut or padded with 0 to the program's ``size``."""
    cells = [int(n) for n in counter_array(pipeline, name)]
    return (cells + [0] * size)[:size]

