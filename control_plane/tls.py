"""TLS for P4Runtime: gRPC credentials from PEM files, checked before gRPC sees them.

gRPC accepts any bytes as a certificate and fails later, at the first handshake, with
a message that names no file. Here each file is read and parsed with the standard
library's ``ssl`` first, so a missing, unreadable or mismatched file is a one-line
error that names it (the CLIs turn ``TlsError`` into exit 2). The options follow
``simple_switch_grpc`` and p4runtime-shell: a certificate and key for the server (and
a CA for client certificates: mutual TLS), a CA, certificate and key for the client.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path

import grpc


class TlsError(ValueError):
    """A TLS file that cannot be used; the message names it."""


def _read(path: str | Path, what: str) -> bytes:
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise TlsError(f"{what} {path}: {e.strerror or e}") from None
    if b"-----BEGIN " not in data:
        raise TlsError(f"{what} {path}: not a PEM file")
    return data


def _check_pair(cert: str | Path, key: str | Path, who: str) -> None:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER if who == "server" else ssl.PROTOCOL_TLS_CLIENT)
    try:
        context.load_cert_chain(str(cert), str(key))
    except (ssl.SSLError, OSError) as e:
        raise TlsError(f"{who} certificate {cert} and key {key} do not make a pair: "
                       f"{getattr(e, 'reason', None) or e}") from None


def _check_ca(ca: str | Path, what: str) -> None:
    try:
        ssl.create_default_context(cafile=str(ca))
    except (ssl.SSLError, OSError) as e:
        raise TlsError(f"{what} {ca}: {getattr(e, 'reason', None) or e}") from None


def server_credentials(cert: str | Path, key: str | Path,
                       client_ca: str | Path | None = None) -> grpc.ServerCredentials:
    """TLS with this certificate; with ``client_ca``, every client must present a certificate it signed."""
    cert_pem, key_pem = _read(cert, "TLS certificate"), _read(key, "TLS key")
    _check_pair(cert, key, "server")
    ca_pem = None
    if client_ca is not None:
        ca_pem = _read(client_ca, "client CA")
        _check_ca(client_ca, "client CA")
    return grpc.ssl_server_credentials([(key_pem, cert_pem)], root_certificates=ca_pem,
                                       require_client_auth=ca_pem is not None)


def channel_credentials(ca: str | Path | None = None, cert: str | Path | None = None,
                        key: str | Path | None = None) -> grpc.ChannelCredentials:
    """Client side: trust ``ca`` (the system's CAs without it); present ``cert``/``key`` for mutual TLS."""
    if (cert is None) != (key is None):
        raise TlsError("a client certificate needs its key and a key its certificate (give both)")
    ca_pem = None
    if ca is not None:
        ca_pem = _read(ca, "TLS CA")
        _check_ca(ca, "TLS CA")
    cert_pem = key_pem = None
    if cert is not None and key is not None:
        cert_pem, key_pem = _read(cert, "client certificate"), _read(key, "client key")
        _check_pair(cert, key, "client")
    return grpc.ssl_channel_credentials(root_certificates=ca_pem, private_key=key_pem,
                                        certificate_chain=cert_pem)


@dataclass(frozen=True)
class ClientTls:
    """A P4Runtime client's TLS files (``olaf ctl --tls-ca/--tls-cert/--tls-key``)."""

    ca: str | None = None
    cert: str | None = None
    key: str | None = None

    def credentials(self) -> grpc.ChannelCredentials:
        """Checked credentials; ``TlsError`` names the file that is wrong."""
        return channel_credentials(self.ca, self.cert, self.key)
