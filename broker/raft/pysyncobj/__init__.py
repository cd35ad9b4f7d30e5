"""The Raft core under every raftbus group: pysyncobj 0.3.17's consensus code, vendored and corrected in place.

Nothing else in raftbus knows pysyncobj: the rest of `broker/raft` uses only what this package exports.

    node = RaftNode(self_id, voters, name=..., journal=..., options=RaftOptions(...), clock=...,
                    send=..., apply=..., apply_other=..., serialize=..., deserialize=..., replicate=...,
                    on_role_changed=..., on_tick=...)
    propose:        node.propose(command, callback)           callback(result, Outcome) once applied here
                    node.propose_entry(entry, callback)       an entry of raftbus's own type (configuration)
    apply:          apply(index, command) / apply_other(index, entry), called on commit, in log order
    reads:          node.read_index(callback)                 callback(read_index, Outcome) once a read that began
                                                              before the call may be served (ReadIndex, no entry)
    tick:           node.tick()                               timers, commit, apply, append the proposals
    messages:       node.receive(peer, message)               send(peer, message) for what leaves
    membership:     add_voter / remove_voter / add_learner / remove_learner / step_down / is_voter
    connections:    peer_connected / peer_disconnected / connected
    snapshot:       compact(), serialize(tmp_path, last, prev, cluster) / deserialize(path) -> (last, prev, cluster),
                    install_snapshot(peer, path, term, commit_index)
    transfer:       transfer_leadership(peer, callback)
    timers:         restart_election_timer / set_election_timeout / bring_election_forward /
                    heartbeat_at_next_tick / restart_fallback_timer / election_deadline
    state:          role, is_leader, term, leader_id, commit_index, applied_index, noop_index, first_index,
                    last_index, last_term, commands_queued, reads_waiting, read_round, voters, learners, next_index,
                    match_index, last_response, log, clock
    leader's sender (transfer.py): append_entries_message, snapshot_heartbeat_message, heard_from,
                    message_bytes_max, snapshot_path
"""
from raftbus.broker.raft.pysyncobj.core import NO_OP, REGULAR, Outcome, RaftNode, RaftOptions, Role

__all__ = ["NO_OP", "REGULAR", "Outcome", "RaftNode", "RaftOptions", "Role"]
