"""Install a `Membership` into a running group: its Raft core and its channel of the hub.

Voters vote and count for the commit; learners are replicated to but never count for the commit or an election.
The channel's node set (`GroupTransport.nodes`) follows the members, so messages from a broker that is no longer
a member are dropped. Loop thread only.
"""
from __future__ import annotations

import logging

from raftbus.broker.raft.configuration import Membership

log = logging.getLogger(__name__)


def install(raft, transport, self_id: int, old: Membership, new: Membership, connected) -> None:
    """Move `raft` and `transport` from `old` to `new`; `connected` are the peers the hub reaches now."""
    transport.nodes.update(new.members - {self_id})
    for peer_id in sorted(old.voters - new.voters - {self_id}):
        raft.remove_voter(peer_id)
    for peer_id in sorted(old.learners - new.learners - new.voters - {self_id}):
        raft.remove_learner(peer_id)  # a promoted learner moves to the voters below, with its progress
    for peer_id in sorted(new.voters - old.voters - {self_id}):
        _add_voter(raft, peer_id)
    for peer_id in sorted(new.learners - old.learners - {self_id}):
        raft.add_learner(peer_id)
    for peer_id in sorted(new.members - old.members - {self_id}):
        if peer_id in connected:
            raft.peer_connected(peer_id)
    for peer_id in [p for p in transport.nodes if p not in new.members]:
        transport.nodes.discard(peer_id)
        raft.peer_disconnected(peer_id)
    raft.is_voter = self_id in new.voters
    if not raft.is_voter and raft.is_leader:
        # A leader that is no longer a voter steps down (the controller moves leadership first; this is the
        # guard for a change committed anyway).
        raft.step_down()


def _add_voter(raft, peer_id: int) -> None:
    """A learner promoted (or a new voter): it keeps the replication progress the leader tracked for it."""
    next_index, match_index = raft.next_index.get(peer_id), raft.match_index.get(peer_id)
    if peer_id in raft.learners:
        raft.remove_learner(peer_id)
    raft.add_voter(peer_id)
    if match_index is not None and match_index > raft.match_index.get(peer_id, 0):
        raft.match_index[peer_id] = match_index
        raft.next_index[peer_id] = max(next_index or 0, match_index + 1)


def config_entry_pending(raft, is_change) -> bool:
    """Whether the log holds a configuration entry not yet applied here (the leader then proposes no other)."""
    journal = raft.log
    if not len(journal):
        return False
    first_idx = journal[0][1]
    start = max(raft.applied_index + 1, first_idx)
    for index in range(start, journal[-1][1] + 1):
        if is_change(journal[index - first_idx][0]):
            return True
    return False


def own_term_applied(raft) -> bool:
    """Whether the leader has applied the no-op of its own term (Raft's condition for a configuration change)."""
    noop = raft.noop_index
    return noop is not None and raft.applied_index >= noop


def replication_progress(raft, node_ids) -> dict[int, int]:
    """Leader only: the highest log index each of `node_ids` is known to hold."""
    match = raft.match_index
    return {node_id: match.get(node_id, 0) for node_id in node_ids}
