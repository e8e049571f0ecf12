"""P4Runtime errors as the service reports them to a client.

An RPC fails with one status (``P4RuntimeError``); a Write or Read whose updates or
entities fail is ``UNKNOWN`` with one ``p4.v1.Error`` each in ``grpc-status-details-bin``
(``abort_with_errors``). Messages and details are bounded in size so that a client can
always read them: gRPC refuses metadata beyond 8 KiB.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import TYPE_CHECKING, Any

import grpc
from google.rpc import code_pb2, status_pb2
from p4.v1 import p4runtime_pb2

if TYPE_CHECKING:
    from control_plane.service.base import ServiceState

Code = grpc.StatusCode
MAX_MESSAGE = 300
"""Characters of an error message sent to a client: enough to say what is wrong, never the bad value whole."""
MAX_STATUS_DETAILS = 4096
"""Bytes of ``grpc-status-details-bin``: with the message, well inside gRPC's 8 KiB metadata limit."""


class P4RuntimeError(Exception):
    """An error with its P4Runtime status code; the message goes to the client."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        message = bounded(message)
        super().__init__(message)
        self.code = code
        self.message = message

    def p4_error(self) -> p4runtime_pb2.Error:
        return p4runtime_pb2.Error(canonical_code=self.code.value[0], message=self.message)


def bounded(message: str, limit: int = MAX_MESSAGE) -> str:
    """``message`` cut to ``limit`` characters, saying how long it was."""
    if len(message) <= limit:
        return message
    return f"{message[:limit - 40]}... ({len(message)} characters, cut)"


class BatchFailed(Exception):
    """Updates of a Write (entities of a Read) failed: ``unary`` reports them with ``abort_with_errors``."""

    def __init__(self, what: str, errors: list[p4runtime_pb2.Error]) -> None:
        super().__init__(what)
        self.what, self.errors = what, errors


def unary(method: Callable) -> Callable:
    """Turn ``P4RuntimeError`` (and any bug) into a gRPC status instead of a crash."""

    @wraps(method)
    def handle(self: ServiceState, request: Any, context: grpc.ServicerContext) -> Any:
        try:
            return method(self, request, context)
        except P4RuntimeError as e:
            context.abort(e.code, e.message)
        except BatchFailed as e:
            abort_with_errors(context, e.what, e.errors)
        except Exception as e:  # noqa: BLE001 - a malformed request must not take the switch down
            context.abort(Code.INTERNAL, bounded(f"{type(e).__name__}: {e}"))

    return handle


def abort_with_errors(context: grpc.ServicerContext, what: str, errors: list[p4runtime_pb2.Error]) -> None:
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

