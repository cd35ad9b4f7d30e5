"""Install a `Membership` into a running pysyncobj group and its channel of the hub.

Voters are pysyncobj's `otherNodes` (changed through its own `__doChangeCluster`, the same code its pickled
membership entries would run); learners are its `readonlyNodes`, which the leader replicates to but never counts
for the commit or an election. The channel's node table (`GroupTransport.nodes`) follows the members, so messages
from a broker that is no longer a member are dropped. Loop thread only.
"""
from __future__ import annotations

import logging

from pysyncobj.monotonic import monotonic as raft_monotonic
from pysyncobj.node import Node

from raftbus.broker.raft.configuration import Membership

log = logging.getLogger(__name__)

_FOLLOWER = 0


def install(raft, transport, self_id: int, old: Membership, new: Membership, connected) -> None:
    """Move `raft` and `transport` from `old` to `new`; `connected` are the peers the hub reaches now."""
    for peer_id in sorted(new.members - {self_id}):
        transport.nodes.setdefault(peer_id, Node(str(peer_id)))
    nodes = transport.nodes
    for peer_id in sorted(old.voters - new.voters - {self_id}):
        raft._SyncObj__doChangeCluster(["rem", str(peer_id), nodes[peer_id]])
    for peer_id in sorted(old.learners - new.learners - {self_id}):
        _drop_learner(raft, nodes[peer_id])
    for peer_id in sorted(new.voters - old.voters - {self_id}):
        _add_voter(raft, nodes[peer_id])
    for peer_id in sorted(new.learners - old.learners - {self_id}):
        _add_learner(raft, nodes[peer_id])
    for peer_id in sorted(new.members - old.members - {self_id}):
        if peer_id in connected:
            raft._SyncObj__connectedNodes.add(nodes[peer_id])
    for peer_id in [p for p in nodes if p not in new.members]:
        raft._SyncObj__connectedNodes.discard(nodes.pop(peer_id))
    if self_id not in new.voters and raft._isLeader():
        # A leader that is no longer a voter steps down (the controller moves leadership first; this is the
        # guard for a change committed anyway).
        raft._SyncObj__setState(_FOLLOWER)
        raft._SyncObj__raftLeader = None


def _add_voter(raft, node: Node) -> None:
    """A learner promoted (or a new voter): it keeps the replication progress the leader tracked for it."""
    progress = (raft._SyncObj__raftNextIndex.get(node), raft._SyncObj__raftMatchIndex.get(node))
    raft._SyncObj__readonlyNodes.discard(node)
    raft._SyncObj__doChangeCluster(["add", node.id, node])
    next_index, match_index = progress
    if match_index is not None and match_index > raft._SyncObj__raftMatchIndex.get(node, 0):
        raft._SyncObj__raftMatchIndex[node] = match_index
        raft._SyncObj__raftNextIndex[node] = max(next_index or 0, match_index + 1)


def _add_learner(raft, node: Node) -> None:
    raft._SyncObj__readonlyNodes.add(node)
    raft._SyncObj__raftNextIndex[node] = raft._SyncObj__getCurrentLogIndex() + 1
    raft._SyncObj__raftMatchIndex[node] = 0
    raft._SyncObj__lastResponseTime[node] = raft_monotonic()


def _drop_learner(raft, node: Node) -> None:
    raft._SyncObj__readonlyNodes.discard(node)
    raft._SyncObj__raftNextIndex.pop(node, None)
    raft._SyncObj__raftMatchIndex.pop(node, None)


def hold_election(raft, timeout_s: float) -> None:
    """Keep a replica that is not a voter (a learner, or one not yet told it was added) from standing."""
    raft._SyncObj__raftElectionDeadline = raft_monotonic() + timeout_s


def config_entry_pending(raft, is_change) -> bool:
    """Whether the log holds a configuration entry not yet applied here (the leader then proposes no other)."""
    journal = raft._SyncObj__raftLog
    if not len(journal):
        return False
    first_idx = journal[0][1]
    start = max(raft.raftLastApplied + 1, first_idx)
    for index in range(start, journal[-1][1] + 1):
        if is_change(journal[index - first_idx][0]):
            return True
    return False


def own_term_applied(raft) -> bool:
    """Whether the leader has applied the no-op of its own term (Raft's condition for a configuration change)."""
    noop = raft._SyncObj__noopIDx
    return noop is not None and raft.raftLastApplied >= noop


def replication_progress(raft, node_ids) -> dict[int, int]:
    """Leader only: the highest log index each of `node_ids` is known to hold."""
    match = raft._SyncObj__raftMatchIndex
    return {node_id: match.get(Node(str(node_id)), 0) for node_id in node_ids}
