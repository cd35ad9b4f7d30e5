"""Goal: the real Kafka clients (confluent-kafka, kafka-python, aiokafka, kcat) administer, produce to and read
raftbus through the Kafka port unchanged, and what they write is what the raftbus SDK reads (and back), at the
same offsets with the same keys, values, headers and timestamps."""
from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewPartitions, NewTopic

from tests.helpers import wait_until
from tests.kafka.conftest import consume_all, create_topic, kcat

pytestmark = pytest.mark.kafka
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def _produce(bootstrap: str, topic: str, rows, **config) -> list:
    """Produce (key, value, headers, timestamp, partition) rows; the delivery reports, every one checked."""
    reports = []
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all", **config})
    for key, value, headers, timestamp, partition in rows:
        extra = {"partition": partition} if partition is not None else {}
        producer.produce(topic, value=value, key=key, headers=headers, timestamp=timestamp or 0,
                         on_delivery=lambda err, msg: reports.append((err, msg)), **extra)
    assert producer.flush(30) == 0
    assert [err for err, _ in reports if err is not None] == []
    return [msg for _, msg in reports]


def test_admin_create_describe_alter_grow_delete(cluster):
    """Goal: AdminClient creates a topic, lists it with leaders, describes and alters its configs, grows its
    partitions and deletes it; bad requests get Kafka's errors."""
    admin = AdminClient({"bootstrap.servers": cluster.kafka_bootstrap})
    create_topic(cluster, "adm", partitions=2, config={"retention.ms": "3600000"})
    described = admin.describe_configs([ConfigResource("TOPIC", "adm")])
    configs = list(described.values())[0].result(10)
    assert configs["retention.ms"].value == "3600000" and configs["cleanup.policy"].value == "delete"
    assert configs["message.timestamp.type"].value == "CreateTime"
    resource = ConfigResource("TOPIC", "adm", incremental_configs=[
        ConfigEntry("retention.bytes", "1048576", incremental_operation=AlterConfigOpType.SET)])
    list(admin.incremental_alter_configs([resource]).values())[0].result(10)
    configs = list(admin.describe_configs([ConfigResource("TOPIC", "adm")]).values())[0].result(10)
    assert configs["retention.bytes"].value == "1048576"
    admin.create_partitions([NewPartitions("adm", 4)])["adm"].result(30)
    wait_until(lambda: len(admin.list_topics("adm", timeout=5).topics["adm"].partitions) == 4, 20)
    with pytest.raises(KafkaException) as exists:
        admin.create_topics([NewTopic("adm", 1, 1)])["adm"].result(10)
    assert exists.value.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS
    with pytest.raises(KafkaException) as bad_name:
        admin.create_topics([NewTopic("bad/name", 1, 1)])["bad/name"].result(10)
    assert bad_name.value.args[0].code() == KafkaError.TOPIC_EXCEPTION
    with pytest.raises(KafkaException) as bad_config:
        admin.create_topics([NewTopic("cfg", 1, 1, config={"segment.ms": "1"})])["cfg"].result(10)
    assert bad_config.value.args[0].code() == KafkaError.INVALID_CONFIG
    with pytest.raises(KafkaException) as shrink:
        admin.create_partitions([NewPartitions("adm", 2)])["adm"].result(10)
    assert shrink.value.args[0].code() == KafkaError.INVALID_PARTITIONS
    admin.delete_topics(["adm"])["adm"].result(30)
    wait_until(lambda: admin.list_topics("adm", timeout=5).topics["adm"].error is not None, 20)
    cluster_view = admin.describe_cluster().result(10)
    assert sorted(n.port for n in cluster_view.nodes) == sorted(cluster.kafka_ports)


