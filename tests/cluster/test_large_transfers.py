"""Cluster tests: a snapshot several times larger than the Raft send buffer, and many groups catching up at once
after a replica was down, reach the follower over the one shared connection without ever overflowing it."""
from __future__ import annotations

import dataclasses

import pytest

from tests.cluster.harness import RaftCluster
from tests.cluster.test_raft_groups import log_of

pytestmark = pytest.mark.cluster

SEND_BUFFER_BYTES = 8 << 20  # the hub's send_buffer_bytes_max in these tests: twice the largest Raft message
RECORD = b"r" * (100 << 10)
RECORDS_PER_ROUND = 10  # ~1 MiB submitted at a time, so only the transfer under test can overflow the buffer


def small_buffer_cluster(tmp_path) -> RaftCluster:
    """Three brokers whose hubs buffer at most SEND_BUFFER_BYTES per peer, a quarter of it for entries and chunks."""
    cluster = RaftCluster(tmp_path, send_buffer_bytes_max=SEND_BUFFER_BYTES)
    cluster.settings = dataclasses.replace(cluster.settings, bulk_send_buffer_bytes_max=SEND_BUFFER_BYTES // 4,
                                           catch_up_bytes_in_flight_max=1 << 20, snapshot_chunk_bytes=256 << 10,
                                           snapshot_chunks_in_flight_max=4)
    return cluster


def produce_bytes(cluster: RaftCluster, group_id: str, records: int) -> None:
    for first in range(0, records, RECORDS_PER_ROUND):
        cluster.produce(min(RECORDS_PER_ROUND, records - first), group_id, first_sequence=first, payload=RECORD)


def same_state(cluster: RaftCluster, group_id: str, high_watermark: int) -> bool:
    """Every running replica of the group holds `high_watermark` records, byte-identical, with a consistent digest."""
    machines = [n.groups[group_id].state_machine for n in cluster.nodes.values()]
    if any(sm.offsets()[1] != high_watermark for sm in machines):
        return False
    assert all(sm.store_consistent() for sm in machines)
    return len({log_of(n, group_id) for n in cluster.nodes.values()}) == 1


def assert_connections_kept(cluster: RaftCluster) -> None:
    for node in cluster.nodes.values():
        stats = node.hub.stats()
        assert stats["send_buffer_overflows"] == 0, (node.node_id, stats)
        assert stats["connections_lost"] == 0, (node.node_id, stats)


def test_a_snapshot_larger_than_the_send_buffer_reaches_an_empty_replica(tmp_path):
    """The leader's log is compacted into a snapshot five times the send buffer; a replica that starts empty
    receives it over the shared connection (never dropped) and ends with the leader's exact log."""
    cluster = small_buffer_cluster(tmp_path)
    try:
        cluster.start(1)
        cluster.start(2)
        produce_bytes(cluster, "p1.0", 400)  # ~40 MiB
        replicas = [cluster.nodes[n].groups["p1.0"] for n in (1, 2)]
        for replica in replicas:  # whichever leads when node 3 arrives has only a snapshot to offer it
            applied = replica.raft.applied_index
            replica.maybe_compact(force=True)
            cluster.run_until(lambda: replica.raft.first_index >= applied - 1, what="the log compacted")
        snapshot_bytes = min((r.data_dir / "raft.snapshot").stat().st_size for r in replicas)
        assert snapshot_bytes > 4 * SEND_BUFFER_BYTES
        cluster.start(3)
        sent = [r.replication.stats for r in replicas]
        cluster.run_until(lambda: same_state(cluster, "p1.0", 400) and sum(s["snapshots_sent"] for s in sent),
                          120, what="the empty replica caught up and its leader saw the snapshot installed")
        assert_connections_kept(cluster)
        received = cluster.nodes[3].groups["p1.0"].replication.stats
        assert received["snapshots_received"] == 1 and sum(s["snapshots_sent"] for s in sent) == 1, (sent, received)
        assert sum(s["snapshot_bytes_sent"] for s in sent) >= snapshot_bytes
        assert sum(s["flow_control_waits"] for s in sent) > 0, sent
    finally:
        cluster.close()


def test_many_groups_catch_up_at_once_after_a_replica_was_down(tmp_path):
    """Eight groups each gain ~3 MiB of log while one replica is down (24 MiB together, three times the send
    buffer); when it comes back every group catches up over the shared connection, which is never dropped."""
    groups = tuple(f"p{i}.0" for i in range(8))
    cluster = small_buffer_cluster(tmp_path)
    try:
        cluster.start(1, groups)
        cluster.start(2, groups)
        for group_id in groups:
            produce_bytes(cluster, group_id, 30)
        cluster.start(3, groups)
        cluster.run_until(lambda: all(same_state(cluster, g, 30) for g in groups), 120,
                          what="every group caught up")
        assert_connections_kept(cluster)
        held_back = sum(n.groups[g].replication.stats["flow_control_waits"]
                        for n in cluster.nodes.values() for g in groups)
        assert held_back > 0  # the bound was reached: without it these 24 MiB would have been queued at once
    finally:
        cluster.close()


