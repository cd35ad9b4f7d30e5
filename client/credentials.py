"""How the SDK proves who it is and whom it trusts: TLS for the channel, a bearer token on every call.

Every SDK class (Admin, Producer, Reader, Consumer, QueueConsumer, Queues) takes `tls_ca=` (the CA that signed the
brokers' certificates: a file path or PEM bytes; True = the system's trust store), `token=` (a bearer token, sent
as `authorization: Bearer <token>` call metadata) and, for mutual TLS, `tls_cert=` / `tls_key=`. When none of them
is given, the environment supplies them: RAFTBUS_TLS_CA, RAFTBUS_TLS_CERT, RAFTBUS_TLS_KEY (files) and
RAFTBUS_TOKEN_FILE (a file holding the token), as RAFTBUS_BOOTSTRAP supplies the bootstrap list.
"""
from __future__ import annotations

import collections
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Union

import grpc

from raftbus.client.errors import InvalidArgument

TLS_CA_ENV, TLS_CERT_ENV, TLS_KEY_ENV, TOKEN_FILE_ENV = ("RAFTBUS_TLS_CA", "RAFTBUS_TLS_CERT", "RAFTBUS_TLS_KEY",
                                                         "RAFTBUS_TOKEN_FILE")
TlsSource = Union[str, os.PathLike, bytes, bool, None]


CERTIFICATE, PRIVATE_KEY = "certificate", "private key"


