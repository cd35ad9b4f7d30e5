"""Several brokers' Raft machinery in one process: real Raft groups, real hubs on loopback, manual ticking."""
from __future__ import annotations

import time
from pathlib import Path

from raftbus.broker import commands
from raftbus.client.errors import LeaderNotAvailable, MembershipChangeInProgress, NotLeader
from raftbus.broker.raft.loop import RaftLoop
from raftbus.broker.raft.group import RaftGroup, RaftSettings
from raftbus.broker.log.state import PartitionStateMachine
from raftbus.broker.storage.lmdb_store import LmdbStore
from raftbus.broker.raft.hub import RaftHub
from tests.ports import reserve_ports

SECRET = b"k" * 32
PRODUCER = b"p" * 16
RESUBMITS_MAX = 5  # produce: rounds of resubmitting batches a leader change refused


class Node:
    """One broker's loop, hub and partition replicas; `step` runs one loop iteration without waiting."""

    def __init__(self, node_id: int, raft_addresses: dict[int, str], root: Path, settings: RaftSettings,
                 send_buffer_bytes_max: int = 256 << 20):
        self.node_id = node_id
        self.root = root / f"node-{node_id}"
        self.settings = settings
        self.loop = RaftLoop(tick_interval_ms=20, housekeeping_interval_ms=50)
        peers = {n: a for n, a in raft_addresses.items() if n != node_id}
        self.hub = RaftHub(node_id, raft_addresses[node_id], peers, SECRET, on_message=self.loop.on_message,
                           on_peer_connected=self.loop.on_peer_connected,
                           on_peer_disconnected=self.loop.on_peer_disconnected, frame_bytes_max=64 << 20,
                           send_buffer_bytes_max=send_buffer_bytes_max, connect_retry_ms=50, handshake_timeout_ms=2000,
                           reuse_port=True,  # binds beside the port RaftCluster holds (tests/ports.py)
                           clock=self.loop.clock)
        self.loop.attach(self.hub)
        self.hub.start()
        self.groups: dict[str, RaftGroup] = {}
        self._next = (0.0, 0.0)

    def add_partition(self, group_id: str, replica_ids, wrap_store=None, learner_ids=(),
                      eager_commit_notify: bool = False) -> RaftGroup:
        """A replica of `group_id`; `wrap_store` (e.g. tests.faulty_store.FaultyStore) wraps its LMDB store;
        `learner_ids` are the members (among `replica_ids`) the group starts with as learners;
        `eager_commit_notify` as the metadata group has it."""
        base = self.root / group_id
        store = LmdbStore(str(base / "store"), tables=PartitionStateMachine.TABLES, map_size_bytes=1 << 20)
        if wrap_store is not None:
            store = wrap_store(store)
        group = RaftGroup(group_id, PartitionStateMachine(store), store, hub=self.hub, loop=self.loop,
                          self_id=self.node_id, peer_ids=sorted(r for r in replica_ids if r != self.node_id),
                          data_dir=base / "raft", settings=self.settings, learner_ids=learner_ids,
                          eager_commit_notify=eager_commit_notify)
        self.groups[group_id] = group
        self.loop.add_group(group)
        return group

    def step(self) -> None:
        self._next = self.loop.run_once(*self._next, wait=False)

    def close(self) -> None:
        for group_id in list(self.groups):
            self.loop.remove_group(group_id)
            self.groups.pop(group_id).store.close()
        self.hub.close()


