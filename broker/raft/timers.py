"""Which awake groups the loop's periodic pass must tick."""
from __future__ import annotations

from raftbus.broker.raft.pysyncobj import Role

_FOLLOWER = Role.FOLLOWER


def timers_due(group, horizon: float) -> bool:
    """Whether an awake group's periodic tick has anything to do before `horizon` (the loop's clock): a follower
    with nothing to apply or forward only checks its election deadline, so it is skipped until that is near.
    Messages and submitted commands tick a group at once regardless."""
    raft = group.raft
    if raft.role != _FOLLOWER or raft.commit_index != raft.applied_index or raft.commands_queued:
        return True
    return raft.election_deadline <= horizon
