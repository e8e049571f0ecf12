"""What every RPC of the service shares: the switch, the pushed pipeline, one lock, the RPC-wide checks."""

from __future__ import annotations

import threading
from typing import Any, Protocol, TypeVar

from p4.v1 import p4runtime_pb2

from control_plane.p4info import PULL_SOURCE_TABLE, UPDATE_SOURCE_TABLE, Schema
from control_plane.service.arbitration import Arbitration, election_id_of
from control_plane.service.errors import Code, P4RuntimeError
from dataplane.forwarding import ForwardingTable
from dataplane.impairment import Impairment
from dataplane.switch import Pipeline

PROB_ONE = 1 << 16
"""``drop_sim`` drops when ``random<bit<16>> < prob``: probability ``prob / 65536``."""
ARBITRATION_TIMEOUT = 10.0
"""Seconds a new StreamChannel may stay silent before it must have sent its arbitration."""
MAX_OPEN_STREAMS = 1024
"""StreamChannels open at once, arbitrated or not; each is a coroutine and a queue."""
P4Object = TypeVar("P4Object")
"""A table, counter or register of the pipeline's P4Info."""
ACL_TABLES = {UPDATE_SOURCE_TABLE: "update_source", PULL_SOURCE_TABLE: "pull_source"}
"""The source-check tables, by their key in ``SourceAcl.tables()``."""


class SwitchLike(Protocol):
    """What the service needs of a switch front end (``UdpSwitch``, ``EthernetSwitch``)."""

    pipeline: Pipeline
    impairment: Impairment
    table: ForwardingTable


def known(objects: dict[int, P4Object], object_id: int, kind: str) -> P4Object:
    """The P4 object of ``kind`` with ``object_id``; NOT_FOUND if the pipeline has none."""
    found = objects.get(object_id)
    if found is None:
        raise P4RuntimeError(Code.NOT_FOUND, f"no {kind} with id {object_id}")
    return found


def selected(objects: dict[int, P4Object], object_id: int, kind: str) -> list[P4Object]:
    """What a read of ``object_id`` covers: id 0 is P4Runtime's wildcard, every one of ``kind``."""
    return list(objects.values()) if object_id == 0 else [known(objects, object_id, kind)]


class ServiceState:
    """The state behind the RPCs that ``P4RuntimeService`` composes (one device, the default role).

    Every RPC mixin derives from this; the state is created here once, for all of them.
    """

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
        self._startup = (q.mode, q.threshold, q.congestion_threshold, q.cluster_quota, q.feedback)
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
        if not self.arbitration.is_primary(election_id_of(request)):
            raise P4RuntimeError(Code.PERMISSION_DENIED,
                                 "not the primary: open a StreamChannel and win arbitration, "
                                 "and send its election_id")

    def _require_pipeline(self) -> Schema:
        if self._schema is None:
            raise P4RuntimeError(Code.FAILED_PRECONDITION,
                                 "no forwarding pipeline config set: push the P4Info first")
        return self._schema
