"""Primary/backup arbitration (P4Runtime §5): the StreamChannels' sessions and their election ids."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from google.rpc import code_pb2
from p4.v1 import p4runtime_pb2

from control_plane.service.errors import Code, P4RuntimeError


def election_id_of(msg: Any) -> int | None:
    """A message's 128-bit election id, or None when unset (which is not the same as 0)."""
    if not msg.HasField("election_id"):
        return None
    return (msg.election_id.high << 64) | msg.election_id.low


@dataclass(eq=False)


class Session:
    """One StreamChannel: how to queue a message for it (from any thread) and what it announced.

    ``post(None)`` ends the stream, ``post(Terminate(...))`` ends it with an error.
    """

    post: Callable[[object], None] = field(default=lambda item: None)
    joined: bool = False
    device_id: int = 0
    election_id: int | None = None


@dataclass(frozen=True)


class Terminate:
    """Posted to a session: end its stream with ``error``."""

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
        election = election_id_of(msg)
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
