"""Goal: the classic group APIs answer every stale or bad request with Kafka's error, spoken by hand to the
coordinator: MEMBER_ID_REQUIRED for a new member, ILLEGAL_GENERATION for an old generation (Heartbeat, SyncGroup,
OffsetCommit), UNKNOWN_MEMBER_ID for an unknown member, REBALANCE_IN_PROGRESS while a new member joins (to a
heartbeat held since before the join, too),
FENCED_INSTANCE_ID for a replaced static member, INCONSISTENT_GROUP_PROTOCOL for an empty protocol list and for a
member of another protocol type, and UNKNOWN_SERVER_ERROR (nothing stored) for a 10 MB assignment; the group then
goes on serving."""
from __future__ import annotations

import socket
import time

import pytest
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.heartbeat.v3.request import HeartbeatRequest
from kio.schema.join_group.v5.request import JoinGroupRequest
from kio.schema.offset_commit.v7.request import OffsetCommitRequest
from kio.schema.sync_group.v3.request import SyncGroupRequest

from raftbus.broker.kafka.schema import make
from raftbus.client import Admin
from tests.helpers import wait_until
from tests.kafka.conftest import create_topic, kafka_cluster
from tests.kafka_wire import parse_response, read_frame, request_frame

pytestmark = pytest.mark.kafka
NONE, UNKNOWN_SERVER_ERROR, ILLEGAL_GENERATION, INCONSISTENT_GROUP_PROTOCOL = 0, -1, 22, 23
UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS, MEMBER_ID_REQUIRED, FENCED_INSTANCE_ID = 25, 27, 79, 82
JOIN, HEARTBEAT, SYNC, COMMIT, API_VERSIONS = 11, 12, 14, 8, 18
HOLD_MS = 30_000  # kafka_heartbeat_hold_ms here: a member with a 90 s session timeout has its heartbeats held 30 s
ANSWERED_WITHIN_S = 10  # an answer this soon did not wait for the hold to end


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with kafka_cluster(tmp_path_factory.mktemp("kafka-group-wire"),
                       env={"RAFTBUS_KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS": "0",
                            "RAFTBUS_KAFKA_HEARTBEAT_HOLD_MS": str(HOLD_MS)}) as running:
        create_topic(running, "wire", partitions=1)
        yield running


class Wire:
    """One connection to the group coordinator (the controller's Kafka port)."""

    def __init__(self, cluster):
        with Admin(cluster.bootstrap) as admin:
            controller = admin.cluster_status().controller_id
        self.sock = socket.create_connection(("127.0.0.1", cluster.kafka_ports[controller - 1]), timeout=30)
        self.correlation = 0

    def send(self, api_key: int, version: int, schema, body: dict) -> int:
        self.correlation += 1
        self.sock.sendall(request_frame(api_key, version, self.correlation, make(schema, body)))
        return self.correlation

    def receive(self, api_key: int, version: int, correlation: int):
        cid, answer = parse_response(api_key, version, read_frame(self.sock))
        assert cid == correlation
        return answer

    def call(self, api_key: int, version: int, schema, body: dict):
        return self.receive(api_key, version, self.send(api_key, version, schema, body))

    def join(self, group: str, member_id: str = "", instance: str | None = None, protocols=None,
             protocol_type: str = "raw", session_timeout_ms: int = 10_000):
        return self.call(JOIN, 5, JoinGroupRequest, _join_body(group, member_id, instance, protocols, protocol_type,
                                                               session_timeout_ms))

    def join_new(self, group: str, session_timeout_ms: int = 10_000) -> str:
        """A dynamic member's id: told MEMBER_ID_REQUIRED first (KIP-394), as Kafka does from JoinGroup v4."""
        first = self.join(group, session_timeout_ms=session_timeout_ms)
        assert first.error_code == MEMBER_ID_REQUIRED and first.member_id
        return first.member_id

    def sync(self, group: str, generation: int, member_id: str, assignments=(), instance: str | None = None):
        return self.call(SYNC, 3, SyncGroupRequest, {
            "group_id": group, "generation_id": generation, "member_id": member_id, "group_instance_id": instance,
            "assignments": [{"member_id": m, "assignment": a} for m, a in assignments]})

    def heartbeat(self, group: str, generation: int, member_id: str, instance: str | None = None) -> int:
        return self.receive(HEARTBEAT, 3, self.send_heartbeat(group, generation, member_id, instance)).error_code

    def send_heartbeat(self, group: str, generation: int, member_id: str, instance: str | None = None) -> int:
        return self.send(HEARTBEAT, 3, HeartbeatRequest, {"group_id": group, "generation_id": generation,
                                                          "member_id": member_id, "group_instance_id": instance})

    def close(self):
        self.sock.close()


