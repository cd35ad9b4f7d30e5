"""Goal: Kafka clients create, configure and read compacted topics through the Kafka port: cleanup.policy and the
compaction configs at CreateTopics, DescribeConfigs and IncrementalAlterConfigs; a keyless record is refused with
INVALID_RECORD; a consumer reads a compacted partition across its gaps and finds every key's latest value."""
from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from raftbus.client import Admin, Table
from tests.helpers import wait_until
from tests.kafka.conftest import consume_all, create_topic, kafka_cluster

pytestmark = pytest.mark.kafka


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    env = {"RAFTBUS_COMPACTION_CHECK_INTERVAL_MS": "200"}
    with kafka_cluster(tmp_path_factory.mktemp("compacted"), env=env) as running:
        yield running


def configs_of(admin: AdminClient, topic: str) -> dict:
    return {k: v.value for k, v in list(admin.describe_configs([ConfigResource("TOPIC", topic)]).values())[0]
            .result(10).items()}


def test_compaction_configs_are_created_described_and_altered(cluster):
    """Goal: CreateTopics takes cleanup.policy and the compaction configs, DescribeConfigs shows them and
    IncrementalAlterConfigs changes and resets them; an unknown policy is INVALID_CONFIG."""
    admin = AdminClient({"bootstrap.servers": cluster.kafka_bootstrap})
    create_topic(cluster, "kcfg", partitions=1, config={"cleanup.policy": "compact", "min.compaction.lag.ms": "5000",
                                                        "delete.retention.ms": "60000"})
    configs = configs_of(admin, "kcfg")
    assert (configs["cleanup.policy"], configs["min.compaction.lag.ms"], configs["delete.retention.ms"]) == \
        ("compact", "5000", "60000")
    with Admin(cluster.bootstrap) as raftbus_admin:
        assert raftbus_admin.describe_topic("kcfg").cleanup_policy == "compact"
    resource = ConfigResource("TOPIC", "kcfg", incremental_configs=[
        ConfigEntry("cleanup.policy", "delete,compact", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("min.compaction.lag.ms", None, incremental_operation=AlterConfigOpType.DELETE)])
    list(admin.incremental_alter_configs([resource]).values())[0].result(10)
    configs = configs_of(admin, "kcfg")
    assert (configs["cleanup.policy"], configs["min.compaction.lag.ms"]) == ("compact,delete", "0")
    bad = ConfigResource("TOPIC", "kcfg", incremental_configs=[
        ConfigEntry("cleanup.policy", "shred", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException) as refused:
        list(admin.incremental_alter_configs([bad]).values())[0].result(10)
    assert refused.value.args[0].code() == KafkaError.INVALID_CONFIG


def test_a_consumer_reads_a_compacted_topic_across_its_gaps(cluster):
    """Goal: confluent-kafka produces keyed records, compaction removes the superseded ones, and a consumer from
    the beginning sees the gaps and every key's latest value; what the SDK's Table reads agrees; a keyless record
    is refused (INVALID_RECORD) and nothing is stored."""
    create_topic(cluster, "kcompact", partitions=1, config={"cleanup.policy": "compact", "segment.bytes": "1"})
    producer = Producer({"bootstrap.servers": cluster.kafka_bootstrap, "linger.ms": 0, "acks": "all",
                         "enable.idempotence": True})
    reports = []
    producer.produce("kcompact", key=b"stable", value=b"once", on_delivery=lambda err, msg: reports.append(err))
    for i in range(59):
        producer.produce("kcompact", key=b"k%d" % (i % 6), value=b"v%d" % i,
                         on_delivery=lambda err, msg: reports.append(err))
        producer.flush(10)
    producer.flush(10)
    assert reports.count(None) == 60

    def compacted():
        with Admin(cluster.bootstrap) as admin:
            return sum(s.compaction_bytes_removed for s in admin.broker_stats()) > 0
    wait_until(compacted, 60, 0.2, what="a compaction pass")

    def read_back():
        """Every record from the beginning; done once a pass after the last append left only the latest ones (a
        pass that ran while records were still arriving covered the log below the batches it saw)."""
        messages = consume_all(cluster.kafka_bootstrap, "kcompact", [0], 60, timeout_s=3)
        offsets = [m.offset() for m in messages]
        assert offsets == [0, 54, 55, 56, 57, 58, 59], offsets
        return messages
    messages = wait_until(read_back, 60, 0.5, what="only each key's latest record left")
    latest = {m.key(): (m.value(), m.offset()) for m in messages}
    assert latest[b"stable"] == (b"once", 0)
    assert {k: v for k, (v, _) in latest.items() if k != b"stable"} == \
        {b"k%d" % (i % 6): b"v%d" % i for i in range(53, 59)}
    with Table(cluster.bootstrap, "kcompact") as table:
        assert table.get("k3").value == b"v57" and table.get("k3").revision == 58

    errors = []
    keyless = Producer({"bootstrap.servers": cluster.kafka_bootstrap, "acks": "all", "retries": 0})
    keyless.produce("kcompact", value=b"no key", on_delivery=lambda err, msg: errors.append(err))
    keyless.flush(10)
    assert errors and errors[0] is not None and errors[0].code() == KafkaError.INVALID_RECORD
