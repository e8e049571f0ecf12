"""The software switch as a P4Runtime target (``olaf switch --p4runtime HOST:PORT``).

The same controller drives bmv2's ``simple_switch_grpc``, a Tofino's P4Runtime server and
this service, so P4Runtime is the only control interface. The service serves the OLAF
P4 program's objects by name (ids are resolved from whatever P4Info the controller
pushes) on top of a running switch:

==============================  ==============================================
P4Runtime object                software switch state
==============================  ==============================================
``olaf_config`` default entry   ``queue.mode``, ``.threshold``, ``.congestion_threshold``
``ipv4_lpm`` entries            ``switch.table`` (``ForwardingTable``)
``drop_sim`` entries / default  ``switch.impairment.drop_prob[port]`` / ``[None]``
``update_source``/``pull_source``  ``pipeline.acl`` (``SourceAcl``): rules and defaults
``outcome_counter``             ``queue.counters.outcomes``
``msg_type_counter``            ``queue.counters.msg_types``
``refused_counter``             ``pipeline.acl.refused``
``reg_*`` registers (read)      queue state: occupancy, pointers, clusters, slots
==============================  ==============================================

Writes take effect on the next batch of packets: data-plane state is changed under
``pipeline.lock``, which the switch takes once per batch. Error codes follow the
P4Runtime specification (v1.4): arbitration in ``Arbitration``, per-update errors of a
Write (and per-entity errors of a Read) reported as ``UNKNOWN`` with one ``p4.v1.Error``
per update in the ``grpc-status-details-bin`` trailer.

The gRPC server is asyncio (``grpc.aio``) on a thread of its own: a StreamChannel is a
coroutine, not a worker thread, so idle or slow clients cannot take the threads that
Read, Write and new arbitrations need (a thread pool per stream is how 20 idle streams
starved the service before). The unary RPCs run one at a time on a small thread pool.
A stream that has not arbitrated within ``arbitration_timeout`` seconds is ended, the
open streams are bounded, and error messages and status details are bounded in size so
that a client can always read them (gRPC refuses metadata beyond 8 KiB). Security: it
listens where it is told (``olaf switch`` defaults to loopback) and speaks TLS, or
mutual TLS, with ``control_plane.tls.server_credentials``; see docs/security.md.
"""

from __future__ import annotations

import asyncio
import ipaddress
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import wraps
from importlib.metadata import PackageNotFoundError, version
from typing import Any, Protocol, TypeVar

import grpc
from google.rpc import code_pb2, status_pb2
from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc

from control_plane.p4info import (
    CONFIG_TABLE,
    DENY,
    DROP,
    DROP_SIM_TABLE,
    IPV4_FORWARD,
    LPM_TABLE,
    NO_ACTION,
    OUTCOME_COUNTER,
    PERMIT,
    PULL_SOURCE_TABLE,
    REFUSED_COUNTER,
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
    UPDATE_SOURCE_TABLE,
    UTIL_LOOKUP_TABLE,
    OutOfRange,
    PipelineRefused,
    Register,
    Schema,
    decode_uint,
    encode_int,
    encode_uint,
    slot_register_field,
)
from dataplane.acl import AclRule
from dataplane.forwarding import ForwardingTable
from dataplane.impairment import Impairment
from dataplane.switch import Pipeline
from worker_transport.protocol import INT32_MAX, Mode

Code = grpc.StatusCode
Update = p4runtime_pb2.Update
Key = tuple[tuple[int, int, int], ...]
"""A canonical table key: (field id, value, prefix length) per match field."""
PipelineAction = p4runtime_pb2.SetForwardingPipelineConfigRequest
MatchType = p4info_pb2.MatchField.MatchType
PROB_ONE = 1 << 16
"""``drop_sim`` drops when ``random<bit<16>> < prob``: probability ``prob / 65536``."""
MAX_MESSAGE = 300
"""Characters of an error message sent to a client: enough to say what is wrong, never the bad value whole."""
MAX_STATUS_DETAILS = 4096
"""Bytes of ``grpc-status-details-bin``: with the message, well inside gRPC's 8 KiB metadata limit."""
ARBITRATION_TIMEOUT = 10.0
"""Seconds a new StreamChannel may stay silent before it must have sent its arbitration."""
MAX_OPEN_STREAMS = 1024
"""StreamChannels open at once, arbitrated or not; each is a coroutine and a queue."""
MAX_OUTBOX = 256
"""Messages queued for a client that does not read its stream before the stream is ended."""
P4Object = TypeVar("P4Object")
"""A table, counter or register of the pipeline's P4Info."""
ACL_TABLES = {UPDATE_SOURCE_TABLE: "update_source", PULL_SOURCE_TABLE: "pull_source"}
"""The source-check tables, by their key in ``SourceAcl.tables()``."""


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