def _join_body(group, member_id, instance, protocols, protocol_type, session_timeout_ms=10_000) -> dict:
    return {"group_id": group, "session_timeout": session_timeout_ms, "rebalance_timeout": 10_000,
            "member_id": member_id,
            "group_instance_id": instance, "protocol_type": protocol_type,
            "protocols": [{"name": "range", "metadata": b"m"}] if protocols is None else protocols}


@pytest.fixture
def wire(cluster):
    connection = Wire(cluster)
    yield connection
    connection.close()


def test_generations_fence_stale_and_unknown_members(cluster, wire):
    """Goal: a member of generation 1 is fenced by ILLEGAL_GENERATION once generation 2 exists, an unknown member
    gets UNKNOWN_MEMBER_ID, a member's heartbeat during a join phase gets REBALANCE_IN_PROGRESS, and an
    OffsetCommit of an old generation is refused."""
    group = "fence"
    m1 = wire.join_new(group)
    joined = wire.join(group, m1)
    assert joined.error_code == NONE and joined.leader == m1
    g1 = joined.generation_id
    synced = wire.sync(group, g1, m1, [(m1, b"a1")])
    assert synced.error_code == NONE and synced.assignment == b"a1"
    assert wire.heartbeat(group, g1, m1) == NONE
    assert wire.heartbeat(group, g1 - 1, m1) == ILLEGAL_GENERATION
    assert wire.heartbeat(group, g1, "nobody-0") == UNKNOWN_MEMBER_ID
    assert wire.join(group, "nobody-0").error_code == UNKNOWN_MEMBER_ID
    assert wire.sync(group, g1 + 5, m1, [(m1, b"x")]).error_code == ILLEGAL_GENERATION

    other = Wire(cluster)
    try:
        m2 = other.join_new(group)
        waiting = other.send(JOIN, 5, JoinGroupRequest, _join_body(group, m2, None, None, "raw"))
        wait_until(lambda: wire.heartbeat(group, g1, m1) == REBALANCE_IN_PROGRESS, 10,
                   what="m2's join opens a join phase")
        rejoined = wire.join(group, m1)
        assert rejoined.error_code == NONE and rejoined.generation_id > g1
        follower = other.receive(JOIN, 5, waiting)
        assert follower.error_code == NONE and follower.generation_id == rejoined.generation_id
        g2 = rejoined.generation_id
        assert wire.heartbeat(group, g1, m1) == ILLEGAL_GENERATION
        assert wire.sync(group, g1, m1, [(m1, b"old")]).error_code == ILLEGAL_GENERATION
        commit = wire.call(COMMIT, 7, OffsetCommitRequest, {
            "group_id": group, "generation_id_or_member_epoch": g1, "member_id": m1, "group_instance_id": None,
            "topics": [{"name": "wire", "partitions": [{"partition_index": 0, "committed_offset": 1,
                                                        "committed_leader_epoch": -1, "committed_metadata": ""}]}]})
        assert commit.topics[0].partitions[0].error_code == ILLEGAL_GENERATION
        assert wire.sync(group, g2, m1, [(m1, b"n1"), (m2, b"n2")]).assignment == b"n1"
        assert other.sync(group, g2, m2).assignment == b"n2"
    finally:
        other.close()


