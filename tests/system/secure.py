"""A secure test cluster: a cluster secret of its own, mutual TLS on the Raft port, TLS on the client port, auth and
ACLs on, the first admin bootstrapped from a token file.

The test process (and the CLI and group-member subprocesses it starts) reaches it as that admin through
RAFTBUS_TLS_CA and RAFTBUS_TOKEN_FILE, which the SDK reads when given no credentials; both are restored after.
"""
from __future__ import annotations

import os
import secrets
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from raftbus.broker.tls_dev import secure_broker_env, write_dev_pki, write_token_file

CLIENT_ENV = ("RAFTBUS_TLS_CA", "RAFTBUS_TOKEN_FILE")


@dataclass
class SecureMaterial:
    tls_dir: Path
    ca: str
    admin_token_file: str
    admin_token: str
    cluster_env: dict  # RAFTBUS_CLUSTER_SECRET and RAFTBUS_CLUSTER_ID: a broker joining it needs them

    def client_certificate(self, principal: str) -> dict:
        """{"cert", "key"} of a client certificate whose common name is `principal` (mutual TLS)."""
        cert, key = write_dev_pki(self.tls_dir, [], clients=(principal,)).client(principal)
        return {"cert": str(cert), "key": str(key)}


def make_secure(cluster, root: Path) -> SecureMaterial:
    """Give every broker of `cluster` (not started yet) a cluster secret and id of their own (auth needs them),
    mutual TLS on the Raft port, TLS on the client port, auth on and the bootstrap token file."""
    tls_dir = root / "tls"
    pki = write_dev_pki(tls_dir, [b.node_id for b in cluster.brokers])
    token_file = root / "admin.token"
    token = write_token_file(token_file)
    own_secret = cluster_credentials()
    for broker in cluster.brokers:
        cert, key = pki.broker(broker.node_id)
        raft_tls = {"RAFTBUS_RAFT_TLS_CERT_FILE": str(cert), "RAFTBUS_RAFT_TLS_KEY_FILE": str(key),
                    "RAFTBUS_RAFT_TLS_CA_FILE": str(pki.ca_file)}
        broker.env = {**broker.env, **own_secret, **raft_tls, **secure_broker_env(pki, broker.node_id, token_file)}
    return SecureMaterial(tls_dir, str(pki.ca_file), str(token_file), token, own_secret)


def cluster_credentials() -> dict[str, str]:
    """RAFTBUS_CLUSTER_SECRET and RAFTBUS_CLUSTER_ID of a new cluster: random, as `raftbus secret generate` makes."""
    return {"RAFTBUS_CLUSTER_SECRET": secrets.token_hex(32), "RAFTBUS_CLUSTER_ID": f"test-{secrets.token_hex(6)}"}


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
