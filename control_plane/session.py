"""The connection behind a ``Controller``: the P4Runtime session with one target, its
errors and its guards.

One job: reach the target (gRPC channel, arbitration stream, TLS), hold the session open
and closed, turn p4runtime-shell's errors into ``ControllerError``, and tell the
operations above whether they may read or write. What is read and written lives in
``controller.py`` (tables, pipeline, settings) and ``readings.py`` (counters, registers).

p4runtime-shell keeps its client and P4Info in module globals
(``p4runtime_sh.shell.client`` / ``.context``), which its entity classes (``TableEntry``,
``CounterEntry``) use. ``Controller`` owns them for its lifetime: it installs its client
when it opens, removes it when it closes, and refuses to open while another session holds
them in the same process.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Self

import grpc
from google.rpc import code_pb2
from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2
from p4runtime_sh import shell as sh
from p4runtime_sh.global_options import Options, global_options
from p4runtime_sh.p4runtime import P4RuntimeClient, P4RuntimeException, P4RuntimeWriteException, SSLOptions
from p4runtime_sh.utils import UserError

from control_plane.tls import ClientTls


class ControllerError(RuntimeError):
    """A failed P4Runtime operation, with the status code name the target gave."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


def _code_name(number: int) -> str:
    return code_pb2.Code.Name(number) if number in code_pb2.Code.values() else str(number)


@contextlib.contextmanager
def _p4rt_errors(what: str) -> Iterator[None]:
    """p4runtime-shell raises three kinds of errors; callers get one, with the code."""
    try:
        yield
    except P4RuntimeWriteException as e:
        first = e.errors[0][1] if e.errors else None
        if first is None:
            raise ControllerError("UNKNOWN", f"{what}: {e}") from None
        raise ControllerError(_code_name(first.canonical_code), f"{what}: {first.message}") from None
    except P4RuntimeException as e:
        err = e.grpc_error
        raise ControllerError(err.code().name, f"{what}: {err.details()}") from None
    except grpc.RpcError as e:
        raise ControllerError(e.code().name, f"{what}: {e.details()}") from None
    except UserError as e:
        raise ControllerError("INVALID_ARGUMENT", f"{what}: {e}") from None


class _Client(P4RuntimeClient):
    """p4runtime-shell's client, with a handshake that reports instead of exiting.

    The stock handshake calls ``sys.exit`` when no arbitration answer comes and prints to
    stdout when the client is a backup; a library must do neither.
    """

    def set_up_stream(self) -> None:
        # A listener that is not a gRPC server, or TLS settings the server does not accept,
        # never make the channel ready; the stream would then wait for gRPC's own connect
        # timeout (about 20 s) whatever the caller's timeout says.
        try:
            grpc.channel_ready_future(self.channel).result(timeout=self.connect_timeout)
        except grpc.FutureTimeoutError:
            self.channel.close()
            raise ConnectionError(f"no gRPC connection within {self.connect_timeout:g} s (not a P4Runtime "
                                  "server, or TLS settings that do not match the server's)") from None
        super().set_up_stream()

    def handshake(self) -> None:
        req = p4runtime_pb2.StreamMessageRequest()
        req.arbitration.device_id = self.device_id
        if self.election_id is not None:
            req.arbitration.election_id.high, req.arbitration.election_id.low = self.election_id
        self.stream_out_q.put(req)
        rep = self.get_stream_packet("arbitration", timeout=self.connect_timeout)
        if rep is None:
            reason = "no arbitration answer"
            with contextlib.suppress(Exception):
                if self.stream.done():
                    reason = f"{self.stream.code().name}: {self.stream.details()}"
            self.stream.cancel()  # else tear_down waits for a server that does not answer
            self.tear_down()
            raise ConnectionError(reason)
        self.arbitration = rep.arbitration

    def __init__(self, device_id: int, address: str, election_id: tuple[int, int] | None,
                 timeout: float, tls: ClientTls | None = None) -> None:
        self.connect_timeout = timeout
        self.arbitration: p4runtime_pb2.MasterArbitrationUpdate | None = None
        ssl_options = None
        if tls is not None:
            tls.credentials()  # checks the files first: TlsError names the one that is wrong
            ssl_options = SSLOptions(False, tls.ca, tls.cert, tls.key)
        super().__init__(device_id, address, election_id, ssl_options=ssl_options)


class Session:
    """The session part of a ``Controller``: where the target is, the open client, and the
    checks every operation makes first (open, pipeline pushed, allowed to write)."""

    def __init__(self, target: str, device_id: int = 1, election_id: tuple[int, int] | None = (1, 0),
                 timeout: float = 5.0, tls: ClientTls | None = None) -> None:
        self.target = target
        self.device_id = device_id
        self.election_id = election_id
        self.timeout = timeout
        self.tls = tls
        """TLS files (CA, and certificate and key for mutual TLS); None: plaintext."""
        self._client: _Client | None = None
        self._lock = threading.Lock()

    # -- lifetime -------------------------------------------------------------------
    def open(self) -> Self:
        if self._client is not None:
            return self
        if sh.client is not None:
            raise RuntimeError("another p4runtime-shell session is open in this process; close it first")
        self._client = sh.client = self._connect()
        # Entity objects print themselves as they are built unless told not to.
        global_options.set_option(Options.verbose, False)
        try:
            self._load_p4info()
        except Exception:
            self.close()
            raise
        return self

    def _connect(self) -> _Client:
        """The gRPC channel and arbitration stream: everything about how to reach the target."""
        try:
            return _Client(self.device_id, self.target, self.election_id, self.timeout, self.tls)
        except ConnectionError as e:
            raise ConnectionError(f"no P4Runtime session with {self.target} "
                                  f"(device {self.device_id}): {e}") from None

    def close(self) -> None:
        client, self._client = self._client, None
        if client is None:
            return
        if sh.client is client:
            sh.client = None
        client.tear_down()

    def __enter__(self) -> Self:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def client(self) -> _Client:
        if self._client is None:
            raise RuntimeError("the controller is not open")
        return self._client

    @property
    def is_primary(self) -> bool:
        """Whether the target last told this session it is the primary."""
        client = self.client
        while True:
            update = client.get_stream_packet("arbitration", timeout=0)
            if update is None:
                break
            client.arbitration = update.arbitration
        return self.election_id is not None and client.arbitration is not None \
            and client.arbitration.status.code == code_pb2.OK

    def _load_p4info(self) -> None:
        try:
            with _p4rt_errors("GetForwardingPipelineConfig"):
                p4info = self.client.get_p4info()
        except ControllerError as e:
            # bmv2 answers FAILED_PRECONDITION until a pipeline is pushed; the spec's
            # answer is an unset config. Either way: no pipeline yet.
            if e.code != "FAILED_PRECONDITION":
                raise
            p4info = p4info_pb2.P4Info()
        sh.context.set_p4info(p4info)

    @property
    def has_pipeline(self) -> bool:
        return sh.context.p4info is not None and len(sh.context.p4info.tables) > 0

    def _require_pipeline(self, write: bool = False) -> None:
        self.client  # noqa: B018 - raises when closed
        if write:
            self._require_writer()
        if not self.has_pipeline:
            raise ControllerError("FAILED_PRECONDITION", f"{self.target} has no pipeline: push one first")

    def _require_writer(self) -> None:
        if self.election_id is None:
            raise ControllerError("PERMISSION_DENIED", "read-only session (no election id): cannot write")
