"""TLS of the client port from the settings: the server's credentials, and the credentials a broker uses when it
calls another broker's client port (it trusts `tls_ca_file` and, under mutual TLS, presents its own certificate).
"""
from __future__ import annotations

import ssl
from pathlib import Path

import grpc

from raftbus.client import errors


def read_pem(setting: str, path: str) -> bytes:
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise errors.InvalidArgument(f"{setting} {path}: {exc.strerror}") from None
    if b"-----BEGIN" not in data:
        raise errors.InvalidArgument(f"{setting} {path} holds no PEM block")
    return data


def server_credentials(settings) -> grpc.ServerCredentials | None:
    """TLS credentials of the client port, or None when `tls_cert_file` is empty (plaintext)."""
    if not settings.tls_cert_file:
        return None
    pair = (read_pem("tls_key_file", settings.tls_key_file), read_pem("tls_cert_file", settings.tls_cert_file))
    client_ca = read_pem("tls_client_ca_file", settings.tls_client_ca_file) if settings.tls_client_ca_file else None
    return grpc.ssl_server_credentials([pair], root_certificates=client_ca, require_client_auth=client_ca is not None)


def server_ssl_context(settings) -> ssl.SSLContext | None:
    """The Kafka port's TLS, from the client port's files (the same certificate, key and client CA): None when
    `tls_cert_file` is empty. With `tls_client_ca_file` every client must present a certificate of that CA."""
    if not settings.tls_cert_file:
        return None
    read_pem("tls_cert_file", settings.tls_cert_file)
    read_pem("tls_key_file", settings.tls_key_file)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(settings.tls_cert_file, settings.tls_key_file)
    if settings.tls_client_ca_file:
        read_pem("tls_client_ca_file", settings.tls_client_ca_file)
        context.load_verify_locations(settings.tls_client_ca_file)
        context.verify_mode = ssl.CERT_REQUIRED
    return context


def certificate_subject(der: bytes | None) -> str | None:
    """The subject (RFC 4514, as the client port's gRPC reports it: `CN=orders-app,O=Acme`) of a verified peer
    certificate in DER form; None without one."""
    if not der:
        return None
    from cryptography import x509

    return x509.load_der_x509_certificate(der).subject.rfc4514_string()


def peer_tls_files(settings) -> dict:
    """The SDK's tls_ca / tls_cert / tls_key arguments for calls to other brokers (tls_ca=False when plaintext:
    given explicitly, the broker's credentials never come from the RAFTBUS_TLS_* variables of its environment)."""
    if not settings.tls_cert_file:
        return {"tls_ca": False}
    files = {"tls_ca": settings.tls_ca_file or True}  # True: the system trust store
    if settings.tls_client_ca_file:
        files.update(tls_cert=settings.tls_cert_file, tls_key=settings.tls_key_file)
    return files
