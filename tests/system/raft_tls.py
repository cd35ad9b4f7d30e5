"""Helpers for system tests with mutual TLS on the Raft port: per-broker certificates from the development PKI."""
from __future__ import annotations

import ssl
from pathlib import Path

from raftbus.broker.tls_dev import DevPki, write_dev_pki
from tests.helpers import LocalCluster


def enable_raft_tls(cluster: LocalCluster, root: Path, node_ids) -> DevPki:
    """Give each broker of `cluster` its own certificate (RAFTBUS_RAFT_TLS_* variables) from one development CA."""
    pki = write_dev_pki(root / "pki", node_ids)
    for broker in cluster.brokers:
        cert, key = pki.broker(broker.node_id)
        broker.env = {**broker.env, "RAFTBUS_RAFT_TLS_CERT_FILE": str(cert), "RAFTBUS_RAFT_TLS_KEY_FILE": str(key),
                      "RAFTBUS_RAFT_TLS_CA_FILE": str(pki.ca_file)}
    return pki


def client_context(pki: DevPki, node_id: int) -> ssl.SSLContext:
    """What a broker with `node_id`'s certificate dials with."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    cert, key = pki.broker(node_id)
    context.load_cert_chain(str(cert), str(key))
    context.load_verify_locations(cafile=str(pki.ca_file))
    return context
