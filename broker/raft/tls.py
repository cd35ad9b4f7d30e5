"""Mutual TLS on the Raft port: the SSL contexts the hub wraps its sockets with.

Both sides present a certificate and require one signed by the configured CA (TLS 1.3 only). The dialing broker
also checks that the certificate names the host it dialed (its address in the peer table), as any TLS client
does. The certificate does not say which node id its holder is: inside TLS the cluster-secret handshake still
authenticates the node id (see docs/security.md, "Raft port").
"""
from __future__ import annotations

import ssl
from dataclasses import dataclass

from raftbus.client import errors


@dataclass(frozen=True)
class RaftTls:
    server: ssl.SSLContext  # for accepted connections
    client: ssl.SSLContext  # for dialed connections


def raft_tls(cert_file: str, key_file: str, ca_file: str) -> RaftTls | None:
    """The contexts for these files, None when all three are empty (TLS off); InvalidArgument when only some are
    set or a file cannot be loaded."""
    files = {"raft_tls_cert_file": cert_file, "raft_tls_key_file": key_file, "raft_tls_ca_file": ca_file}
    if not any(files.values()):
        return None
    missing = [name for name, value in files.items() if not value]
    if missing:
        raise errors.InvalidArgument(f"Raft TLS needs all of raft_tls_cert_file, raft_tls_key_file and "
                                     f"raft_tls_ca_file; missing: {', '.join(missing)}")
    return RaftTls(server=_context(ssl.PROTOCOL_TLS_SERVER, files), client=_context(ssl.PROTOCOL_TLS_CLIENT, files))


def _context(protocol: int, files: dict[str, str]) -> ssl.SSLContext:
    context = ssl.SSLContext(protocol)
    context.minimum_version = ssl.TLSVersion.TLSv1_3
    context.verify_mode = ssl.CERT_REQUIRED
    try:
        context.load_cert_chain(files["raft_tls_cert_file"], files["raft_tls_key_file"])
    except (OSError, ssl.SSLError) as exc:
        raise errors.InvalidArgument(
            f"cannot load raft_tls_cert_file={files['raft_tls_cert_file']} with raft_tls_key_file="
            f"{files['raft_tls_key_file']}: {exc}") from None
    try:
        context.load_verify_locations(cafile=files["raft_tls_ca_file"])
    except (OSError, ssl.SSLError) as exc:
        raise errors.InvalidArgument(f"cannot load raft_tls_ca_file={files['raft_tls_ca_file']}: {exc}") from None
    return context
