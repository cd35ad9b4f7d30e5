"""Cluster test: a snapshot a peer puts in one message (pysyncobj's `serialized` install) is refused, never decoded,
whatever it holds."""
from __future__ import annotations

import io
import marshal
import os
import pickle

import pytest

from raftbus.broker.raft.snapshot_footer import SNAPSHOT_MAGIC, TAIL, write_footer

pytestmark = pytest.mark.cluster

GROUP = "p1.0"


class RunsCommand:
    """Unpickling this would run a shell command that creates a marker file."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def snapshot_bytes(footer: dict) -> bytes:
    f = io.BytesIO()
    write_footer(f, footer)
    return f.getvalue()


def test_forged_snapshots_install_no_code(raft_cluster, tmp_path):
    """A follower handed a whole snapshot in a message (one whose footer lists pickled entries, one whose footer is
    a marshalled code object) refuses it: its log and state do not move, the marker file never appears and the
    group commits on. Snapshots arrive only as checked chunks (transfer.py)."""
    for node_id in (1, 2, 3):
        raft_cluster.start(node_id)
    raft_cluster.produce(5)
    leader = raft_cluster.wait_leader()
    follower = next(n.groups[GROUP] for n in raft_cluster.nodes.values() if not n.groups[GROUP].is_leader)
    leader_id, term = leader.raft.self_id, leader.term
    marker = tmp_path / "code-ran"
    exploit = pickle.dumps(RunsCommand(marker))
    last = follower.raft.applied_index
    log_before = (follower.raft.first_index, follower.raft.last_index)
    pickled_entries = snapshot_bytes({
        "last": (b"\x00" + exploit, last + 2, term), "prev": (b"\x02" + exploit, last + 1, term),
        "cluster": ["1", "2", "3"], "data_len": 0, "data_index": 0,
        "entries": [(b"\x00" + exploit, last + 1), (b"\x00" + exploit, last + 2)]})
    code = marshal.dumps(compile(f"open({str(marker)!r}, 'w').close()", "exploit", "exec"))
    code_footer = code + TAIL.pack(len(code), SNAPSHOT_MAGIC)
    sender = int(leader_id)
    for data in (pickled_entries, code_footer):
        follower.transport.deliver(sender, {"type": "append_entries", "term": term, "commit_index": last,
                                            "serialized": (data, True, True)})
        raft_cluster.run_until(lambda: True, what="a step")
    assert not marker.exists(), "a forged snapshot ran code"
    assert (follower.raft.first_index, follower.raft.last_index) == log_before  # nothing installed
    assert not (follower.data_dir / "raft.snapshot").exists()
    results = raft_cluster.produce(3)
    assert len(results) == 3 and not marker.exists()