def test_kafka_python_admin_describes_cluster_and_topics(cluster):
    """Goal: kafka-python's admin client lists topics and describes the cluster by Kafka addresses."""
    from kafka.admin import KafkaAdminClient, NewTopic as KNewTopic

    admin = KafkaAdminClient(bootstrap_servers=cluster.kafka_bootstrap)
    try:
        admin.create_topics([KNewTopic("kpadm", 2, 3)])
        # Metadata goes to any broker, which may not have applied the creation yet (as in Kafka)
        wait_until(lambda: "kpadm" in admin.list_topics(), 20, what="kpadm listed")
        ports = sorted(b["port"] for b in admin.describe_cluster()["brokers"])
        assert ports == sorted(cluster.kafka_ports)
        admin.delete_topics(["kpadm"])
    finally:
        admin.close()


@pytest.mark.parametrize("codec", CODECS)
def test_produce_each_codec_keyed_keyless_headers(cluster, codec):
    """Goal: keyed and keyless records with headers, compressed by each codec, come back exactly, at the offsets
    their delivery reports named."""
    topic = f"codec-{codec}"
    create_topic(cluster, topic, partitions=1)
    rows = [(None if i % 3 == 0 else b"key-%d" % i, b"value-%d" % i * (i % 7 + 1),
             [("n", b"%d" % i), ("empty", b"")] if i % 2 else None, 1_700_000_000_000 + i, 0) for i in range(200)]
    reports = _produce(cluster.kafka_bootstrap, topic, rows, **{"compression.type": codec})
    assert sorted(m.offset() for m in reports) == list(range(200))
    got = consume_all(cluster.kafka_bootstrap, topic, [0], 200)
    assert [(m.offset(), m.key(), m.value(), m.headers() or None, m.timestamp()[1]) for m in got] == [
        (i, key, value, headers, ts) for i, (key, value, headers, ts, _) in enumerate(rows)]


def test_fetch_from_earliest_latest_and_a_timestamp(cluster):
    """Goal: ListOffsets answers earliest, latest and the first record at or after a time, and fetching from
    each gives the records from there on."""
    from confluent_kafka import Consumer

    create_topic(cluster, "times", partitions=1)
    rows = [(None, b"t%d" % i, None, 1_700_000_000_000 + 1000 * i, 0) for i in range(50)]
    _produce(cluster.kafka_bootstrap, "times", rows, **{"linger.ms": 0, "batch.num.messages": 7})
    consumer = Consumer({"bootstrap.servers": cluster.kafka_bootstrap, "group.id": "times"})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition("times", 0), timeout=10)
        assert (low, high) == (0, 50)
        found = consumer.offsets_for_times([TopicPartition("times", 0, 1_700_000_000_000 + 20_500)], timeout=10)
        assert found[0].offset == 21
        after_all = consumer.offsets_for_times([TopicPartition("times", 0, 1_800_000_000_000)], timeout=10)
        assert after_all[0].offset == -1
    finally:
        consumer.close()
    from_time = consume_all(cluster.kafka_bootstrap, "times", [0], 29)
    assert from_time[21].value() == b"t21"
    latest = subprocess.run([kcat(), "-b", cluster.kafka_bootstrap, "-C", "-t", "times", "-o", "-3", "-e",
                             "-f", "%o %s\n"], capture_output=True, text=True, timeout=30)
    assert latest.stdout.split("\n")[:3] == ["47 t47", "48 t48", "49 t49"]
    at_time = subprocess.run([kcat(), "-b", cluster.kafka_bootstrap, "-C", "-t", "times", "-o",
                              f"s@{1_700_000_000_000 + 40_000}", "-e", "-f", "%o %T\n"],
                             capture_output=True, text=True, timeout=30)
    assert at_time.stdout.split("\n")[0] == f"40 {1_700_000_000_000 + 40_000}"


def test_log_append_time_topic_stamps_the_leaders_time(cluster):
    """Goal: a topic with message.timestamp.type=LogAppendTime gives every record the leader's append time
    (reported in the produce answer and read back as LOG_APPEND_TIME), whatever the producer set."""
    from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME

    create_topic(cluster, "lat", partitions=1, config={"message.timestamp.type": "LogAppendTime"})
    before = int(time.time() * 1000)
    reports = _produce(cluster.kafka_bootstrap, "lat", [(None, b"x%d" % i, None, 1000 + i, 0) for i in range(5)])
    assert all(m.timestamp()[0] == TIMESTAMP_LOG_APPEND_TIME and m.timestamp()[1] >= before for m in reports)
    got = consume_all(cluster.kafka_bootstrap, "lat", [0], 5)
    assert {(m.timestamp()[0], m.timestamp()[1] >= before) for m in got} == {(TIMESTAMP_LOG_APPEND_TIME, True)}


