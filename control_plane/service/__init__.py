"""The software switch as a P4Runtime target (``olaf switch --p4runtime HOST:PORT``).

The same controller drives bmv2's ``simple_switch_grpc``, a Tofino's P4Runtime server and
this service, so P4Runtime is the only control interface. The service serves the OLAF
P4 program's objects by name (ids are resolved from whatever P4Info the controller
pushes) on top of a running switch:

==============================  ==============================================
P4Runtime object                software switch state
==============================  ==============================================
``olaf_config`` default entry   ``queue.mode``, ``.threshold``, ``.congestion_threshold``, ``.cluster_quota``,
                                ``.feedback``
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

One job per module; ``P4RuntimeService`` composes the RPCs, named as in the specification:

==================  ==========================================================================
module              what it holds
==================  ==========================================================================
``errors``          ``P4RuntimeError``, bounded messages, per-update errors in the status details
``arbitration``     ``Session``, ``Arbitration``: primary and backups by election id
``base``            ``SwitchLike``, ``ServiceState``: the switch, the pushed P4Info, the RPC-wide checks
``entities``        table keys, actions and indices of P4Runtime messages; the cells behind a counter
``pipeline``        Capabilities, Set/GetForwardingPipelineConfig
``write``           Write: routes, ``olaf_config``, ``drop_sim``, source ACLs, counter cells
``read``            Read: entries, counters, registers (hand-encoded wire bytes)
``stream``          StreamChannel: the arbitration coroutine of each controller
``server``          ``P4RuntimeService`` and ``P4RuntimeServer`` (``grpc.aio``)
==================  ==========================================================================
"""

from control_plane.service.arbitration import Arbitration, Session
from control_plane.service.base import ARBITRATION_TIMEOUT, MAX_OPEN_STREAMS, ServiceState, SwitchLike
from control_plane.service.errors import MAX_MESSAGE, MAX_STATUS_DETAILS, P4RuntimeError
from control_plane.service.server import P4RuntimeServer, P4RuntimeService
from control_plane.service.stream import MAX_OUTBOX

__all__ = [
    "ARBITRATION_TIMEOUT",
    "MAX_MESSAGE",
    "MAX_OPEN_STREAMS",
    "MAX_OUTBOX",
    "MAX_STATUS_DETAILS",
    "Arbitration",
    "P4RuntimeError",
    "P4RuntimeServer",
    "P4RuntimeService",
    "ServiceState",
    "Session",
    "SwitchLike",
]