def pem_problem(data: bytes, kind: str) -> str | None:
    """Why `data` is not a PEM `kind` (CERTIFICATE: one or more certificates; PRIVATE_KEY: an unencrypted private
    key) that gRPC can load, or None. Checked before gRPC sees it: its TLS library would only log it."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    try:
        if kind == CERTIFICATE:
            x509.load_pem_x509_certificates(data)
        else:
            serialization.load_pem_private_key(data, password=None)
    except TypeError:
        return "is an encrypted private key; give an unencrypted one"
    except Exception:  # ValueError, UnsupportedAlgorithm: not a PEM document of that kind
        return f"is not a PEM {kind}"
    return None


def read_pem(label: str, source: TlsSource, kind: str) -> bytes | None:
    """PEM bytes of `kind` from a path or bytes (None and booleans give None); InvalidArgument naming `label` and
    the file when it is missing, unreadable or not PEM."""
    if source is None or isinstance(source, bool):
        return None
    where = "(given as bytes)" if isinstance(source, bytes) else str(source)
    if isinstance(source, bytes):
        data = source
    else:
        try:
            data = Path(source).read_bytes()
        except OSError as exc:
            raise InvalidArgument(f"{label} {where}: {exc.strerror or exc}") from None
    problem = pem_problem(data, kind)
    if problem:
        raise InvalidArgument(f"{label} {where} {problem}")
    return data


def read_token_file(path: str | os.PathLike, label: str = "token file") -> str:
    """The token in a token file (surrounding whitespace dropped); InvalidArgument naming `label` and the file when
    it is missing, unreadable, not text or empty."""
    try:
        token = Path(path).read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise InvalidArgument(f"{label} {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise InvalidArgument(f"{label} {path} is not a text file holding a token") from None
    if not token:
        raise InvalidArgument(f"{label} {path} is empty")
    if "\n" in token:
        raise InvalidArgument(f"{label} {path} holds more than one line; a token is one line")
    return token


@dataclass(frozen=True)
class Credentials:
    tls: bool = False
    tls_ca: bytes | None = None  # None with tls: the system's trust store
    tls_cert: bytes | None = None
    tls_key: bytes | None = None
    token: str | None = None

    @classmethod
    def of(cls, tls_ca: TlsSource = None, tls_cert: TlsSource = None, tls_key: TlsSource = None,
           token: str | None = None, *, environ=os.environ) -> "Credentials":
        """The credentials of an SDK object: the arguments given, else the RAFTBUS_* environment."""
        labels = ("tls_ca", "tls_cert", "tls_key")
        if tls_ca is None and tls_cert is None and tls_key is None and token is None:
            labels = (TLS_CA_ENV, TLS_CERT_ENV, TLS_KEY_ENV)
            tls_ca, tls_cert, tls_key = (environ.get(TLS_CA_ENV) or None, environ.get(TLS_CERT_ENV) or None,
                                         environ.get(TLS_KEY_ENV) or None)
            token_file = environ.get(TOKEN_FILE_ENV)
            token = read_token_file(token_file, TOKEN_FILE_ENV) if token_file else None
        if (tls_cert is None) != (tls_key is None):
            raise InvalidArgument("a client certificate needs both tls_cert and tls_key")
        if token is not None and (not token or any(c in token for c in "\r\n")):
            raise InvalidArgument("a token is one non-empty line")
        tls = tls_ca not in (None, False) or tls_cert is not None
        return cls(tls, read_pem(labels[0], tls_ca, CERTIFICATE), read_pem(labels[1], tls_cert, CERTIFICATE),
                   read_pem(labels[2], tls_key, PRIVATE_KEY), token)

    def _ssl(self) -> grpc.ChannelCredentials:
        return grpc.ssl_channel_credentials(root_certificates=self.tls_ca, private_key=self.tls_key,
                                            certificate_chain=self.tls_cert)

    def aio_channel(self, address: str, options: list) -> grpc.aio.Channel:
        """The grpc.aio channel of the asyncio SDK, secured as `channel` is."""
        interceptors = aio_bearer_token(self.token) if self.token is not None else None
        if self.tls:
            return grpc.aio.secure_channel(address, self._ssl(), options=options, interceptors=interceptors)
        return grpc.aio.insecure_channel(address, options=options, interceptors=interceptors)

    def channel(self, address: str, options: list) -> grpc.Channel:
        """A channel to `address`: TLS when configured, the bearer token on every call when given."""
        if self.tls:
            channel = grpc.secure_channel(address, self._ssl(), options=options)
        else:
            channel = grpc.insecure_channel(address, options=options)
        if self.token is None:
            return channel
        return grpc.intercept_channel(channel, BearerToken(self.token))


class _CallDetails(collections.namedtuple("_CallDetails", ("method", "timeout", "metadata", "credentials",
                                                           "wait_for_ready", "compression")),
                   grpc.ClientCallDetails):
    pass


class BearerToken(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor,
                  grpc.StreamUnaryClientInterceptor, grpc.StreamStreamClientInterceptor):
    """Adds `authorization: Bearer <token>` to the metadata of every call of a channel."""

    def __init__(self, token: str):
        self._pair = ("authorization", f"Bearer {token}")

    def _details(self, details) -> _CallDetails:
        metadata = [*(details.metadata or ()), self._pair]
        return _CallDetails(details.method, details.timeout, metadata, details.credentials,
                            details.wait_for_ready, details.compression)

    def intercept_unary_unary(self, continuation, details, request):
        return continuation(self._details(details), request)

    def intercept_unary_stream(self, continuation, details, request):
        return continuation(self._details(details), request)

    def intercept_stream_unary(self, continuation, details, request_iterator):
        return continuation(self._details(details), request_iterator)

    def intercept_stream_stream(self, continuation, details, request_iterator):
        return continuation(self._details(details), request_iterator)


class _AioBearer:
    """BearerToken for grpc.aio channels. grpc.aio files each interceptor object under one kind of call only, so
    `aio_bearer_token` makes one object per kind."""

    def __init__(self, token: str):
        self._pair = ("authorization", f"Bearer {token}")

    def _details(self, details) -> grpc.aio.ClientCallDetails:
        metadata = grpc.aio.Metadata(*(details.metadata or ()), self._pair)
        return grpc.aio.ClientCallDetails(details.method, details.timeout, metadata, details.credentials,
                                          details.wait_for_ready)


class _AioUnaryUnary(_AioBearer, grpc.aio.UnaryUnaryClientInterceptor):
    async def intercept_unary_unary(self, continuation, details, request):
        return await continuation(self._details(details), request)


class _AioUnaryStream(_AioBearer, grpc.aio.UnaryStreamClientInterceptor):
    async def intercept_unary_stream(self, continuation, details, request):
        return await continuation(self._details(details), request)


class _AioStreamUnary(_AioBearer, grpc.aio.StreamUnaryClientInterceptor):
    async def intercept_stream_unary(self, continuation, details, request_iterator):
        return await continuation(self._details(details), request_iterator)


class _AioStreamStream(_AioBearer, grpc.aio.StreamStreamClientInterceptor):
    async def intercept_stream_stream(self, continuation, details, request_iterator):
        return await continuation(self._details(details), request_iterator)


def aio_bearer_token(token: str) -> list:
    """The interceptors that add `authorization: Bearer <token>` to every call of a grpc.aio channel."""
    return [kind(token) for kind in (_AioUnaryUnary, _AioUnaryStream, _AioStreamUnary, _AioStreamStream)]