def test_kafka_python_and_aiokafka_produce_and_consume(cluster):
    """Goal: kafka-python and aiokafka (an idempotent producer) write and read the same partitions."""
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTP

    create_topic(cluster, "pyclients", partitions=2)
    producer = KafkaProducer(bootstrap_servers=cluster.kafka_bootstrap, acks="all", compression_type="gzip")
    sent = [producer.send("pyclients", key=b"k%d" % (i % 4), value=b"kp-%d" % i, headers=[("h", b"1")])
            for i in range(40)]
    producer.flush()
    assert all(f.get(10).offset >= 0 for f in sent)
    producer.close()

    async def aio():
        from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
        from aiokafka import TopicPartition as ATP

        aproducer = AIOKafkaProducer(bootstrap_servers=cluster.kafka_bootstrap, enable_idempotence=True)
        await aproducer.start()
        try:
            for i in range(40):
                await aproducer.send_and_wait("pyclients", b"aio-%d" % i, key=b"k%d" % (i % 4))
        finally:
            await aproducer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=cluster.kafka_bootstrap, auto_offset_reset="earliest")
        await consumer.start()
        try:
            consumer.assign([ATP("pyclients", 0), ATP("pyclients", 1)])
            await consumer.seek_to_beginning()
            values = []
            deadline = time.monotonic() + 20
            while len(values) < 80 and time.monotonic() < deadline:
                for records in (await consumer.getmany(timeout_ms=500)).values():
                    values += [r.value for r in records]
            return values
        finally:
            await consumer.stop()

    aio_values = asyncio.run(aio())
    consumer = KafkaConsumer(bootstrap_servers=cluster.kafka_bootstrap, consumer_timeout_ms=3000)
    consumer.assign([KTP("pyclients", 0), KTP("pyclients", 1)])
    consumer.seek_to_beginning()
    kp_values = [r.value for r in consumer]
    consumer.close()
    expected = sorted([b"kp-%d" % i for i in range(40)] + [b"aio-%d" % i for i in range(40)])
    assert sorted(aio_values) == expected and sorted(kp_values) == expected


def test_kafka_writes_read_by_the_sdk_and_sdk_writes_read_by_kafka(cluster):
    """Goal: records produced through the Kafka port are read by the SDK's Reader and `raftbus consume` at the
    same offsets with the same keys, values, headers and timestamps, and the SDK's are read by Kafka clients."""
    from raftbus.client import Producer as SdkProducer
    from raftbus.client.reader import Reader

    create_topic(cluster, "cross", partitions=1)
    kafka_rows = [(b"k%d" % i, b"from-kafka-%d" % i, [("src", b"kafka")], 1_700_000_000_000 + i, 0)
                  for i in range(30)]
    _produce(cluster.kafka_bootstrap, "cross", kafka_rows, **{"compression.type": "lz4"})
    with SdkProducer(cluster.bootstrap) as producer:
        futures = [producer.send("cross", b"from-sdk-%d" % i, key=b"s%d" % i, headers=[("src", b"sdk")],
                                 partition=0) for i in range(30)]
        producer.flush()
    assert [f.result(10).offset for f in futures] == list(range(30, 60))
    with Reader(cluster.bootstrap) as reader:
        sdk_view = list(reader.iter_partition("cross", 0, 0, stop_at_end=True))
    assert [(r.offset, r.key, r.value, r.headers, r.timestamp_ms) for r in sdk_view[:30]] == [
        (i, key, value, tuple(headers), ts) for i, (key, value, headers, ts, _) in enumerate(kafka_rows)]
    kafka_view = consume_all(cluster.kafka_bootstrap, "cross", [0], 60)
    assert [(m.offset(), m.key(), m.value(), m.headers(), m.timestamp()[1]) for m in kafka_view] == [
        (r.offset, r.key, r.value, list(r.headers), r.timestamp_ms) for r in sdk_view]
    cli = subprocess.run([str(Path(sys.executable).parent / "raftbus"), "--bootstrap", cluster.bootstrap, "--json", "consume", "cross", "--group",
                          "cross-cli", "--from-beginning", "--max", "60"], capture_output=True, text=True,
                         timeout=60)
    rows = [json.loads(line) for line in cli.stdout.splitlines() if line.startswith("{")]
    assert [(r["offset"], r["value"]) for r in rows[:2]] == [(0, "from-kafka-0"), (1, "from-kafka-1")]


