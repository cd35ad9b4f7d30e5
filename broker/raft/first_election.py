"""The first election of a new group: its preferred replica stands at once, the others give it time.

A new group starts with every replica at term 0 and random election timeouts, so when thousands of partitions
are created at once, two or three replicas of each group stand in the same round, split the votes and try again
in later terms; the winner is the preferred replica only by chance, and the preferred-leader check then hands
each other leadership over with one more election. Every round costs each replica a durable term/vote write.
Here the preferred replica of a group still at term 0 starts its election at its first tick, and the other
replicas wait `grace` election timeouts before they would stand themselves: one election per new group, won by
the replica that should lead it. Only timers change; votes, terms and logs follow Raft as always, and if the
preferred replica is down the others elect a leader after the grace.
"""
from __future__ import annotations

GRACE_TIMEOUTS = 4  # the other replicas of a new group wait this many maximum election timeouts


def stagger_first_election(group, self_id: int, election_timeout_max_ms: int) -> None:
    """Set the first election deadline of a new group (term 0) replicated here (before it is first ticked)."""
    raft = group.raft
    if raft.term != 0 or group.preferred_leader is None:
        return
    if group.preferred_leader == self_id:
        raft.set_election_timeout(0)
    else:
        raft.set_election_timeout(GRACE_TIMEOUTS * election_timeout_max_ms / 1000)
