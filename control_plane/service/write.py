"""The Write RPC: table entries, the config table, drop_sim, source ACLs, counter cells."""

from __future__ import annotations

import ipaddress

import grpc
from google.rpc import code_pb2
from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2

from control_plane.p4info import (
    CONFIG_TABLE,
    DROP,
    DROP_SIM_TABLE,
    IPV4_FORWARD,
    LPM_TABLE,
    PERMIT,
    SET_DROP_PROB,
    UPDATE_SOURCE_TABLE,
    Schema,
)
from control_plane.service.base import ACL_TABLES, PROB_ONE, ServiceState, known
from control_plane.service.entities import Action, Key, action_of, counter_array, index_of, key_of
from control_plane.service.errors import BatchFailed, Code, P4RuntimeError, unary
from dataplane.acl import AclRule
from dataplane.queue import check_cluster_quota, check_feedback
from worker_transport.protocol import INT32_MAX, Mode

Update = p4runtime_pb2.Update


class WriteRpc(ServiceState):
    """Write: each update of a batch applied to the switch, or its error reported (CONTINUE_ON_ERROR)."""

    @unary
    def Write(self, request: p4runtime_pb2.WriteRequest, context: grpc.ServicerContext
              ) -> p4runtime_pb2.WriteResponse:
        self._check_device(request.device_id, request.role)
        self._check_primary(request)
        with self._lock:
            schema = self._require_pipeline()
            if request.atomicity != p4runtime_pb2.WriteRequest.CONTINUE_ON_ERROR:
                raise P4RuntimeError(Code.UNIMPLEMENTED,
                                     "only CONTINUE_ON_ERROR atomicity is supported")
            errors = []
            for update in request.updates:
                try:
                    self._apply(schema, update)
                    errors.append(p4runtime_pb2.Error(canonical_code=code_pb2.OK))
                except P4RuntimeError as e:
                    errors.append(e.p4_error())
                except Exception as e:  # noqa: BLE001 - report, keep serving
                    bug = P4RuntimeError(Code.INTERNAL, f"{type(e).__name__}: {e}")
                    errors.append(bug.p4_error())
        if any(e.canonical_code != code_pb2.OK for e in errors):
            raise BatchFailed("Write", errors)
        return p4runtime_pb2.WriteResponse()

    def _apply(self, schema: Schema, update: p4runtime_pb2.Update) -> None:
        if update.type not in (Update.INSERT, Update.MODIFY, Update.DELETE):
            raise P4RuntimeError(Code.INVALID_ARGUMENT, "update type must be INSERT, MODIFY or DELETE")
        kind = update.entity.WhichOneof("entity")
        if kind == "table_entry":
            self._write_table(schema, update.type, update.entity.table_entry)
        elif kind == "counter_entry":
            self._write_counter(schema, update.type, update.entity.counter_entry)
        elif kind == "register_entry":
            known(schema.registers, update.entity.register_entry.register_id, "register")
            raise P4RuntimeError(Code.UNIMPLEMENTED,
                                 "registers hold the queue state, which only the data plane writes; "
                                 "they are read-only on this target")
        elif kind is None:
            raise P4RuntimeError(Code.INVALID_ARGUMENT, "update has no entity")
        else:
            raise P4RuntimeError(Code.UNIMPLEMENTED, f"{kind} is not supported by the software switch")

    def _write_table(self, schema: Schema, kind: int, entry: p4runtime_pb2.TableEntry) -> None:
        table = known(schema.tables, entry.table_id, "table")
        name = table.preamble.name
        if entry.idle_timeout_ns:
            raise P4RuntimeError(Code.INVALID_ARGUMENT, f"table {name} does not support idle timeout")
        for extra in ("counter_data", "meter_config", "meter_counter_data"):
            if entry.HasField(extra):
                raise P4RuntimeError(Code.INVALID_ARGUMENT, f"table {name} has no direct {extra}")
        if entry.is_default_action:
            if kind != Update.MODIFY:
                raise P4RuntimeError(Code.INVALID_ARGUMENT,
                                     "a default entry can only be modified (MODIFY), not inserted or deleted")
            if len(entry.match) or entry.priority:
                raise P4RuntimeError(Code.INVALID_ARGUMENT,
                                     "a default entry has no match and no priority")
            self._write_default(table, action_of(schema, table, entry, default=True), entry)
            return
        if not table.match_fields:
            raise P4RuntimeError(Code.INVALID_ARGUMENT,
                                 f"table {name} has no key: write its default entry (is_default_action)")
        if entry.priority:
            raise P4RuntimeError(Code.INVALID_ARGUMENT,
                                 f"priority must be 0: table {name} has no ternary, range or optional key")
        key = key_of(table, entry.match)
        action = None if kind == Update.DELETE else action_of(schema, table, entry, default=False)
        if action is None and kind != Update.DELETE:
            raise P4RuntimeError(Code.INVALID_ARGUMENT, "INSERT and MODIFY need an action")
        if name == LPM_TABLE:
            self._write_route(kind, key, action)
        elif name == DROP_SIM_TABLE:
            self._write_drop_sim(kind, key, action)
        elif name in ACL_TABLES:
            self._write_source_rule(name, kind, key, action)
        else:
            self._write_util(kind, key, entry)

    # -- the tables --------------------------------------------------------------------
    def _write_default(self, table: p4info_pb2.Table, action: Action | None,
                       entry: p4runtime_pb2.TableEntry) -> None:
        """MODIFY of a default entry; no action resets it to the table's initial default."""
        name = table.preamble.name
        if name == CONFIG_TABLE:
            self._set_config(action)
        elif name == LPM_TABLE:
            if action is not None and action.name != DROP:
                raise P4RuntimeError(Code.UNIMPLEMENTED,
                                     "the software switch's ipv4_lpm default is drop; add a /0 route instead")
        elif name == DROP_SIM_TABLE:
            drop = dict(self.switch.impairment.drop_prob)
            if action is not None and action.name == SET_DROP_PROB:
                drop[None] = action.params["prob"] / PROB_ONE
            else:
                drop.pop(None, None)
            # One reference swap: the switch thread never sees a dict being changed.
            self.switch.impairment.drop_prob = drop
        elif name in ACL_TABLES:
            # No action resets to the program's initial default, permit.
            self._configure_acl(name, default_permit=action is None or action.name == PERMIT)
        else:
            self._util_default = None if action is None else entry

    def _set_config(self, action: Action | None) -> None:
        q = self.pipeline.queue
        if action is None:
            with self.pipeline.lock:
                q.mode, q.threshold, q.congestion_threshold, q.cluster_quota, q.feedback = self._startup
            return
        p = action.params
        cfg = q.config
        fixed = {"frac_bits": cfg.frac_bits, "capacity": cfg.capacity,
                 "max_clusters": cfg.max_clusters, "max_blocks": cfg.max_blocks}
        for pname, have in fixed.items():
            if p[pname] != have:
                raise P4RuntimeError(Code.INVALID_ARGUMENT,
                                     f"{pname} is {have} on this switch (set when it started, olaf "
                                     f"switch --{pname.replace('_', '-')}); cannot change it to {p[pname]}")
        if p["mode"] not in tuple(Mode):
            raise P4RuntimeError(Code.INVALID_ARGUMENT,
                                 f"mode {p['mode']} is neither OLAF (0) nor FIFO (1)")
        if p["threshold"] > INT32_MAX:
            raise P4RuntimeError(Code.INVALID_ARGUMENT,
                                 "threshold must be 0..2**31-1 (raw fixed point, never negative)")
        try:
            quota = check_cluster_quota(p["cluster_quota"], cfg.capacity)
        except ValueError as e:
            raise P4RuntimeError(Code.INVALID_ARGUMENT, str(e)) from None
        try:
            feedback = check_feedback(p["feedback"])
        except ValueError as e:
            raise P4RuntimeError(Code.INVALID_ARGUMENT, str(e)) from None
        # Every check is above: a refused write changes nothing. Under the pipeline lock,
        # which the switch holds for a whole batch, the settings change between batches,
        # never inside one, so every UPDATE sees one quota and the counts stay exact.
        with self.pipeline.lock:
            q.mode = Mode(p["mode"])
            q.threshold = p["threshold"]
            q.congestion_threshold = p["congestion_threshold"]
            q.cluster_quota = quota
            q.feedback = feedback

    def _write_route(self, kind: int, key: Key, action: Action | None) -> None:
        _, addr, plen = key[0]
        prefix = f"{ipaddress.IPv4Address(addr)}/{plen}"
        table = self.switch.table
        with self.pipeline.lock:
            exists = any(p == prefix for p, _ in table.entries())
            if kind == Update.INSERT and exists:
                raise P4RuntimeError(Code.ALREADY_EXISTS, f"route {prefix} already exists")
            if kind != Update.INSERT and not exists:
                raise P4RuntimeError(Code.NOT_FOUND, f"no route {prefix}")
            if kind == Update.DELETE:
                table.delete(prefix)
                return
            assert action is not None
            if action.name != IPV4_FORWARD:
                raise P4RuntimeError(Code.UNIMPLEMENTED,
                                     f"the software switch's routes forward; {action.name} entries are not "
                                     "supported (unrouted traffic is dropped by default)")
            mac = action.params["dstAddr"]
            # dstAddr 0 is never a next hop: it reads back routes given without a MAC ("keep").
            mac_bytes = mac.to_bytes(6, "big") if mac else None
            write = table.insert if kind == Update.INSERT else table.modify
            write(prefix, action.params["port"], mac_bytes)

    def _write_drop_sim(self, kind: int, key: Key, action: Action | None) -> None:
        port = key[0][1]
        imp = self.switch.impairment
        drop = dict(imp.drop_prob)
        if kind == Update.INSERT and port in drop:
            raise P4RuntimeError(Code.ALREADY_EXISTS, f"drop_sim entry for port {port} already exists")
        if kind != Update.INSERT and port not in drop:
            raise P4RuntimeError(Code.NOT_FOUND, f"no drop_sim entry for port {port}")
        if kind == Update.DELETE:
            del drop[port]
        else:
            assert action is not None
            drop[port] = action.params["prob"] / PROB_ONE if action.name == SET_DROP_PROB else 0.0
        imp.drop_prob = drop

    def _configure_acl(self, name: str, rules: list[AclRule] | None = None,
                       default_permit: bool | None = None) -> None:
        """Replace one source table's rules and/or default (None keeps it); the other stays.

        Call with the pipeline lock not held; it is taken here, so a batch sees either the
        old table or the new one.
        """
        acl = self.pipeline.acl
        with self.pipeline.lock:
            tables = acl.tables()
            old_rules, old_default = tables[ACL_TABLES[name]]
            tables[ACL_TABLES[name]] = (old_rules if rules is None else rules,
                                        old_default if default_permit is None else default_permit)
            (updates, update_default), (pulls, pull_default) = tables["update_source"], tables["pull_source"]
            acl.configure(updates, pulls, update_default_permit=update_default,
                          pull_default_permit=pull_default)

    def _write_source_rule(self, name: str, kind: int, key: Key, action: Action | None) -> None:
        # update_source: (cluster exact, source lpm); pull_source: (source lpm).
        cluster = key[0][1] if name == UPDATE_SOURCE_TABLE else None
        _, addr, plen = key[-1]
        prefix = ipaddress.IPv4Network((addr, plen))
        with self.pipeline.lock:
            rules, _ = self.pipeline.acl.tables()[ACL_TABLES[name]]
        at = next((i for i, r in enumerate(rules) if r.prefix == prefix and r.cluster == cluster), None)
        what = f"{name} entry {'' if cluster is None else f'cluster {cluster}, '}{prefix}"
        if kind == Update.INSERT and at is not None:
            raise P4RuntimeError(Code.ALREADY_EXISTS, f"{what} already exists")
        if kind != Update.INSERT and at is None:
            raise P4RuntimeError(Code.NOT_FOUND, f"no {what}")
        if kind == Update.DELETE:
            assert at is not None
            del rules[at]
        else:
            assert action is not None
            rule = AclRule(prefix, action.name == PERMIT, cluster)
            if at is None:
                rules.append(rule)
            else:
                rules[at] = rule
        # Writes are serialized by the service's lock, so nothing changed the table since it was read.
        self._configure_acl(name, rules=rules)

    def _write_util(self, kind: int, key: Key, entry: p4runtime_pb2.TableEntry) -> None:
        k = repr(key).encode()
        if kind == Update.INSERT and k in self._util_entries:
            raise P4RuntimeError(Code.ALREADY_EXISTS, "util_lookup entry already exists")
        if kind != Update.INSERT and k not in self._util_entries:
            raise P4RuntimeError(Code.NOT_FOUND, "no such util_lookup entry")
        if kind == Update.DELETE:
            del self._util_entries[k]
        else:
            stored = p4runtime_pb2.TableEntry()
            stored.CopyFrom(entry)
            self._util_entries[k] = stored

    # -- counters ------------------------------------------------------------------------
    def _write_counter(self, schema: Schema, kind: int, entry: p4runtime_pb2.CounterEntry) -> None:
        counter = known(schema.counters, entry.counter_id, "counter")
        if kind != Update.MODIFY:
            raise P4RuntimeError(Code.INVALID_ARGUMENT, "counter entries can only be modified")
        if entry.data.byte_count:
            raise P4RuntimeError(Code.INVALID_ARGUMENT,
                                 f"{counter.preamble.name} counts packets only")
        indices = [index_of(entry, counter.size, counter.preamble.name)] if entry.HasField("index") \
            else list(range(counter.size))
        if entry.data.packet_count < 0:
            raise P4RuntimeError(Code.INVALID_ARGUMENT,
                                 f"{counter.preamble.name}: packet_count {entry.data.packet_count} is "
                                 "negative; a counter counts from 0")
        cells = counter_array(self.pipeline, counter.preamble.name)
        for i in indices:
            if i >= len(cells) and entry.data.packet_count:
                raise P4RuntimeError(Code.INVALID_ARGUMENT,
                                     f"{counter.preamble.name}[{i}] counts nothing here; it stays 0")
        with self.pipeline.lock:
            for i in indices:
                if i < len(cells):
                    cells[i] = entry.data.packet_count