class SwitchLike(Protocol):
    """What the service needs of a switch front end (``UdpSwitch``, ``EthernetSwitch``)."""

    pipeline: Pipeline
    impairment: Impairment
    table: ForwardingTable


class P4RuntimeError(Exception):
    """An error with its P4Runtime status code; the message goes to the client."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        message = _bounded(message)
        super().__init__(message)
        self.code = code
        self.message = message

    def p4_error(self) -> p4runtime_pb2.Error:
        return p4runtime_pb2.Error(canonical_code=self.code.value[0], message=self.message)


def _known(objects: dict[int, P4Object], object_id: int, kind: str) -> P4Object:
    """The P4 object of ``kind`` with ``object_id``; NOT_FOUND if the pipeline has none."""
    found = objects.get(object_id)
    if found is None:
        raise P4RuntimeError(Code.NOT_FOUND, f"no {kind} with id {object_id}")
    return found


def _selected(objects: dict[int, P4Object], object_id: int, kind: str) -> list[P4Object]:
    """What a read of ``object_id`` covers: id 0 is P4Runtime's wildcard, every one of ``kind``."""
    return list(objects.values()) if object_id == 0 else [_known(objects, object_id, kind)]


def _bounded(message: str, limit: int = MAX_MESSAGE) -> str:
    """``message`` cut to ``limit`` characters, saying how long it was."""
    if len(message) <= limit:
        return message
    return f"{message[:limit - 40]}... ({len(message)} characters, cut)"


def _election_id(msg: Any) -> int | None:
    """A message's 128-bit election id, or None when unset (which is not the same as 0)."""
    if not msg.HasField("election_id"):
        return None
    return (msg.election_id.high << 64) | msg.election_id.low


@dataclass(eq=False)
class Session:
    """One StreamChannel: how to queue a message for it (from any thread) and what it announced.

    ``post(None)`` ends the stream, ``post(_Terminate(...))`` ends it with an error.
    """

    post: Callable[[object], None] = field(default=lambda item: None)
    joined: bool = False
    device_id: int = 0
    election_id: int | None = None


@dataclass(frozen=True)
class _Terminate:
    error: P4RuntimeError


class Arbitration:
    """Primary/backup election for one device and the default role (P4Runtime §5.3-5.4).

    The primary is the live client whose election id equals the highest the server has
    ever seen; every other client is a backup. A client without an election id never
    becomes primary.
    """

    def __init__(self, device_id: int, max_streams: int = 8) -> None:
        self.device_id = device_id
        self.max_streams = max_streams
        self._lock = threading.Lock()
        self._sessions: list[Session] = []
        self._primary: Session | None = None
        self._highest: int | None = None

    def update(self, session: Session, msg: p4runtime_pb2.MasterArbitrationUpdate) -> None:
        """Apply a MasterArbitrationUpdate; ``P4RuntimeError`` means: end the stream with it."""
        election = _election_id(msg)
        with self._lock:
            if msg.role.name or msg.role.id:
                raise P4RuntimeError(Code.UNIMPLEMENTED,
                                     "this target serves only the default role (leave role unset)")
            if not session.joined and msg.device_id != self.device_id:
                raise P4RuntimeError(Code.NOT_FOUND,
                                     f"unknown device_id {msg.device_id} (this is device {self.device_id})")
            if not session.joined and len(self._sessions) >= self.max_streams:
                raise P4RuntimeError(Code.RESOURCE_EXHAUSTED,
                                     f"this target serves at most {self.max_streams} controllers")
            if session.joined and msg.device_id != session.device_id:
                raise P4RuntimeError(Code.FAILED_PRECONDITION,
                                     "device_id differs from the one this stream arbitrated for")
            if election is not None and any(
                s is not session and s.election_id == election for s in self._sessions
            ):
                raise P4RuntimeError(Code.INVALID_ARGUMENT,
                                     f"election_id {election} is already used by another live controller")
            was_primary = self._primary is session
            if not session.joined:
                session.joined, session.device_id = True, msg.device_id
                self._sessions.append(session)
            session.election_id = election
            if election is not None and (self._highest is None or election >= self._highest):
                self._primary, self._highest = session, election
                # Backups first, then the new primary, as the spec orders the notifications.
                self._notify([s for s in self._sessions if s is not session] + [session])
            elif was_primary:
                self._primary = None
                self._notify(self._sessions)
            else:
                self._notify([session])

    def leave(self, session: Session) -> None:
        with self._lock:
            if session not in self._sessions:
                return
            self._sessions.remove(session)
            if self._primary is session:
                self._primary = None
                self._notify(self._sessions)

    def is_primary(self, election_id: int | None) -> bool:
        with self._lock:
            return self._primary is not None and election_id is not None and \
                self._primary.election_id == election_id

    def close(self) -> None:
        """End every stream (server shutdown)."""
        with self._lock:
            for s in self._sessions:
                s.post(None)

    def _notify(self, sessions: list[Session]) -> None:
        for s in sessions:
            rep = p4runtime_pb2.StreamMessageResponse()
            arb = rep.arbitration
            arb.device_id = self.device_id
            if self._highest is not None:
                arb.election_id.high, arb.election_id.low = self._highest >> 64, self._highest & (2**64 - 1)
            if s is self._primary:
                arb.status.code, arb.status.message = code_pb2.OK, "primary"
            elif self._primary is not None:
                arb.status.code, arb.status.message = code_pb2.ALREADY_EXISTS, "backup; a primary exists"
            else:
                arb.status.code, arb.status.message = code_pb2.NOT_FOUND, "backup; no primary"
            s.post(rep)


