"""The cluster secret: when a broker may use it, and the keys derived from it, one per purpose.

A broker refuses the public default, an empty or a short secret unless every listener it opens is on loopback
(a development cluster on one machine). From the secret, PBKDF2-SHA256 salted with the cluster id makes the
cluster's master key (so a table of keys precomputed for common secrets serves one cluster only), and HKDF-SHA256
expands it into one key per purpose, each under its own label (`ClusterKeys`): the Raft handshake, the brokers'
internal identity on the client port, the queue-history MAC. No key serves two purposes, none is a plain function
of the secret, and knowing one tells nothing of the others. `raftbus dev` keeps a random secret and cluster id per
data directory (`dev_credentials`).
"""
from __future__ import annotations

import functools
import hashlib
import ipaddress
import json
import os
import secrets
from pathlib import Path
from typing import NamedTuple

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from raftbus.broker.storage.private import private_dir

DEFAULT_SECRET = "raftbus-dev-secret"
DEFAULT_CLUSTER_ID = "raftbus-dev"
KEY_ITERATIONS = 200_000
DEV_CREDENTIALS_FILE = "cluster-credentials.json"


def is_loopback(host: str) -> bool:
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name other than localhost may resolve anywhere


def secret_problem(secret: str, cluster_id: str, secret_bytes_min: int) -> str | None:
    """Why this secret and cluster id may not leave loopback, or None when they may."""
    if not secret:
        return "cluster_secret is empty"
    if secret == DEFAULT_SECRET:
        return f"cluster_secret is the public default {DEFAULT_SECRET!r}"
    if len(secret.encode()) < secret_bytes_min:
        return (f"cluster_secret is {len(secret.encode())} bytes, shorter than "
                f"cluster_secret_bytes_min={secret_bytes_min}")
    if not cluster_id or cluster_id == DEFAULT_CLUSTER_ID:
        return f"cluster_id is {'empty' if not cluster_id else 'the default ' + repr(DEFAULT_CLUSTER_ID)}"
    return None


def master_key(secret: str, cluster_id: str) -> bytes:
    """The cluster's 32-byte master key: PBKDF2-SHA256 of the secret, salted per cluster. Never used as a key
    itself: `ClusterKeys` expands it, one key per purpose."""
    salt = b"raftbus-raft-v2\0" + cluster_id.encode()
    return hashlib.pbkdf2_hmac("sha256", secret.encode(), salt, KEY_ITERATIONS)


# HKDF labels: one per purpose. A new purpose gets a label of its own; a changed key gets a new version.
RAFT_HANDSHAKE = b"raftbus/raft-handshake/v1"
INTERNAL_CLIENT = b"raftbus/internal-client/v1"
QUEUE_HISTORY = b"raftbus/queue-history/v1"
_HKDF_SALT = b"raftbus-cluster-keys-v1"


def purpose_key(master: bytes, label: bytes) -> bytes:
    """The 32-byte key of one purpose: HKDF-SHA256 of the master key with the purpose's label as info."""
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=_HKDF_SALT, info=label).derive(master)


class ClusterKeys(NamedTuple):
    """The keys of one cluster secret, each for one purpose only."""

    raft_handshake: bytes  # proven in the Raft handshake; frame keys derive from it (broker/raft/hub.py)
    internal_client: bytes  # the brokers' bearer token on each other's client port (broker/security/tokens.py)
    queue_history: bytes  # MACs of queue messages' history fields (broker/queues/history.py)

    @classmethod
    def of(cls, secret: str, cluster_id: str) -> "ClusterKeys":
        return _derived(secret, cluster_id)


@functools.lru_cache(maxsize=8)
def _derived(secret: str, cluster_id: str) -> ClusterKeys:
    """PBKDF2 runs once per secret and cluster id in a process (it costs ~0.1 s by design)."""
    master = master_key(secret, cluster_id)
    return ClusterKeys(purpose_key(master, RAFT_HANDSHAKE), purpose_key(master, INTERNAL_CLIENT),
                       purpose_key(master, QUEUE_HISTORY))


def raft_key(secret: str, cluster_id: str) -> bytes:
    """The 32-byte key the Raft handshake proves knowledge of."""
    return ClusterKeys.of(secret, cluster_id).raft_handshake


def dev_credentials(data_dir: Path) -> dict[str, str]:
    """The cluster secret and id of the development cluster in `data_dir`: made at random on first use, stored
    in the data directory (owner-only) and reused on restart."""
    path = Path(data_dir) / DEV_CREDENTIALS_FILE
    if path.exists():
        stored = json.loads(path.read_text())
        return {"cluster_secret": stored["cluster_secret"], "cluster_id": stored["cluster_id"]}
    credentials = {"cluster_secret": secrets.token_urlsafe(32), "cluster_id": f"dev-{secrets.token_hex(8)}"}
    private_dir(path.parent)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(credentials, f)
    return credentials
