"""``P4RuntimeService`` (the RPCs composed) and ``P4RuntimeServer``, which serves it with ``grpc.aio``."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc

from control_plane.service.base import ARBITRATION_TIMEOUT, MAX_OPEN_STREAMS, SwitchLike
from control_plane.service.pipeline import ForwardingPipelineRpcs
from control_plane.service.read import ReadRpc
from control_plane.service.stream import StreamChannelRpc
from control_plane.service.write import WriteRpc


class P4RuntimeService(ForwardingPipelineRpcs, WriteRpc, ReadRpc, StreamChannelRpc,
                       p4runtime_pb2_grpc.P4RuntimeServicer):
    """P4Runtime over one running software switch (one device, the default role).

    Each RPC is a mixin over the shared ``ServiceState``; they come before the generated
    servicer, whose methods answer UNIMPLEMENTED.
    """


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
