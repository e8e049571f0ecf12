"""The StreamChannel RPC: one coroutine per controller, where arbitration runs."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
from google.rpc import code_pb2
from p4.v1 import p4runtime_pb2

from control_plane.service.arbitration import Session, Terminate
from control_plane.service.base import ServiceState
from control_plane.service.errors import Code, P4RuntimeError

MAX_OUTBOX = 256
"""Messages queued for a client that does not read its stream before the stream is ended."""


class StreamChannelRpc(ServiceState):
    """StreamChannel: arbitration updates in, their notifications out; packet-out is refused."""

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
                return  # the stream is ending: its Terminate is queued, nothing more is
            if box.qsize() >= MAX_OUTBOX:
                overflowed = True
                box.put_nowait(Terminate(P4RuntimeError(
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
                if isinstance(item, Terminate):
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
                        session.post(Terminate(e))
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
        """End every stream (server shutdown)."""
        self.arbitration.close()