def test_a_held_heartbeat_answers_a_join_at_once_and_never_holds_back_a_later_request(cluster, wire):
    """Goal: a stable member's Heartbeat is held by the coordinator and answered REBALANCE_IN_PROGRESS as soon as
    another member joins, so the member rejoins without waiting for its next heartbeat; a held Heartbeat followed
    by another request on its connection is answered (NONE) at once, then that request, in order."""
    group = "held"
    wire.sock.settimeout(ANSWERED_WITHIN_S)
    m1 = wire.join_new(group, session_timeout_ms=90_000)
    joined = wire.join(group, m1, session_timeout_ms=90_000)
    assert wire.sync(group, joined.generation_id, m1, [(m1, b"all")]).error_code == NONE
    beat = wire.send_heartbeat(group, joined.generation_id, m1)
    time.sleep(0.5)  # the heartbeat reaches the coordinator before the newcomer
    other = Wire(cluster)
    try:
        m2 = other.join_new(group)
        waiting = other.send(JOIN, 5, JoinGroupRequest, _join_body(group, m2, None, None, "raw"))
        assert wire.receive(HEARTBEAT, 3, beat).error_code == REBALANCE_IN_PROGRESS
        rejoined = wire.join(group, m1, session_timeout_ms=90_000)
        assert other.receive(JOIN, 5, waiting).generation_id == rejoined.generation_id
        assert wire.sync(group, rejoined.generation_id, m1, [(m1, b"a"), (m2, b"b")]).error_code == NONE
        beat = wire.send_heartbeat(group, rejoined.generation_id, m1)
        time.sleep(0.5)
        versions = wire.send(API_VERSIONS, 3, ApiVersionsRequest, {"client_software_name": "wire",
                                                                   "client_software_version": "1"})
        assert wire.receive(HEARTBEAT, 3, beat).error_code == NONE
        assert wire.receive(API_VERSIONS, 3, versions).error_code == NONE
    finally:
        other.close()


def test_bad_group_requests_get_kafkas_errors(cluster, wire):
    """Goal: an empty protocol list and a member of another protocol type get INCONSISTENT_GROUP_PROTOCOL, a
    10 MB assignment gets UNKNOWN_SERVER_ERROR with nothing stored, and the group then takes a normal one."""
    assert wire.join("empty", protocols=[]).error_code == INCONSISTENT_GROUP_PROTOCOL
    member = wire.join_new("big")
    joined = wire.join("big", member)
    assert joined.error_code == NONE
    other_type = Wire(cluster)
    try:
        assert other_type.join("big", protocol_type="connect").error_code == INCONSISTENT_GROUP_PROTOCOL
    finally:
        other_type.close()
    generation = joined.generation_id
    assert wire.sync("big", generation, member, [(member, b"x" * (10 * 1024 * 1024))]).error_code == \
        UNKNOWN_SERVER_ERROR
    again = wire.join("big", member)  # the refused assignment started a new join phase, as Kafka's does
    assert again.error_code == NONE
    synced = wire.sync("big", again.generation_id, member, [(member, b"small")])
    assert synced.error_code == NONE and synced.assignment == b"small"


def test_a_static_member_replaced_under_its_instance_id_is_fenced(cluster, wire):
    """Goal: a static member that joins again under a new member id takes its predecessor's place; the
    predecessor's heartbeat gets FENCED_INSTANCE_ID."""
    group = "static"
    first = wire.join(group, instance="i-1")
    assert first.error_code == NONE
    assert wire.sync(group, first.generation_id, first.member_id, [(first.member_id, b"s")]).error_code == NONE
    again = Wire(cluster)
    try:
        second = again.join(group, instance="i-1")
        assert second.error_code == NONE and second.member_id != first.member_id
        assert second.generation_id == first.generation_id  # a stable group: no rebalance for a static rejoin
        assert again.sync(group, second.generation_id, second.member_id).assignment == b"s"
        assert wire.heartbeat(group, first.generation_id, first.member_id, "i-1") == FENCED_INSTANCE_ID
    finally:
        again.close()
