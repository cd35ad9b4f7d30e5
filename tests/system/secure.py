"""A secure test cluster: TLS on the client port, auth and ACLs on, the first admin bootstrapped from a token file.

The test process (and the CLI and group-member subprocesses it starts) reaches it as that admin through
RAFTBUS_TLS_CA and RAFTBUS_TOKEN_FILE, which the SDK reads when given no credentials; both are restored after.
"""
from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from raftbus.broker.tls_dev import issue_certificate, secure_broker_env, write_dev_pki, write_token_file

CLIENT_ENV = ("RAFTBUS_TLS_CA", "RAFTBUS_TOKEN_FILE")


@dataclass
class SecureMaterial:
    ca: str
    ca_key: str
    admin_token_file: str
    admin_token: str

    def client_certificate(self, principal: str, directory: Path) -> dict:
        """{"cert", "key"} of a client certificate whose common name is `principal` (mutual TLS)."""
        return issue_certificate(self.ca, self.ca_key, principal, directory / f"client-{principal}", server=False)


def make_secure(cluster, root: Path) -> SecureMaterial:
    """Give every broker of `cluster` (not started yet) its certificate, auth on and the bootstrap token file."""
    pki = write_dev_pki(root / "tls", [b.node_id for b in cluster.brokers])
    token_file = root / "admin.token"
    token = write_token_file(token_file)
    for broker in cluster.brokers:
        broker.env = {**broker.env, **secure_broker_env(pki, broker.node_id, token_file)}
    return SecureMaterial(pki["ca"], pki["ca_key"], str(token_file), token)


@contextmanager
def admin_environment(material: SecureMaterial):
    """RAFTBUS_TLS_CA and RAFTBUS_TOKEN_FILE point at the cluster's CA and admin token, then are restored."""
    saved = {name: os.environ.get(name) for name in CLIENT_ENV}
    os.environ.update(RAFTBUS_TLS_CA=material.ca, RAFTBUS_TOKEN_FILE=material.admin_token_file)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
