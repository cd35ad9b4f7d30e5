"""Which awake groups the loop's periodic pass must tick."""
from __future__ import annotations

_FOLLOWER = 0  # pysyncobj's _RAFT_STATE


def timers_due(group, horizon: float) -> bool:
    """Whether an awake group's periodic tick has anything to do before `horizon` (pysyncobj's clock): a follower
    with nothing to apply or forward only checks its election deadline, so it is skipped until that is near.
    Messages and submitted commands tick a group at once regardless."""
    raft = group.raft
    if raft._SyncObj__raftState != _FOLLOWER or raft.raftCommitIndex != raft.raftLastApplied:
        return True
    if raft._SyncObj__commandsQueue._FastQueue__queue:
        return True
    return raft._SyncObj__raftElectionDeadline <= horizon
