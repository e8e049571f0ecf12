"""The Read RPC: table entries, counters and registers, sent as wire bytes.

protobuf is pure Python here: register entities are encoded by hand (``_register_entity``).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator

import grpc
from google.rpc import code_pb2
from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2

from control_plane.p4info import (
    CONFIG_TABLE,
    DENY,
    DROP_SIM_TABLE,
    IPV4_FORWARD,
    LPM_TABLE,
    NO_ACTION,
    PERMIT,
    REG_ACTIVE_CLUSTERS,
    REG_CLUSTER_COUNT,
    REG_INDEX,
    REG_OCCUPIED,
    REG_READ_PTR,
    REG_SLOT_PREFIX,
    REG_VALUES,
    REG_WRITE_PTR,
    SET_CONFIG,
    SET_DROP_PROB,
    UTIL_LOOKUP_TABLE,
    OutOfRange,
    Register,
    Schema,
    encode_int,
    encode_uint,
    slot_register_field,
)
from control_plane.service.base import ACL_TABLES, PROB_ONE, ServiceState, selected
from control_plane.service.entities import counter_cells, index_of, key_of, set_action
from control_plane.service.errors import Code, P4RuntimeError, abort_with_errors, bounded


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _length_delimited(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _register_entity(register_id: int, index: int, bitstring: bytes) -> bytes:
    """``Entity{register_entry{register_id, index{index}, data{bitstring}}}`` in wire format.

    protobuf is pure Python here: building, copying and serializing ~20k register
    messages takes seconds, writing their bytes directly a fraction of that.
    """
    entry = (b"\x08" + _varint(register_id) + _length_delimited(2, b"\x08" + _varint(index) if index else b"")
             + _length_delimited(3, _length_delimited(1, bitstring)))
    return _length_delimited(11, entry)


def _read_response(entities: list[p4runtime_pb2.Entity | bytes]) -> bytes:
    """A ReadResponse in wire format from entities, some of them already encoded."""
    return b"".join(_length_delimited(1, e if isinstance(e, bytes) else e.SerializeToString())
                    for e in entities)


class ReadRpc(ServiceState):
    """Read: the entities a request selects (wildcards included), or one error per entity."""

    def Read(self, request: p4runtime_pb2.ReadRequest, context: grpc.ServicerContext) -> Iterator[bytes]:
        """Yields ReadResponses already in wire format (``P4RuntimeServer`` sends bytes as they are)."""
        entities: list[p4runtime_pb2.Entity | bytes] = []
        errors: list[p4runtime_pb2.Error] = []
        try:
            self._check_device(request.device_id, request.role)
            with self._lock:
                schema = self._require_pipeline()
                for entity in request.entities:
                    try:
                        entities.extend(self._read_entity(schema, entity))
                        errors.append(p4runtime_pb2.Error(canonical_code=code_pb2.OK))
                    except P4RuntimeError as e:
                        errors.append(e.p4_error())
        except P4RuntimeError as e:
            context.abort(e.code, e.message)
        except Exception as e:  # noqa: BLE001 - a malformed request must not take the switch down
            context.abort(Code.INTERNAL, bounded(f"{type(e).__name__}: {e}"))
        for start in range(0, len(entities), 1000):
            yield _read_response(entities[start:start + 1000])
        if any(e.canonical_code != code_pb2.OK for e in errors):
            abort_with_errors(context, "Read", errors)

    def _read_entity(self, schema: Schema, entity: p4runtime_pb2.Entity
                     ) -> list[p4runtime_pb2.Entity | bytes]:
        kind = entity.WhichOneof("entity")
        if kind == "table_entry":
            return [p4runtime_pb2.Entity(table_entry=t)
                    for t in self._read_tables(schema, entity.table_entry)]
        if kind == "counter_entry":
            return [p4runtime_pb2.Entity(counter_entry=c)
                    for c in self._read_counters(schema, entity.counter_entry)]
        if kind == "register_entry":
            return self._read_registers(schema, entity.register_entry)
        if kind is None:
            raise P4RuntimeError(Code.INVALID_ARGUMENT, "entity not set")
        raise P4RuntimeError(Code.UNIMPLEMENTED, f"{kind} is not supported by the software switch")

    def _read_tables(self, schema: Schema, query: p4runtime_pb2.TableEntry) -> list[p4runtime_pb2.TableEntry]:
        if query.table_id == 0 and len(query.match):
            raise P4RuntimeError(Code.INVALID_ARGUMENT, "a match needs a table_id")
        tables = selected(schema.tables, query.table_id, "table")
        out = []
        for table in tables:
            if query.is_default_action:
                out.append(self._default_entry(schema, table))
                continue
            entries = self._entries(schema, table)
            if len(query.match):
                want = key_of(table, query.match)
                entries = [e for e in entries if key_of(table, e.match) == want]
            out.extend(entries)
        return out

    def _default_entry(self, schema: Schema, table: p4info_pb2.Table) -> p4runtime_pb2.TableEntry:
        entry = p4runtime_pb2.TableEntry(table_id=table.preamble.id, is_default_action=True)
        name = table.preamble.name
        if name == CONFIG_TABLE:
            q = self.pipeline.queue
            cfg = q.config
            with self.pipeline.lock:
                mode, threshold, congestion = int(q.mode), q.threshold, q.congestion_threshold
                quota, feedback = q.cluster_quota, q.feedback
            set_action(schema, entry, SET_CONFIG, mode=mode, threshold=threshold,
                       congestion_threshold=congestion, frac_bits=cfg.frac_bits, capacity=cfg.capacity,
                       max_clusters=cfg.max_clusters, max_blocks=cfg.max_blocks, cluster_quota=quota,
                       feedback=feedback)
        elif name == DROP_SIM_TABLE and None in self.switch.impairment.drop_prob:
            prob = self.switch.impairment.drop_prob[None]
            set_action(schema, entry, SET_DROP_PROB, prob=min(round(prob * PROB_ONE), PROB_ONE - 1))
        elif name == DROP_SIM_TABLE and schema.has(NO_ACTION):
            set_action(schema, entry, NO_ACTION)
        elif name in ACL_TABLES:
            with self.pipeline.lock:
                _, default_permit = self.pipeline.acl.tables()[ACL_TABLES[name]]
            set_action(schema, entry, PERMIT if default_permit else DENY)
        elif name == UTIL_LOOKUP_TABLE and self._util_default is not None:
            entry.CopyFrom(self._util_default)
        elif table.HasField("initial_default_action"):
            init = table.initial_default_action
            entry.action.action.action_id = init.action_id
            for arg in init.arguments:
                entry.action.action.params.add(param_id=arg.param_id, value=arg.value)
        return entry

    def _entries(self, schema: Schema, table: p4info_pb2.Table) -> list[p4runtime_pb2.TableEntry]:
        name = table.preamble.name
        out = []
        if name == LPM_TABLE:
            with self.pipeline.lock:
                routes = self.switch.table.entries()
            for prefix, route in routes:
                net = ipaddress.IPv4Network(prefix)
                entry = p4runtime_pb2.TableEntry(table_id=table.preamble.id)
                if net.prefixlen:
                    fm = entry.match.add(field_id=table.match_fields[0].id)
                    fm.lpm.value = encode_uint(int(net.network_address), 32)
                    fm.lpm.prefix_len = net.prefixlen
                mac = int.from_bytes(route.mac, "big") if route.mac else 0
                set_action(schema, entry, IPV4_FORWARD, dstAddr=mac, port=route.port)
                out.append(entry)
        elif name == DROP_SIM_TABLE:
            drop = self.switch.impairment.drop_prob
            for port, prob in sorted((p, v) for p, v in drop.items() if p is not None):
                if not 0 <= port < 512:
                    continue  # not expressible as bit<9>; an emulation-only setting
                entry = p4runtime_pb2.TableEntry(table_id=table.preamble.id)
                entry.match.add(field_id=table.match_fields[0].id).exact.value = encode_uint(port, 9)
                set_action(schema, entry, SET_DROP_PROB, prob=min(round(prob * PROB_ONE), PROB_ONE - 1))
                out.append(entry)
        elif name in ACL_TABLES:
            with self.pipeline.lock:
                rules, _ = self.pipeline.acl.tables()[ACL_TABLES[name]]
            fields = {m.name: m.id for m in table.match_fields}
            for rule in rules:
                entry = p4runtime_pb2.TableEntry(table_id=table.preamble.id)
                if rule.cluster is not None:
                    entry.match.add(field_id=fields["hdr.olaf.cluster_id"]).exact.value = \
                        encode_uint(rule.cluster, 16)
                if rule.prefix.prefixlen:  # a /0 match is the field left out
                    fm = entry.match.add(field_id=fields["hdr.ipv4.srcAddr"])
                    fm.lpm.value = encode_uint(int(rule.prefix.network_address), 32)
                    fm.lpm.prefix_len = rule.prefix.prefixlen
                set_action(schema, entry, PERMIT if rule.permit else DENY)
                out.append(entry)
        elif name == UTIL_LOOKUP_TABLE:
            out = list(self._util_entries.values())
        return out

    def _read_counters(self, schema: Schema, query: p4runtime_pb2.CounterEntry
                       ) -> list[p4runtime_pb2.CounterEntry]:
        counters = selected(schema.counters, query.counter_id, "counter")
        out = []
        for counter in counters:
            name = counter.preamble.name
            with self.pipeline.lock:
                cells = counter_cells(self.pipeline, name, counter.size)
            indices = [index_of(query, counter.size, name)] if query.HasField("index") \
                else range(counter.size)
            for i in indices:
                entry = p4runtime_pb2.CounterEntry(counter_id=counter.preamble.id)
                entry.index.index = i
                entry.data.packet_count = cells[i]
                out.append(entry)
        return out

    def _register_cells(self, schema: Schema, reg: Register) -> list[int] | None:
        """A register's cells from the queue state, in the P4 program's layout.

        Call with the pipeline lock held. Where the switch's dimensions differ from the
        program's, cells the program has and the switch lacks read 0, and switch state
        beyond the program's sizes is not visible.
        """
        q = self.pipeline.queue
        cfg = q.config
        scalars = {REG_OCCUPIED: q.occupied, REG_READ_PTR: q.read_ptr, REG_WRITE_PTR: q.write_ptr,
                   REG_ACTIVE_CLUSTERS: q.active_clusters}
        if reg.name in scalars:
            cells = [scalars[reg.name]]
        elif reg.name == REG_CLUSTER_COUNT:
            cells = list(q.cluster_count)
        elif slot_register_field(reg.name) is not None:
            cells = list(q.slots[slot_register_field(reg.name)])
        elif reg.name == REG_VALUES:
            # P4: reg_values[(slot << V_SHIFT) + i]; the row stride is size / capacity.
            p4_slots = schema.registers[schema.id(REG_SLOT_PREFIX + "seq")].size \
                if schema.has(REG_SLOT_PREFIX + "seq") else cfg.capacity
            stride = max(1, reg.size // p4_slots)
            cells = [0] * reg.size
            # olaf.p4 declares it register<bit<32>> (bmv2 holds cells unsigned anyway), so
            # an int32 value reads as the unsigned number of its bits; an int<W> register
            # (older p4info) gets the signed value.
            mask = 0 if reg.signed else (1 << reg.bitwidth) - 1
            for s in range(min(cfg.capacity, p4_slots)):
                row = [v & mask if mask else v for v in q.values[s, :min(cfg.values, stride)].tolist()]
                cells[s * stride:s * stride + len(row)] = row
        elif reg.name == REG_INDEX:
            # P4: reg_index[cluster << 10 | block] = 1 + slot, 0 for none.
            p4_clusters = schema.registers[schema.id(REG_CLUSTER_COUNT)].size
            stride = max(1, reg.size // p4_clusters)
            cells = [0] * reg.size
            for c in range(min(cfg.max_clusters, p4_clusters)):
                for b in range(min(cfg.max_blocks, stride)):
                    cells[c * stride + b] = q.index[c * cfg.max_blocks + b] + 1
        else:
            return None
        return (cells + [0] * reg.size)[:reg.size]

    def _read_registers(self, schema: Schema, query: p4runtime_pb2.RegisterEntry) -> list[bytes]:
        registers = selected(schema.registers, query.register_id, "register")
        out = []
        for reg in registers:
            index = index_of(query, reg.size, reg.name) if query.HasField("index") else None
            with self.pipeline.lock:
                cells = self._register_cells(schema, reg)
            if cells is None:
                if query.register_id == 0:
                    continue  # a wildcard read returns what this target holds
                raise P4RuntimeError(Code.UNIMPLEMENTED,
                                     f"register {reg.name} is internal to the P4 program; "
                                     "the software switch does not keep it")
            encode = encode_int if reg.signed else encode_uint
            for i in [index] if index is not None else range(reg.size):
                try:
                    out.append(_register_entity(reg.id, i, encode(cells[i], reg.bitwidth)))
                except OutOfRange as e:
                    raise P4RuntimeError(Code.INTERNAL, f"{reg.name}[{i}]: {e}") from None
        return out
