"""The cluster secret: when a broker may use it, and the Raft key derived from it.

A broker refuses the public default, an empty or a short secret unless every listener it opens is on loopback
(a development cluster on one machine). The Raft key is PBKDF2-SHA256 of the secret salted with the cluster id, so
a table of keys precomputed for common secrets serves one cluster only. `raftbus dev` keeps a random secret and
cluster id per data directory (`dev_credentials`).
"""
from __future__ import annotations

import hashlib
import ipaddress
import json
import os
import secrets
from pathlib import Path

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


def raft_key(secret: str, cluster_id: str) -> bytes:
    """The 32-byte key the Raft handshake proves knowledge of; salted per cluster."""
    salt = b"raftbus-raft-v2\0" + cluster_id.encode()
    return hashlib.pbkdf2_hmac("sha256", secret.encode(), salt, KEY_ITERATIONS)


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