class _BatchFailed(Exception):
    def __init__(self, what: str, errors: list[p4runtime_pb2.Error]) -> None:
        super().__init__(what)
        self.what, self.errors = what, errors


def _unary(method: Callable) -> Callable:
    """Turn ``P4RuntimeError`` (and any bug) into a gRPC status instead of a crash."""

    @wraps(method)
    def handle(self: P4RuntimeService, request: Any, context: grpc.ServicerContext) -> Any:
        try:
            return method(self, request, context)
        except P4RuntimeError as e:
            context.abort(e.code, e.message)
        except _BatchFailed as e:
            _abort_with_errors(context, e.what, e.errors)
        except Exception as e:  # noqa: BLE001 - a malformed request must not take the switch down
            context.abort(Code.INTERNAL, _bounded(f"{type(e).__name__}: {e}"))

    return handle


def _abort_with_errors(context: grpc.ServicerContext, what: str, errors: list[p4runtime_pb2.Error]) -> None:
    """UNKNOWN with one ``p4.v1.Error`` per update/entity, as P4Runtime reports batches.

    The details must fit gRPC's metadata limit or the client gets nothing readable: past
    ``MAX_STATUS_DETAILS`` the messages after the first failure are dropped (codes kept),
    and past it even then the details are left out and the message says so.
    """
    first = next(e for e in errors if e.canonical_code != code_pb2.OK)
    code_name = next(c.name for c in grpc.StatusCode if c.value[0] == first.canonical_code)
    failed = sum(e.canonical_code != code_pb2.OK for e in errors)
    message = f"{what} failure: {code_name}: {first.message}"
    if failed > 1:
        message += f" (and {failed - 1} more of {len(errors)})"

    def status_of(entries: list[p4runtime_pb2.Error]) -> status_pb2.Status:
        status = status_pb2.Status(code=code_pb2.UNKNOWN, message=message)
        for e in entries:
            status.details.add().Pack(e)
        return status

    status = status_of(errors)
    if status.ByteSize() > MAX_STATUS_DETAILS:
        status = status_of([e if e is first else p4runtime_pb2.Error(canonical_code=e.canonical_code)
                            for e in errors])
    if status.ByteSize() > MAX_STATUS_DETAILS:
        message += f"; per-{'update' if what == 'Write' else 'entity'} details left out: too many to send"
        context.abort(Code.UNKNOWN, message)
    context.set_trailing_metadata((("grpc-status-details-bin", status.SerializeToString()),))
    context.abort(Code.UNKNOWN, message)


@dataclass(frozen=True)
class _Action:
    name: str
    params: dict[str, int]


