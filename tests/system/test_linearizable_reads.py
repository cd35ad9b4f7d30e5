"""System tests of linearizable reads on real brokers: a deposed partition leader never serves a stale read, and
reads add no entry to the partition's Raft log.

The leader is frozen (SIGSTOP), the others elect a new leader and take more writes, then the new leader is frozen
too and the old one resumes (SIGCONT) and is asked at once for the log's end and for records: nothing tells it of
the new term (the remaining follower drops appends of an older term, and the brokers' leader fallback timeout is
long, so it keeps believing it leads), yet every answer it gives must already include the writes acknowledged by
the new leader, or be a refusal that sends the client elsewhere.
"""
from __future__ import annotations

import os
import signal
import threading

import grpc
import pytest

from raftbus.client import Admin, Producer
from raftbus.client.credentials import Credentials
from raftbus.client.errors import CODE_KEY
from raftbus.client.router import grpc_connect
from raftbus.client.wire import groups_pb2, groups_pb2_grpc
from raftbus.client.wire import raftbus_pb2 as pb
from tests.helpers import running_cluster, wait_until

pytestmark = pytest.mark.system

TOPIC = "reads"
BEFORE, AFTER = 100, 100
READS_AFTER_RESUME = 200          # reads the probe makes after the old leader resumes
READS_OF_EACH_KIND = 50
# What a broker may answer a read it cannot serve: every one sends the client to ask again elsewhere or later.
RETRIABLE_REFUSALS = {"NOT_LEADER", "LEADER_NOT_AVAILABLE", "REQUEST_TIMED_OUT", "OVERLOADED", "UNAVAILABLE"}
# A leader that hears from no majority steps down after this: long, so a resumed old leader still believes it leads
# (safety must not rest on this timer).
PATIENT_LEADERS = {"RAFTBUS_RAFT_LEADER_FALLBACK_TIMEOUT_MS": "60000"}


@pytest.fixture(params=["plaintext", "secure"])
def patient_cluster(request, tmp_path):
    with running_cluster(tmp_path, env=PATIENT_LEADERS, secure=request.param == "secure") as cluster:
        yield cluster


def connect(address: str):
    """A connection to one broker with the test's credentials (TLS and the admin token in the secure run)."""
    return grpc_connect(address, Credentials.of())


def refusal_code(exc: grpc.RpcError) -> str:
    """The raftbus error code of a refused call, or the transport's status when the broker sent none."""
    code = dict(exc.trailing_metadata() or ()).get(CODE_KEY)
    return code or f"transport {exc.code().name}"


def leader_of_partition(bootstrap: str) -> int:
    with Admin(bootstrap) as admin:
        return admin.describe_topic(TOPIC).partitions[0].leader_id


def produce(bootstrap: str, count: int, tag: str) -> None:
    with Producer(bootstrap, linger_ms=1) as producer:
        futures = [producer.send(TOPIC, f"{tag}-{i}".encode(), partition=0) for i in range(count)]
        producer.flush(60)
    assert all(f.exception() is None for f in futures)


class StaleReadProbe:
    """Asks one broker, from a thread, for the end of the log and for its last records, over and over; keeps
    every high watermark it answered with."""

    def __init__(self, address: str):
        self.conn = connect(address)
        self.started = 0
        self.answers: list[tuple[str, int]] = []
        self.refusals: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(30)
        self.conn.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            for kind, call in (("list_offsets", self._list_offsets), ("fetch", self._fetch)):
                self.started += 1
                try:
                    self.answers.append((kind, call()))
                except grpc.RpcError as exc:
                    self.refusals.append(refusal_code(exc))

    @property
    def done(self) -> int:
        return len(self.answers) + len(self.refusals)

    def _list_offsets(self) -> int:
        request = pb.ListOffsetsRequest(topic=TOPIC, partition=0, timestamp_ms=-1)
        return self.conn.log.ListOffsets(request, timeout=10).high_watermark

    def _fetch(self) -> int:
        request = pb.FetchRequest(topic=TOPIC, partition=0, offset=BEFORE - 1, max_bytes=1 << 16, max_wait_ms=0)
        response = self.conn.log.Fetch(request, timeout=10)
        assert not response.HasField("error"), response.error
        return response.high_watermark


