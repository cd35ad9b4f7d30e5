"""A broker joining a running cluster (`join`): ask the controller to add it, and remember the answer.

The answer (every registered broker's Raft address and the metadata group's configuration with this broker as a
learner) is written to `<data_dir>/metadata/joined.json`: a restart builds its metadata group and its Raft peer
table from it and from its replicated state, without asking again and without any `peers` list.
"""
from __future__ import annotations

import json
import logging
import time
from pathlib import Path

from raftbus.client import errors
from raftbus.client.router import Router
from raftbus.client.wire import membership_pb2 as mpb
from raftbus.client.wire import membership_pb2_grpc as mpb_grpc

from raftbus.broker.metadata.settings import MembershipSettings

log = logging.getLogger(__name__)
JOINED_FILE = "joined.json"


def joined_state(metadata_dir: Path) -> dict | None:
    """{"brokers": {id: raft address}, "voters": [...], "learners": [...]} of an earlier join, else None."""
    path = metadata_dir / JOINED_FILE
    if not path.exists():
        return None
    data = json.loads(path.read_text())
    return {"brokers": {int(k): v for k, v in data["brokers"].items()}, "voters": data["voters"],
            "learners": data["learners"]}


def membership_at_start(node, settings: MembershipSettings, credentials: dict, metadata_dir: Path) -> dict | None:
    """The metadata members and Raft peers of a broker that joined a running cluster (`join`), asking the cluster
    on its first start; None for a broker bootstrapped from `peers`. `node` is the broker's NodeSettings,
    `credentials` the SDK's (tls_ca, tls_cert, tls_key, token) toward the cluster's client port."""
    state = joined_state(metadata_dir)
    if state is not None or not settings.join:
        return state
    return join_cluster(node, settings, "", credentials, metadata_dir)


def join_cluster(node, settings: MembershipSettings, metrics_url: str, credentials: dict, metadata_dir: Path) -> dict:
    """Ask the cluster at `settings.join` to add this broker (retrying until join_timeout_ms); save the answer."""
    request = mpb.JoinClusterRequest(broker_id=node.node_id, address=node.client_address,
                                     raft_address=node.raft_listen, metrics_url=metrics_url)
    deadline = time.monotonic() + settings.join_timeout_ms / 1000
    with Router(settings.join, **credentials) as router:
        while True:
            try:
                response = router.call_controller(
                    lambda conn: mpb_grpc.MembershipStub(conn.channel).JoinCluster(request, timeout=10.0))
                break
            except errors.RaftbusError as exc:
                if not exc.retriable and not isinstance(exc, (errors.Unavailable, errors.LeaderNotAvailable)):
                    raise
                if time.monotonic() >= deadline:
                    raise errors.Unavailable(f"could not join the cluster at {settings.join}: {exc}") from None
                log.info("joining the cluster will be retried: %s", exc)
                time.sleep(0.5)
    state = {"brokers": {int(b.broker_id): b.raft_address for b in response.brokers},
             "voters": sorted(response.voters), "learners": sorted(response.learners)}
    metadata_dir.mkdir(parents=True, exist_ok=True)
    tmp = metadata_dir / (JOINED_FILE + ".tmp")
    tmp.write_text(json.dumps({"brokers": {str(k): v for k, v in state["brokers"].items()},
                               "voters": state["voters"], "learners": state["learners"]}))
    tmp.replace(metadata_dir / JOINED_FILE)
    log.info("joined the cluster", extra={"join": settings.join, **{k: state[k] for k in ("voters", "learners")}})
    return state