class P4RuntimeService(p4runtime_pb2_grpc.P4RuntimeServicer):
    """P4Runtime over one running software switch (one device, the default role)."""

    def __init__(self, switch: SwitchLike, device_id: int = 1, max_streams: int = 8,
                 arbitration_timeout: float = ARBITRATION_TIMEOUT, max_open_streams: int = MAX_OPEN_STREAMS
                 ) -> None:
        self.switch = switch
        self.device_id = device_id
        self.arbitration = Arbitration(device_id, max_streams)
        self.arbitration_timeout = arbitration_timeout
        self.max_open_streams = max_open_streams
        self._open_streams = 0  # changed on the event loop's thread only
        # One request at a time: the spec's strict serializability, trivially.
        self._lock = threading.RLock()
        self._schema: Schema | None = None
        self._config: p4runtime_pb2.ForwardingPipelineConfig | None = None
        self._saved = False
        q = switch.pipeline.queue
        self._startup = (q.mode, q.threshold, q.congestion_threshold)
        # What `olaf switch --cluster-source/--ps-source` closed stays closed when a controller
        # pushes a pipeline: a fresh pipeline starts from these, not from empty (open) tables.
        self._startup_acl = switch.pipeline.acl.tables()
        # util_lookup exists only where P4 cannot divide; the switch divides, so its entries
        # are only stored for read-back, keyed by their canonical match.
        self._util_entries: dict[bytes, p4runtime_pb2.TableEntry] = {}
        self._util_default: p4runtime_pb2.TableEntry | None = None

    @property
    def pipeline(self) -> Pipeline:
        return self.switch.pipeline

    # -- RPC-wide checks -------------------------------------------------------------
    def _check_device(self, device_id: int, role: str = "") -> None:
        if device_id != self.device_id:
            raise P4RuntimeError(Code.NOT_FOUND,
                                 f"unknown device_id {device_id} (this is device {self.device_id})")
        if role:
            raise P4RuntimeError(Code.NOT_FOUND, f"unknown role {role!r}; only the default role")

    def _check_primary(self, request: Any) -> None:
        if not self.arbitration.is_primary(_election_id(request)):
            raise P4RuntimeError(Code.PERMISSION_DENIED,
                                 "not the primary: open a StreamChannel and win arbitration, "
                                 "and send its election_id")

    def _require_pipeline(self) -> Schema:
        if self._schema is None:
            raise P4RuntimeError(Code.FAILED_PRECONDITION,
                                 "no forwarding pipeline config set: push the P4Info first")
        return self._schema

    # -- Capabilities, pipeline ------------------------------------------------------
    @_unary
    def Capabilities(self, request: p4runtime_pb2.CapabilitiesRequest, context: grpc.ServicerContext
                     ) -> p4runtime_pb2.CapabilitiesResponse:
        try:
            api = version("p4runtime")
        except PackageNotFoundError:
            api = "1.4.1"
        return p4runtime_pb2.CapabilitiesResponse(p4runtime_api_version=api)

    @_unary
    def SetForwardingPipelineConfig(self, request: PipelineAction, context: grpc.ServicerContext
                                    ) -> p4runtime_pb2.SetForwardingPipelineConfigResponse:
        self._check_device(request.device_id, request.role)
        self._check_primary(request)
        action = request.action
        with self._lock:
            if action == PipelineAction.COMMIT:
                if request.HasField("config"):
                    raise P4RuntimeError(Code.INVALID_ARGUMENT, "COMMIT takes no config")
                if not self._saved:
                    raise P4RuntimeError(Code.NOT_FOUND, "no saved config (VERIFY_AND_SAVE first)")
                # Writes since the save already went to the data plane: nothing to replay.
                self._saved = False
                return p4runtime_pb2.SetForwardingPipelineConfigResponse()
            if action not in (PipelineAction.VERIFY, PipelineAction.VERIFY_AND_SAVE,
                              PipelineAction.VERIFY_AND_COMMIT, PipelineAction.RECONCILE_AND_COMMIT):
                raise P4RuntimeError(Code.INVALID_ARGUMENT, f"unsupported action {action}")
            if not request.HasField("config") or not request.config.HasField("p4info"):
                raise P4RuntimeError(Code.INVALID_ARGUMENT, "config with a p4info is required")
            try:
                schema = Schema(request.config.p4info, self.pipeline.queue.config)
            except PipelineRefused as e:
                raise P4RuntimeError(Code.INVALID_ARGUMENT, str(e)) from None
            if action == PipelineAction.VERIFY:
                return p4runtime_pb2.SetForwardingPipelineConfigResponse()
            self._schema = schema
            self._config = p4runtime_pb2.ForwardingPipelineConfig()
            self._config.CopyFrom(request.config)
            self._saved = action == PipelineAction.VERIFY_AND_SAVE
            if action == PipelineAction.VERIFY_AND_COMMIT:
                self._clear_forwarding_state()
        return p4runtime_pb2.SetForwardingPipelineConfigResponse()

    def _clear_forwarding_state(self) -> None:
        """What a fresh pipeline starts with: no routes, no drops, the startup config."""
        sw = self.switch
        with self.pipeline.lock:
            for prefix, _ in sw.table.entries():
                sw.table.delete(prefix)
            sw.impairment.drop_prob = {}
            q = self.pipeline.queue
            q.mode, q.threshold, q.congestion_threshold = self._startup
            (updates, update_default), (pulls, pull_default) = (
                self._startup_acl["update_source"], self._startup_acl["pull_source"])
            self.pipeline.acl.configure(updates, pulls, update_default_permit=update_default,
                                        pull_default_permit=pull_default)
        self._util_entries.clear()
        self._util_default = None

    @_unary
    def GetForwardingPipelineConfig(self, request: p4runtime_pb2.GetForwardingPipelineConfigRequest,
                                    context: grpc.ServicerContext
                                    ) -> p4runtime_pb2.GetForwardingPipelineConfigResponse:
        self._check_device(request.device_id)
        rep = p4runtime_pb2.GetForwardingPipelineConfigResponse()
        with self._lock:
            if self._config is None:
                return rep  # config unset: no pipeline yet (spec §13)
            kind = request.response_type
            Req = p4runtime_pb2.GetForwardingPipelineConfigRequest
            if self._config.HasField("cookie"):
                rep.config.cookie.CopyFrom(self._config.cookie)
            if kind in (Req.ALL, Req.P4INFO_AND_COOKIE):
                rep.config.p4info.CopyFrom(self._config.p4info)
            if kind in (Req.ALL, Req.DEVICE_CONFIG_AND_COOKIE):
                rep.config.p4_device_config = self._config.p4_device_config
            if kind == Req.COOKIE_ONLY and not self._config.HasField("cookie"):
                rep.config.SetInParent()
        return rep

    # -- Write -----------------------------------------------------------------------
    @_unary
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
            raise _BatchFailed("Write", errors)
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
            _known(schema.registers, update.entity.register_entry.register_id, "register")
            raise P4RuntimeError(Code.UNIMPLEMENTED,
                                 "registers hold the queue state, which only the data plane writes; "
                                 "they are read-only on this target")
        elif kind is None:
            raise P4RuntimeError(Code.INVALID_ARGUMENT, "update has no entity")
        else:
            raise P4RuntimeError(Code.UNIMPLEMENTED, f"{kind} is not supported by the software switch")

    def _write_table(self, schema: Schema, kind: int, entry: p4runtime_pb2.TableEntry) -> None:
        table = _known(schema.tables, entry.table_id, "table")
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
            self._write_default(table, self._action(schema, table, entry, default=True), entry)
            return
        if not table.match_fields:
            raise P4RuntimeError(Code.INVALID_ARGUMENT,
                                 f"table {name} has no key: write its default entry (is_default_action)")
        if entry.priority:
            raise P4RuntimeError(Code.INVALID_ARGUMENT,
                                 f"priority must be 0: table {name} has no ternary, range or optional key")
        key = self._match(table, entry.match)
        action = None if kind == Update.DELETE else self._action(schema, table, entry, default=False)
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

    def _action(self, schema: Schema, table: p4info_pb2.Table, entry: p4runtime_pb2.TableEntry,
                default: bool) -> _Action | None:
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
        return _Action(schema.name(a.action_id), values)

    def _match(self, table: p4info_pb2.Table, matches: Any) -> Key:
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

    # -- the tables --------------------------------------------------------------------
    def _write_default(self, table: p4info_pb2.Table, action: _Action | None,
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

    def _set_config(self, action: _Action | None) -> None:
        q = self.pipeline.queue
        if action is None:
            with self.pipeline.lock:
                q.mode, q.threshold, q.congestion_threshold = self._startup
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
        with self.pipeline.lock:
            q.mode = Mode(p["mode"])
            q.threshold = p["threshold"]
            q.congestion_threshold = p["congestion_threshold"]

    def _write_route(self, kind: int, key: Key, action: _Action | None) -> None:
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

    def _write_drop_sim(self, kind: int, key: Key, action: _Action | None) -> None:
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

    def _write_source_rule(self, name: str, kind: int, key: Key, action: _Action | None) -> None:
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
    def _counter_array(self, name: str) -> Any:
        """The switch's cells behind a counter (a list or an array, written in place)."""
        if name == REFUSED_COUNTER:
            return self.pipeline.acl.refused
        c = self.pipeline.queue.counters
        return c.outcomes if name == OUTCOME_COUNTER else c.msg_types

    def _counter_cells(self, name: str, size: int) -> list[int]:
        cells = [int(n) for n in self._counter_array(name)]
        return (cells + [0] * size)[:size]

    def _write_counter(self, schema: Schema, kind: int, entry: p4runtime_pb2.CounterEntry) -> None:
        counter = _known(schema.counters, entry.counter_id, "counter")
        if kind != Update.MODIFY:
            raise P4RuntimeError(Code.INVALID_ARGUMENT, "counter entries can only be modified")
        if entry.data.byte_count:
            raise P4RuntimeError(Code.INVALID_ARGUMENT,
                                 f"{counter.preamble.name} counts packets only")
        indices = [self._index(entry, counter.size, counter.preamble.name)] if entry.HasField("index") \
            else list(range(counter.size))
        if entry.data.packet_count < 0:
            raise P4RuntimeError(Code.INVALID_ARGUMENT,
                                 f"{counter.preamble.name}: packet_count {entry.data.packet_count} is "
                                 "negative; a counter counts from 0")
        cells = self._counter_array(counter.preamble.name)
        for i in indices:
            if i >= len(cells) and entry.data.packet_count:
                raise P4RuntimeError(Code.INVALID_ARGUMENT,
                                     f"{counter.preamble.name}[{i}] counts nothing here; it stays 0")
        with self.pipeline.lock:
            for i in indices:
                if i < len(cells):
                    cells[i] = entry.data.packet_count

    @staticmethod
    def _index(entry: Any, size: int, name: str) -> int:
        i = entry.index.index
        if i < 0:
            raise P4RuntimeError(Code.INVALID_ARGUMENT, f"{name}: negative index {i}")
        if i >= size:
            raise P4RuntimeError(Code.OUT_OF_RANGE, f"{name}: index {i} is beyond its {size} cells")
        return i

    # -- Read ------------------------------------------------------------------------------
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
            context.abort(Code.INTERNAL, _bounded(f"{type(e).__name__}: {e}"))
        for start in range(0, len(entities), 1000):
            yield _read_response(entities[start:start + 1000])
        if any(e.canonical_code != code_pb2.OK for e in errors):
            _abort_with_errors(context, "Read", errors)

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
        tables = _selected(schema.tables, query.table_id, "table")
        out = []
        for table in tables:
            if query.is_default_action:
                out.append(self._default_entry(schema, table))
                continue
            entries = self._entries(schema, table)
            if len(query.match):
                want = self._match(table, query.match)
                entries = [e for e in entries if self._match(table, e.match) == want]
            out.extend(entries)
        return out

    @staticmethod
    def _action_msg(schema: Schema, entry: p4runtime_pb2.TableEntry, name: str, **params: int) -> None:
        action = entry.action.action
        action.action_id = schema.id(name)
        for pid, (pname, width) in sorted(schema.params(action.action_id).items()):
            action.params.add(param_id=pid, value=encode_uint(params[pname], width))

    def _default_entry(self, schema: Schema, table: p4info_pb2.Table) -> p4runtime_pb2.TableEntry:
        entry = p4runtime_pb2.TableEntry(table_id=table.preamble.id, is_default_action=True)
        name = table.preamble.name
        if name == CONFIG_TABLE:
            q = self.pipeline.queue
            cfg = q.config
            with self.pipeline.lock:
                mode, threshold, congestion = int(q.mode), q.threshold, q.congestion_threshold
            self._action_msg(schema, entry, SET_CONFIG, mode=mode, threshold=threshold,
                             congestion_threshold=congestion, frac_bits=cfg.frac_bits, capacity=cfg.capacity,
                             max_clusters=cfg.max_clusters, max_blocks=cfg.max_blocks)
        elif name == DROP_SIM_TABLE and None in self.switch.impairment.drop_prob:
            prob = self.switch.impairment.drop_prob[None]
            self._action_msg(schema, entry, SET_DROP_PROB, prob=min(round(prob * PROB_ONE), PROB_ONE - 1))
        elif name == DROP_SIM_TABLE and schema.has(NO_ACTION):
            self._action_msg(schema, entry, NO_ACTION)
        elif name in ACL_TABLES:
            with self.pipeline.lock:
                _, default_permit = self.pipeline.acl.tables()[ACL_TABLES[name]]
            self._action_msg(schema, entry, PERMIT if default_permit else DENY)
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
                self._action_msg(schema, entry, IPV4_FORWARD, dstAddr=mac, port=route.port)
                out.append(entry)
        elif name == DROP_SIM_TABLE:
            drop = self.switch.impairment.drop_prob
            for port, prob in sorted((p, v) for p, v in drop.items() if p is not None):
                if not 0 <= port < 512:
                    continue  # not expressible as bit<9>; an emulation-only setting
                entry = p4runtime_pb2.TableEntry(table_id=table.preamble.id)
                entry.match.add(field_id=table.match_fields[0].id).exact.value = encode_uint(port, 9)
                self._action_msg(schema, entry, SET_DROP_PROB, prob=min(round(prob * PROB_ONE), PROB_ONE - 1))
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
                self._action_msg(schema, entry, PERMIT if rule.permit else DENY)
                out.append(entry)
        elif name == UTIL_LOOKUP_TABLE:
            out = list(self._util_entries.values())
        return out

    def _read_counters(self, schema: Schema, query: p4runtime_pb2.CounterEntry
                       ) -> list[p4runtime_pb2.CounterEntry]:
        counters = _selected(schema.counters, query.counter_id, "counter")
        out = []
        for counter in counters:
            name = counter.preamble.name
            with self.pipeline.lock:
                cells = self._counter_cells(name, counter.size)
            indices = [self._index(query, counter.size, name)] if query.HasField("index") \
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
        registers = _selected(schema.registers, query.register_id, "register")
        out = []
        for reg in registers:
            index = self._index(query, reg.size, reg.name) if query.HasField("index") else None
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

    # -- StreamChannel -------------------------------------------------------------------
    async def stream_channel(self, requests: AsyncIterator[p4runtime_pb2.StreamMessageRequest],
                             context: grpc.aio.ServicerContext) -> None:
        """One controller's stream, as a coroutine on the server's event loop.

        Arbitration runs here, on the loop's thread; notifications for this stream may be
        posted from any thread (``Arbitration.close`` at shutdown) and arrive in ``box``.
        """
        if self._open_streams >= self.max_open_streams:
            await context.abort(Code.RESOURCE_EXHAUSTED,
                                f"this target keeps at most {self.max_open_streams} streams open")
        self._open_streams += 1
        loop = asyncio.get_running_loop()
        box: asyncio.Queue = asyncio.Queue()

        overflowed = False

        def deliver(item: object) -> None:
            nonlocal overflowed
            if overflowed:
                return  # the stream is ending: its _Terminate is queued, nothing more is
            if box.qsize() >= MAX_OUTBOX:
                overflowed = True
                box.put_nowait(_Terminate(P4RuntimeError(
                    Code.RESOURCE_EXHAUSTED, f"more than {MAX_OUTBOX} messages unread on this stream")))
            else:
                box.put_nowait(item)

        session = Session(post=lambda item: loop.call_soon_threadsafe(deliver, item))
        reader = asyncio.ensure_future(self._read_stream(requests, session))
        deadline = loop.time() + self.arbitration_timeout
        try:
            while True:
                if session.joined:
                    item = await box.get()
                else:
                    try:
                        item = await asyncio.wait_for(box.get(), max(0.0, deadline - loop.time()))
                    except TimeoutError:
                        if session.joined:
                            continue
                        await context.abort(Code.DEADLINE_EXCEEDED, "no MasterArbitrationUpdate within "
                                            f"{self.arbitration_timeout:g} s of opening the stream")
                if item is None:
                    return
                if isinstance(item, _Terminate):
                    await context.abort(item.error.code, item.error.message)
                await context.write(item)
        finally:
            reader.cancel()
            self.arbitration.leave(session)
            self._open_streams -= 1

    async def _read_stream(self, requests: AsyncIterator[p4runtime_pb2.StreamMessageRequest],
                           session: Session) -> None:
        try:
            async for req in requests:
                kind = req.WhichOneof("update")
                if kind == "arbitration":
                    try:
                        self.arbitration.update(session, req.arbitration)
                    except P4RuntimeError as e:
                        session.post(_Terminate(e))
                        return
                elif kind == "packet":
                    rep = p4runtime_pb2.StreamMessageResponse()
                    rep.error.canonical_code = code_pb2.UNIMPLEMENTED
                    rep.error.message = "the software switch has no CPU port: packet-out is not supported"
                    rep.error.packet_out.packet_out.CopyFrom(req.packet)
                    session.post(rep)
        except (grpc.RpcError, grpc.aio.AioRpcError, asyncio.InvalidStateError):
            pass  # the client went away
        session.post(None)

    def close(self) -> None:
        self.arbitration.close()


class _Abort(Exception):
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.code, self.details = code, details


class _CallContext:
    """What the synchronous handlers use of a gRPC context, recorded for the event loop to replay.

    They run on the thread pool, where the asyncio context's coroutines cannot be awaited.
    """

    def __init__(self) -> None:
        self.trailing: tuple[tuple[str, bytes], ...] = ()

    def set_trailing_metadata(self, metadata: tuple[tuple[str, bytes], ...]) -> None:
        self.trailing = tuple(metadata)

    def abort(self, code: grpc.StatusCode, details: str) -> None:
        raise _Abort(code, details)


def _handlers(service: P4RuntimeService, pool: ThreadPoolExecutor) -> grpc.GenericRpcHandler:
    """asyncio handlers: unary RPCs on ``pool``, StreamChannel on the loop; Read sends bytes as they are."""
    pb = p4runtime_pb2

    async def replay(context: grpc.aio.ServicerContext, call: _CallContext, abort: _Abort) -> None:
        await context.abort(abort.code, abort.details, call.trailing)

    def unary(method: Callable, request: Any, response: Any) -> grpc.RpcMethodHandler:
        async def handle(req: Any, context: grpc.aio.ServicerContext) -> Any:
            call = _CallContext()
            try:
                return await asyncio.get_running_loop().run_in_executor(pool, method, req, call)
            except _Abort as abort:
                await replay(context, call, abort)

        return grpc.unary_unary_rpc_method_handler(handle, request_deserializer=request.FromString,
                                                   response_serializer=response.SerializeToString)

    def read_all(request: pb.ReadRequest, call: _CallContext) -> tuple[list[bytes], _Abort | None]:
        chunks: list[bytes] = []
        try:
            chunks.extend(service.Read(request, call))  # type: ignore[arg-type]
        except _Abort as abort:
            return chunks, abort
        return chunks, None

    async def read(request: pb.ReadRequest, context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
        call = _CallContext()
        chunks, abort = await asyncio.get_running_loop().run_in_executor(pool, read_all, request, call)
        for chunk in chunks:
            yield chunk
        if abort is not None:
            await replay(context, call, abort)

    return grpc.method_handlers_generic_handler("p4.v1.P4Runtime", {
        "Write": unary(service.Write, pb.WriteRequest, pb.WriteResponse),
        "Read": grpc.unary_stream_rpc_method_handler(
            read, request_deserializer=pb.ReadRequest.FromString,
            response_serializer=lambda m: m if isinstance(m, bytes) else m.SerializeToString()),
        "SetForwardingPipelineConfig": unary(service.SetForwardingPipelineConfig,
                                             pb.SetForwardingPipelineConfigRequest,
                                             pb.SetForwardingPipelineConfigResponse),
        "GetForwardingPipelineConfig": unary(service.GetForwardingPipelineConfig,
                                             pb.GetForwardingPipelineConfigRequest,
                                             pb.GetForwardingPipelineConfigResponse),
        "StreamChannel": grpc.stream_stream_rpc_method_handler(
            service.stream_channel, request_deserializer=pb.StreamMessageRequest.FromString,
            response_serializer=pb.StreamMessageResponse.SerializeToString),
        "Capabilities": unary(service.Capabilities, pb.CapabilitiesRequest, pb.CapabilitiesResponse),
    })


class P4RuntimeServer:
    """A gRPC server with the P4Runtime service of one software switch, for its lifetime.

    ``credentials`` (``control_plane.tls.server_credentials``) makes it TLS, or mutual
    TLS; without them it is plaintext, for loopback and trusted management networks.
    """

    def __init__(self, switch: SwitchLike, address: str = "127.0.0.1:9559", device_id: int = 1,
                 max_streams: int = 8, *, credentials: grpc.ServerCredentials | None = None,
                 arbitration_timeout: float = ARBITRATION_TIMEOUT,
                 max_open_streams: int = MAX_OPEN_STREAMS) -> None:
        self.service = P4RuntimeService(switch, device_id, max_streams, arbitration_timeout, max_open_streams)
        self.tls = credentials is not None
        # Unary RPCs are serialized by the service's lock: more threads would only wait.
        self._workers = ThreadPoolExecutor(4, thread_name_prefix="olaf-p4rt")
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="olaf-p4rt-loop", daemon=True)
        self._thread.start()
        self._server: grpc.aio.Server | None = None
        try:
            port = self._on_loop(self._bind(address, credentials))
        except BaseException:
            self._close_loop()
            raise
        self.address = f"{address.rpartition(':')[0]}:{port}"
        self.port = port

    async def _bind(self, address: str, credentials: grpc.ServerCredentials | None) -> int:
        # No SO_REUSEPORT: a second server on a taken port must fail, not share it silently.
        server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
        server.add_generic_rpc_handlers((_handlers(self.service, self._workers),))
        try:
            port = server.add_secure_port(address, credentials) if credentials is not None \
                else server.add_insecure_port(address)
        except RuntimeError as e:
            port, reason = 0, f": {e}"
        else:
            reason = ""
        if port == 0:
            raise OSError(f"cannot listen for P4Runtime on {address}{reason}")
        self._server = server
        return port

    def _on_loop(self, coroutine: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    def _close_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()
        self._workers.shutdown(wait=True)

    def start(self) -> P4RuntimeServer:
        assert self._server is not None
        self._on_loop(self._server.start())
        return self

    def stop(self, grace: float = 1.0) -> None:
        if self._loop.is_closed():
            return
        self.service.close()
        if self._server is not None:
            self._on_loop(self._server.stop(grace))
        self._close_loop()

    def __enter__(self) -> P4RuntimeServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