def start_snapshot_transfer(cluster: RaftCluster, records: int):
    """Brokers 1 and 2 hold `records` compacted records; broker 3 starts empty. Returns the leader's node, its
    group and the size of its snapshot file once broker 3 holds a third of it."""
    cluster.start(1)
    cluster.start(2)
    produce_bytes(cluster, "p1.0", records)
    for node_id in (1, 2):
        replica = cluster.nodes[node_id].groups["p1.0"]
        applied = replica.raft.applied_index
        replica.maybe_compact(force=True)
        cluster.run_until(lambda: replica.raft.first_index >= applied - 1, what="the log compacted")
    cluster.start(3)
    receiver = cluster.nodes[3].groups["p1.0"].replication._receiver
    cluster.run_until(lambda: receiver.size and receiver.written > receiver.size // 3, 60, what="a third received")
    node = next(n for n in cluster.nodes.values() if n.groups["p1.0"].is_leader)
    return node, node.groups["p1.0"], receiver.size


def test_a_dropped_connection_resumes_the_snapshot_where_the_follower_is(tmp_path):
    """The shared connection drops a third of the way into a snapshot: once it is back the leader sends on from
    the last acknowledged offset (the chunks in flight again, not the whole file) and the replica catches up."""
    cluster = small_buffer_cluster(tmp_path)
    try:
        node, leader, size = start_snapshot_transfer(cluster, 200)
        node.hub._close(node.hub._ready[3], "dropped by the test")
        cluster.run_until(lambda: same_state(cluster, "p1.0", 200), 120, what="the replica caught up")
        window = cluster.settings.snapshot_chunk_bytes * cluster.settings.snapshot_chunks_in_flight_max
        sent = leader.replication.stats["snapshot_bytes_sent"]
        assert size <= sent <= size + window, (sent, size)
        assert cluster.nodes[3].groups["p1.0"].replication.stats["snapshots_received"] == 1
    finally:
        cluster.close()


def test_a_new_transfer_of_the_same_snapshot_skips_what_the_follower_holds(tmp_path):
    """The leader forgets its transfer a third of the way in (as when it loses and regains leadership): the new
    one starts at 0, the follower answers with what it holds, and the leader jumps there."""
    cluster = small_buffer_cluster(tmp_path)
    try:
        node, leader, size = start_snapshot_transfer(cluster, 200)
        leader.replication.close_sending()
        cluster.run_until(lambda: same_state(cluster, "p1.0", 200), 120, what="the replica caught up")
        window = cluster.settings.snapshot_chunk_bytes * cluster.settings.snapshot_chunks_in_flight_max
        sent = leader.replication.stats["snapshot_bytes_sent"]
        assert size <= sent <= size + 2 * window, (sent, size)
    finally:
        cluster.close()


def test_a_follower_stalled_mid_snapshot_long_enough_to_depose_its_leader_still_gets_it(tmp_path):
    """Brokers 1 and 3 alone (broker 2 stopped): broker 3 stops answering a third of the way into the snapshot, so
    broker 1 steps down (no majority heard from); once broker 3 runs again broker 1 is re-elected, starts the
    transfer over, and skips what broker 3 already holds."""
    cluster = small_buffer_cluster(tmp_path)
    try:
        cluster.start(1)
        cluster.start(2)
        produce_bytes(cluster, "p1.0", 200)
        for node_id in (1, 2):
            replica = cluster.nodes[node_id].groups["p1.0"]
            applied = replica.raft.applied_index
            replica.maybe_compact(force=True)
            cluster.run_until(lambda: replica.raft.first_index >= applied - 1, what="the log compacted")
        cluster.stop(2)
        cluster.start(3)
        receiver = cluster.nodes[3].groups["p1.0"].replication._receiver
        cluster.run_until(lambda: receiver.size and receiver.written > receiver.size // 3, 60, what="a third received")
        size, leader = receiver.size, cluster.nodes[1].groups["p1.0"]
        stalled = cluster.nodes.pop(3)  # not stepped: its loop is blocked
        cluster.run_until(lambda: not leader.is_leader, 10, what="broker 1 stepped down")
        cluster.nodes[3] = stalled
        cluster.run_until(lambda: same_state(cluster, "p1.0", 200), 120, what="broker 3 caught up")
        window = cluster.settings.snapshot_chunk_bytes * cluster.settings.snapshot_chunks_in_flight_max
        sent = leader.replication.stats["snapshot_bytes_sent"]
        assert size <= sent <= size + 2 * window, (sent, size)
        assert stalled.groups["p1.0"].replication.stats["snapshots_received"] == 1
        assert all(n.hub.stats()["send_buffer_overflows"] == 0 for n in cluster.nodes.values())
    finally:
        cluster.close()
