"""Goal: Kafka consumer groups of the real clients (confluent-kafka, kafka-python, aiokafka) on the Kafka port read
every record exactly once between their members while members join, leave and are killed and while the group's
coordinator broker is killed; committed offsets resume a group with no gap and no repeat; static members rejoin
without a rebalance; confluent-kafka's KIP-848 consumer protocol does the same on raftbus's own groups."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from raftbus.client import Admin
from tests.helpers import wait_until
from tests.kafka.conftest import create_topic, kafka_cluster
from tests.kafka.members import Member, assert_exactly_once, produce, read_by, wait_read

pytestmark = pytest.mark.kafka
PARTITIONS = 6
# The KIP-848 protocol's session timeout and heartbeat interval are the broker's (session_timeout_ms,
# heartbeat_interval_ms); the classic clients ask for 3 s (tests/kafka/group_member.py), above the brokers' 2-s floor
# here (6 s by default, as Kafka's group.min.session.timeout.ms), so a killed member is noticed within seconds.
GROUP_ENV = {"RAFTBUS_KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS": "500", "RAFTBUS_SESSION_TIMEOUT_MIN_MS": "2000",
             "RAFTBUS_SESSION_TIMEOUT_MS": "4000", "RAFTBUS_HEARTBEAT_INTERVAL_MS": "1000",
             "RAFTBUS_METRICS_LISTEN": "127.0.0.1:0"}
STATIC_SESSION_TIMEOUT_MS = 20_000  # a restarted static member's new process joins well within it
CLIENTS = {  # name: (client, member options)
    "confluent": ("confluent", ()),
    "confluent-cooperative": ("confluent", ("--assignor", "cooperative-sticky")),
    "confluent-kip848": ("confluent", ("--protocol", "consumer")),
    "kafka-python": ("kafka-python", ()),
    "aiokafka": ("aiokafka", ()),
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with kafka_cluster(tmp_path_factory.mktemp("kafka-groups"), env=GROUP_ENV) as running:
        yield running


class Produced(list):
    def more(self, cluster, topic: str, count: int = 120) -> set[str]:
        values = [f"r{len(self) + i}" for i in range(count)]
        produce(cluster.kafka_bootstrap, topic, values)
        self.extend(values)
        return set(self)


def _covered(members) -> bool:
    """Every member holds partitions, and together they hold each partition once."""
    held = [p for m in members for p in (m.assignment or [])]
    return all(m.assignment for m in members) and sorted(held) == list(range(PARTITIONS))


def _lag(cluster, group: str) -> dict:
    """`raftbus groups describe --json`: partition -> lag (records)."""
    done = subprocess.run([sys.executable, "-c", "from raftbus.cli import main; raise SystemExit(main())",
                           "groups", "describe", group, "--json", "--bootstrap", cluster.bootstrap],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return {p["partition"]: p["lag_records"] for p in json.loads(done.stdout)["partitions"]}


def _controller(cluster) -> int:
    with Admin(cluster.bootstrap) as admin:
        return admin.cluster_status().controller_id


@pytest.mark.parametrize("variant", list(CLIENTS))
def test_a_group_reads_every_record_once_through_joins_leaves_kills_and_a_coordinator_kill(cluster, variant,
                                                                                            tmp_path):
    """Goal: two, then three, then two members, then one of them killed, then the coordinator broker killed, then
    a new member after the group stopped: every record is read by exactly one member, once; while the group is
    stopped `raftbus groups describe` shows its lag."""
    client, options = CLIENTS[variant]
    topic = group = f"g-{variant}"
    create_topic(cluster, topic, partitions=PARTITIONS)
    produced = Produced()
    bootstrap, logs = cluster.kafka_bootstrap, tmp_path
    a, b = (Member(client, bootstrap, topic, group, name, *options, log_dir=logs) for name in ("a", "b"))
    members = [a, b]
    try:
        wait_until(lambda: _covered([a, b]), 60, 0.2, what="a and b share the partitions")
        wait_read(members, produced.more(cluster, topic))

        # c joins: a rebalance over three members
        c = Member(client, bootstrap, topic, group, "c", *options, log_dir=logs)
        members.append(c)
        wait_until(lambda: c.assignment and _covered([a, b, c]), 60, 0.2, what="c joins with partitions")
        wait_read(members, produced.more(cluster, topic))

        c.stop()  # leaves: its partitions go back to a and b
        wait_until(lambda: _covered([a, b]), 60, 0.2, what="a and b share the partitions after c left")
        wait_read(members, produced.more(cluster, topic))

        b.kill()  # no LeaveGroup: its partitions move once its session times out
        wait_read(members, produced.more(cluster, topic), timeout_s=90)
        assert _covered([a])

        coordinator = _controller(cluster)
        cluster.broker(coordinator).kill()
        try:
            wait_read(members, produced.more(cluster, topic), timeout_s=120)
        finally:
            cluster.broker(coordinator).start()

        a.stop()  # the group is empty; what comes next is read from its committed offsets by a new member
        before = len(produced)
        produced.more(cluster, topic)
        assert sum(_lag(cluster, group).values()) == len(produced) - before
        d = Member(client, bootstrap, topic, group, "d", *options, log_dir=logs)
        members.append(d)
        wait_read(members, set(produced), timeout_s=60)
        assert_exactly_once(members, produced)
    finally:
        for member in members:
            member.kill()


def test_static_members_rejoin_without_a_rebalance(cluster, tmp_path):
    """Goal: a static member (group.instance.id) killed and restarted within its session timeout gets its
    partitions back without a rebalance: the other member's assignment never changes, and every record is read
    once."""
    topic = group = "g-static"
    create_topic(cluster, topic, partitions=PARTITIONS)
    produced = Produced()
    bootstrap = cluster.kafka_bootstrap
    static = ("--session-timeout-ms", str(STATIC_SESSION_TIMEOUT_MS))
    a = Member("confluent", bootstrap, topic, group, "a", "--instance", "static-a", *static, log_dir=tmp_path)
    b = Member("confluent", bootstrap, topic, group, "b", "--instance", "static-b", *static, log_dir=tmp_path)
    members = [a, b]
    try:
        wait_until(lambda: _covered([a, b]), 60, 0.2, what="a and b share the partitions")
        wait_read(members, produced.more(cluster, topic))
        a_assignments, b_partitions = len(a.assignments), b.assignment
        b.kill()
        b2 = Member("confluent", bootstrap, topic, group, "b2", "--instance", "static-b", *static, log_dir=tmp_path)
        members.append(b2)
        wait_until(lambda: b2.assignment == b_partitions, 30, 0.2, what="b's instance gets its partitions back")
        wait_read(members, produced.more(cluster, topic))
        assert len(a.assignments) == a_assignments and _covered([a, b2])
        assert_exactly_once(members, produced)
    finally:
        for member in members:
            member.kill()


def test_one_namespace_of_groups_across_the_kafka_and_grpc_ports(cluster, tmp_path):
    """Goal: offsets a Kafka group commits are where a raftbus Consumer of the same group resumes, and the reverse;
    the brokers' metrics, the HTTP gateway and its dashboard show the Kafka group's lag; a raftbus member joining while a Kafka member holds the group
    gets INCONSISTENT_GROUP_PROTOCOL; `raftbus groups reset-offsets` moves where the Kafka group resumes."""
    from tests.system.http_gateway import Api, running_gateway
    from tests.system.test_metrics import metrics_urls, scrape, total
    from confluent_kafka import Consumer as KafkaConsumer
    from confluent_kafka import TopicPartition as KafkaPartition

    from raftbus.client import Consumer, TopicPartition, errors

    topic = group = "g-cross"
    create_topic(cluster, topic, partitions=1)
    produce(cluster.kafka_bootstrap, topic, [f"x{i}" for i in range(30)])

    def kafka_member():
        member = KafkaConsumer({"bootstrap.servers": cluster.kafka_bootstrap, "group.id": group,
                                "enable.auto.commit": False, "auto.offset.reset": "earliest"})
        member.subscribe([topic])
        return member

    def first_offset(member) -> int:
        message = wait_until(lambda: member.poll(0.5), 60, 0, what="a record for the Kafka member")
        assert message.error() is None
        return message.offset()

    member = kafka_member()
    try:
        assert first_offset(member) == 0
        member.commit(offsets=[KafkaPartition(topic, 0, 10)], asynchronous=False)
        urls = wait_until(lambda: metrics_urls(cluster.bootstrap), 30, 0.5, what="every broker's metrics_url")
        wait_until(lambda: total([scrape(u) for u in urls], "raftbus_group_lag_records", group=group) == 20, 30,
                   0.5, what="the Kafka group's lag (30 records, 10 committed) in the metrics")
        with running_gateway(cluster.bootstrap, tmp_path / "gateway.log", "--anonymous", "kafka-tier") as gateway:
            api = Api(gateway.url)
            described = api.ok("GET", f"/v1/groups/{group}")
            assert described["lag_records"] == 20 and len(described["members"]) == 1
            assert [(p["partition"], p["committed_offset"]) for p in described["partitions"]] == [(0, 10)]
            shown = [g for g in api.ok("GET", "/v1/dashboard")["groups"]["items"] if g["name"] == group]
            assert shown and shown[0]["lag_records"] == 20 and shown[0]["members"] == 1
        with pytest.raises(errors.InconsistentGroupProtocol):
            with Consumer(cluster.bootstrap, group=group, topics=[topic], auto_offset_reset="earliest") as other:
                other.poll(10.0)
    finally:
        member.close()

    with Consumer(cluster.bootstrap, group=group, topics=[topic], auto_offset_reset="earliest",
                  enable_auto_commit=False) as consumer:
        records = wait_until(lambda: list(consumer.poll(1.0)), 60, 0, what="records for the raftbus Consumer")
        assert records[0].offset == 10  # the Kafka group's commit
        consumer.commit({TopicPartition(topic, 0): 25})

    member = kafka_member()
    try:
        assert first_offset(member) == 25  # the raftbus Consumer's commit
    finally:
        member.close()
    cli = [sys.executable, "-c", "from raftbus.cli import main; raise SystemExit(main())", "groups",
           "reset-offsets", group, "--topic", topic, "--to-offset", "5", "--bootstrap", cluster.bootstrap]
    done = wait_until(lambda: _succeeded(cli), 30, 0.5, what="reset-offsets once the group is empty")
    assert done.returncode == 0
    member = kafka_member()
    try:
        assert first_offset(member) == 5
    finally:
        member.close()


def _succeeded(cmd):
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    return done if done.returncode == 0 else None