class RaftCluster:
    def __init__(self, root: Path, size: int = 3, settings: RaftSettings | None = None,
                 send_buffer_bytes_max: int = 256 << 20):
        self.root = root
        self.send_buffer_bytes_max = send_buffer_bytes_max
        self.settings = settings or RaftSettings(election_timeout_min_ms=200, election_timeout_max_ms=400,
                                                 heartbeat_interval_ms=50, leader_fallback_timeout_ms=1000)
        self._reserved = reserve_ports(size)  # held until close: a node stopped and started keeps its address
        self.addresses = {n: f"127.0.0.1:{p}" for n, p in zip(range(1, size + 1), self._reserved.ports)}
        self.nodes: dict[int, Node] = {}

    def start(self, node_id: int, groups=("p1.0",), wrap_store=None, replicas=None, learners=(),
              eager_commit_notify: bool = False) -> Node:
        """Start node `node_id` with a replica of each of `groups` placed on `replicas` (default: every node),
        of which `learners` start as learners."""
        node = Node(node_id, self.addresses, self.root, self.settings, self.send_buffer_bytes_max)
        for group_id in groups:
            node.add_partition(group_id, list(replicas or self.addresses), wrap_store, learner_ids=learners,
                               eager_commit_notify=eager_commit_notify)
        self.nodes[node_id] = node
        return node

    def stop(self, node_id: int) -> None:
        self.nodes.pop(node_id).close()

    def nodes_root(self, node_id: int) -> Path:
        """The data directory of node `node_id` (running or not)."""
        return self.root / f"node-{node_id}"

    def run_until(self, predicate, timeout_s: float = 20.0, what: str = "condition"):
        """Step every running node until predicate() is truthy; fail with the last value seen."""
        deadline = time.monotonic() + timeout_s
        last = None
        while time.monotonic() < deadline:
            for node in list(self.nodes.values()):
                node.step()
            last = predicate()
            if last:
                return last
            time.sleep(0.001)
        raise AssertionError(f"timed out after {timeout_s} s waiting for {what}; last seen: {last!r}")

    def leader(self, group_id: str = "p1.0"):
        leaders = [n.groups[group_id] for n in self.nodes.values()
                   if group_id in n.groups and n.groups[group_id].is_leader]
        return leaders[0] if len(leaders) == 1 else None

    def wait_leader(self, group_id: str = "p1.0"):
        return self.run_until(lambda: self.leader(group_id), what=f"one leader of {group_id}")

    def change_membership(self, step, group_id: str = "p1.0"):
        """Propose `step` at the leader and run until it is applied there; returns the installed Membership."""
        def proposed():
            leader = self.leader(group_id)
            future = leader.propose_membership(step) if leader is not None else None
            if future is None or (future.done() and isinstance(future.exception(), MembershipChangeInProgress)):
                return None  # no leader yet, or it has not applied an entry of its term yet: propose again
            return future

        future = self.run_until(proposed, what="a leader taking the membership change")
        self.run_until(future.done, what="the membership change applied")
        return future.result()

    def produce(self, count: int, group_id: str = "p1.0", first_sequence: int = 0, payload: bytes = b"x" * 100):
        """Submit `count` single-record batches to the leader and run until all are committed; returns results.
        A batch refused because leadership moved (NotLeader, LeaderNotAvailable: its outcome may be unknown) is
        submitted again to the next leader under the same producer sequence, as the SDK does; the state machine
        answers a duplicate with its first result."""
        def command(i: int) -> bytes:
            return commands.encode_produce(1_000 + i, PRODUCER, first_sequence + i, 1, 1_000 + i,
                                           payload + str(first_sequence + i).encode())

        leader = self.wait_leader(group_id)
        futures = [leader.submit(command(i)) for i in range(count)]
        for _ in range(RESUBMITS_MAX):
            self.run_until(lambda: all(f.done() for f in futures), what=f"{count} produces committed")
            moved = [i for i, f in enumerate(futures) if isinstance(f.exception(), (NotLeader, LeaderNotAvailable))]
            if not moved:
                break
            leader = self.wait_leader(group_id)
            for i in moved:
                futures[i] = leader.submit(command(i))
        return [f.result() for f in futures]

    def close(self) -> None:
        for node_id in list(self.nodes):
            self.stop(node_id)
        self._reserved.close()


# An election timeout far longer than any wait of a test: a leader can only come from an election a test starts
# (first_leader) or from the early election after a leader's broker is lost.
SLOW_ELECTIONS = RaftSettings(election_timeout_min_ms=60_000, election_timeout_max_ms=61_000, heartbeat_interval_ms=50,
                              leader_lost_election_min_ms=400, leader_lost_election_max_ms=600,
                              leader_fallback_timeout_ms=120_000)


def first_leader(cluster: RaftCluster, node_id: int = 1, group_id: str = "p1.0"):
    """Start three nodes and make `node_id` stand at once (the others wait out their long timeouts); 3 records
    are committed through it. Returns its group."""
    for n in (1, 2, 3):
        cluster.start(n)
    cluster.nodes[node_id].groups[group_id].raft.set_election_timeout(0)
    leader = cluster.wait_leader(group_id)
    cluster.produce(3, group_id)
    return leader