def test_a_resumed_deposed_leader_serves_no_stale_read(patient_cluster):
    """Goal: after SIGSTOP of the leader, a new election and more acknowledged writes, then SIGSTOP of the new leader,
    the old leader's answers after SIGCONT all include those writes; every read it does not answer is refused with
    a retriable error."""
    cluster = patient_cluster
    with Admin(cluster.bootstrap) as admin:
        admin.create_topic(TOPIC, partitions=1, replication_factor=3)
    wait_until(lambda: leader_of_partition(cluster.bootstrap), 30, what="a leader for the partition")
    produce(cluster.bootstrap, BEFORE, "before")
    old = cluster.broker(leader_of_partition(cluster.bootstrap))
    others = ",".join(b.address for b in cluster.brokers if b is not old)
    frozen = [old]
    os.kill(old.proc.pid, signal.SIGSTOP)
    try:
        wait_until(lambda: leader_of_partition(others) not in (0, None, old.node_id), 30, what="a new leader")
        produce(others, AFTER, "after")
        new = cluster.broker(leader_of_partition(others))
        os.kill(new.proc.pid, signal.SIGSTOP)
        frozen.append(new)
        with StaleReadProbe(old.address) as probe:
            wait_until(lambda: probe.started, 10, what="a read sent to the frozen broker")
            os.kill(old.proc.pid, signal.SIGCONT)
            wait_until(lambda: probe.done >= READS_AFTER_RESUME, 60, what="reads answered after resume")
    finally:
        for broker in frozen:
            os.kill(broker.proc.pid, signal.SIGCONT)
    stale = [(kind, hwm) for kind, hwm in probe.answers if hwm < BEFORE + AFTER]
    assert not stale, f"{len(stale)} of {len(probe.answers)} reads were stale, e.g. {stale[:3]}"
    unexpected = sorted(set(probe.refusals) - RETRIABLE_REFUSALS)
    assert not unexpected, f"reads refused with {unexpected}"
    assert probe.answers or {"NOT_LEADER", "LEADER_NOT_AVAILABLE"} & set(probe.refusals), \
        "the resumed broker neither answered nor redirected"


def applied_indexes(cluster, partition: int = 0) -> dict[int, int]:
    """Each broker's applied Raft index of the partition (ReplicaCheckpoint without a checkpoint writes nothing)."""
    found = {}
    for broker in cluster.brokers:
        conn = connect(broker.address)
        try:
            request = pb.ReplicaCheckpointRequest(topic=TOPIC, partition=partition, index=0, max_wait_ms=0)
            found[broker.node_id] = conn.log.ReplicaCheckpoint(request, timeout=10).applied_index
        finally:
            conn.close()
    return found


def test_reads_add_no_entry_to_the_partition_s_raft_log(cluster):
    """Goal: Fetch, ListOffsets and consistent FetchOffset at the leader, many of each, leave the partition's Raft
    log as it was (no read barrier entry): the leader's applied index does not move, and the next write takes the
    very next index on every replica."""
    with Admin(cluster.bootstrap) as admin:
        admin.create_topic(TOPIC, partitions=1, replication_factor=3)
    wait_until(lambda: leader_of_partition(cluster.bootstrap), 30, what="a leader for the partition")
    produce(cluster.bootstrap, 10, "before")
    leader_id = leader_of_partition(cluster.bootstrap)
    wait_until(lambda: len(set(applied_indexes(cluster).values())) == 1, 30, what="every replica applied the writes")
    before = applied_indexes(cluster)[leader_id]

    conn = connect(cluster.broker(leader_id).address)
    groups = groups_pb2_grpc.GroupsStub(conn.channel)
    try:
        for _ in range(READS_OF_EACH_KIND):
            fetched = conn.log.Fetch(pb.FetchRequest(topic=TOPIC, partition=0, offset=0, max_bytes=1 << 16,
                                                     max_wait_ms=0), timeout=10)
            assert not fetched.HasField("error") and fetched.high_watermark == 10, fetched
            listed = conn.log.ListOffsets(pb.ListOffsetsRequest(topic=TOPIC, partition=0, timestamp_ms=-1),
                                          timeout=10)
            assert listed.high_watermark == 10, listed
            offset = groups.FetchOffset(groups_pb2.FetchOffsetRequest(group="g", topic=TOPIC, partition=0,
                                                                      consistent=True), timeout=10)
            assert offset.high_watermark == 10, offset
    finally:
        conn.close()
    assert leader_of_partition(cluster.bootstrap) == leader_id, "the leader changed: its election added an entry"
    assert applied_indexes(cluster)[leader_id] == before, "reads added entries to the partition's log"
    produce(cluster.bootstrap, 1, "after")
    wait_until(lambda: min(applied_indexes(cluster).values()) > before, 30, what="the write applied everywhere")
    assert applied_indexes(cluster) == {b.node_id: before + 1 for b in cluster.brokers}