def test_kcat_lists_produces_and_consumes(cluster):
    """Goal: kcat -L names the brokers by their Kafka addresses and each partition's leader; -P writes and -C
    reads back the same lines and keys."""
    create_topic(cluster, "kc", partitions=2)

    def listed():
        listing = subprocess.run([kcat(), "-b", cluster.kafka_bootstrap, "-L", "-t", "kc", "-J"],
                                 capture_output=True, text=True, timeout=30)
        meta = json.loads(listing.stdout)
        partitions = meta["topics"][0]["partitions"]
        return all(p["leader"] in (1, 2, 3) and len(p["isrs"]) >= 2 for p in partitions) and meta

    meta = wait_until(listed, 20, 0.2, what="kcat -L naming leaders and in-sync replicas")
    assert sorted(b["name"] for b in meta["brokers"]) == sorted(cluster.kafka_address(n) for n in range(1, 4))
    assert len(meta["topics"][0]["partitions"]) == 2
    lines = "".join(f"key{i % 2}:line {i}\n" for i in range(20))
    produced = subprocess.run([kcat(), "-b", cluster.kafka_bootstrap, "-P", "-t", "kc", "-K", ":"], input=lines,
                              capture_output=True, text=True, timeout=30)
    assert produced.returncode == 0, produced.stderr
    consumed = subprocess.run([kcat(), "-b", cluster.kafka_bootstrap, "-C", "-t", "kc", "-o", "beginning", "-e",
                               "-f", "%k %s\n"], capture_output=True, text=True, timeout=30)
    assert sorted(consumed.stdout.splitlines()) == sorted(f"key{i % 2} line {i}" for i in range(20))


def test_queue_topics_answer_invalid_request_naming_their_kind(cluster):
    """Goal: a Kafka producer writing to a queue topic gets INVALID_REQUEST, and the message says it is a queue
    topic; nothing is enqueued."""
    from raftbus.client import Admin

    with Admin(cluster.bootstrap) as admin:
        admin.create_topic("work", partitions=1, replication_factor=3, kind="queue")
    errors = []
    producer = Producer({"bootstrap.servers": cluster.kafka_bootstrap, "message.timeout.ms": 5000})
    producer.produce("work", b"job", partition=0, on_delivery=lambda err, msg: errors.append(err))
    producer.flush(15)
    assert errors and errors[0] is not None
    assert errors[0].code() in (KafkaError.INVALID_REQUEST, KafkaError._MSG_TIMED_OUT)
    from tests.kafka_wire import parse_response, read_frame, request_frame
    import socket
    from kio.schema.produce.v9.request import ProduceRequest
    from raftbus.broker.kafka.schema import make
    from raftbus.client import kafka_batch

    body = make(ProduceRequest, {"acks": -1, "timeout": 5000, "topic_data": [{"name": "work", "partition_data": [
        {"index": 0, "records": kafka_batch.encode_batch([(1, None, b"job", ())])}]}]})
    with socket.create_connection(("127.0.0.1", cluster.kafka_ports[0]), timeout=10) as sock:
        sock.sendall(request_frame(0, 9, 1, body))
        _, answer = parse_response(0, 9, read_frame(sock))
    partition = answer.responses[0].partition_responses[0]
    assert partition.error_code == 42 and "queue topic" in partition.error_message
