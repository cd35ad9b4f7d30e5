"""System test of the Prometheus metrics: three real brokers with metrics_listen on port 0, each broker's URL
found through `raftbus cluster status --json`, and the scraped values following produce, consume and lease."""
from __future__ import annotations

import json
import subprocess
import sys
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from raftbus.client import Admin, Consumer, Producer, Queues, TopicPartition, errors
from tests.helpers import wait_until
from tests.observability import exported, queried_metric_names
from tests.system.conftest import running_cluster

pytestmark = pytest.mark.system

STREAM, QUEUE, GROUP = "metered", "metered-jobs", "metered-readers"


def scrape(url: str) -> list[tuple[str, dict, float]]:
    """Every sample of one broker's /metrics as (name, labels, value)."""
    with urllib.request.urlopen(url, timeout=10) as answer:
        assert answer.headers["Content-Type"].startswith("text/plain")
        text = answer.read().decode()
    return [(s.name, s.labels, s.value) for family in text_string_to_metric_families(text) for s in family.samples]


def total(samples_by_broker: list, name: str, **labels) -> float:
    """Sum of `name` over brokers among the samples whose labels include `labels`."""
    return sum(value for samples in samples_by_broker for sample_name, sample_labels, value in samples
               if sample_name == name and labels.items() <= sample_labels.items())


def metrics_urls(bootstrap: str) -> list[str]:
    """Each broker's metrics_url, as `raftbus cluster status --json` prints them."""
    command = [sys.executable, "-c", "from raftbus.cli import main; raise SystemExit(main())",
               "--bootstrap", bootstrap, "cluster", "status", "--json"]
    out = subprocess.run(command, capture_output=True, text=True, timeout=60, check=True).stdout
    brokers = json.loads(out)["brokers"]
    urls = [b["metrics_url"] for b in brokers]
    assert len(urls) == 3 and all(u.startswith("http://127.0.0.1:") and u.endswith("/metrics") for u in urls), urls
    return urls


def test_metrics_follow_produce_consume_and_lease(tmp_path):
    """Records in/out, offsets, ISR, group lag and queue counts on /metrics move with what clients do."""
    with running_cluster(tmp_path, env={"RAFTBUS_METRICS_LISTEN": "127.0.0.1:0"}) as cluster:
        urls = wait_until(lambda: metrics_urls(cluster.bootstrap), 30, 0.5, what="every broker's metrics_url")

        def everyone():
            return [scrape(url) for url in urls]

        with Admin(cluster.bootstrap) as admin:
            admin.create_topic(STREAM, partitions=1, replication_factor=3)
            admin.create_topic(QUEUE, partitions=1, replication_factor=3, kind="queue")
            with pytest.raises(errors.UnknownTopic):
                admin.describe_topic("no-such-topic")
        with Producer(cluster.bootstrap, linger_ms=1) as producer:
            for i in range(5):
                producer.send(STREAM, f"record-{i}".encode()).result(30)
            for i in range(4):
                producer.send(QUEUE, f"job-{i}".encode()).result(30)

        def produced():
            samples = everyone()
            return (total(samples, "raftbus_partition_records_in_total", topic=STREAM, partition="0") == 5
                    and total(samples, "raftbus_partition_high_watermark", topic=STREAM) == 5
                    and total(samples, "raftbus_queue_messages", topic=QUEUE, state="ready") == 4) and samples
        samples = wait_until(produced, 30, 0.3, what="the produced records on /metrics")
        assert total(samples, "raftbus_partition_bytes_in_total", topic=STREAM) > 0
        assert total(samples, "raftbus_partition_leader", topic=STREAM) == 1  # one leader, two followers
        assert total(samples, "raftbus_partition_in_sync_replicas", topic=STREAM) == 3
        assert total(samples, "raftbus_partition_under_replicated", topic=STREAM) == 0
        assert total(samples, "raftbus_partition_commit_latency_seconds_count", topic=STREAM) >= 5
        assert total(samples, "raftbus_queue_messages", topic=QUEUE, state="in_flight") == 0
        assert total(samples, "raftbus_controller") == 1
        assert total(samples, "raftbus_broker_draining") == 0 and len([s for s in samples
                                                                       if total([s], "raftbus_broker_id") > 0]) == 3
        assert total(samples, "raftbus_raft_role_changes_total", role="leader") >= 3  # metadata + 2 partitions
        assert total(samples, "raftbus_grpc_calls_total", method="DescribeTopic", code="NOT_FOUND") >= 1
        assert all(total([s], "raftbus_disk_free_bytes") > 0 for s in samples)
        # every broker offered GCM frame tags, so each sends GMAC-tagged frames to both of its peers
        assert [total([s], "raftbus_raft_transport_peers_gcm_tagged") for s in samples] == [2, 2, 2]

        with Consumer(cluster.bootstrap, group=GROUP, topics=[STREAM], auto_offset_reset="earliest") as consumer:
            wait_until(lambda: consumer.poll(0.5) is not None and consumer.assignment(), 30,
                       what="a partition assigned")
            consumer.commit({TopicPartition(STREAM, 0): 2})

            def lagging():
                samples = everyone()
                lag = total(samples, "raftbus_group_lag_records", group=GROUP, topic=STREAM, partition="0")
                return lag == 3 and samples
            samples = wait_until(lagging, 30, 0.3, what="group lag of 3 records")
            assert total(samples, "raftbus_group_lag_seconds", group=GROUP, topic=STREAM) >= 0
        assert any(name == "raftbus_group_lag_seconds" and labels.get("group") == GROUP
                   for s in samples for name, labels, _ in s)

        with Queues(cluster.bootstrap) as queues:
            leased = queues.lease(QUEUE, 0, max_messages=1, visibility_ms=60_000)
            assert len(leased) == 1

            def one_leased():
                samples = everyone()
                return (total(samples, "raftbus_queue_messages", topic=QUEUE, state="ready") == 3
                        and total(samples, "raftbus_queue_messages", topic=QUEUE, state="in_flight") == 1
                        and samples)
            samples = wait_until(one_leased, 30, 0.3, what="one leased message on /metrics")
            assert total(samples, "raftbus_partition_records_out_total", topic=QUEUE) == 1
            assert total(samples, "raftbus_queue_oldest_ready_age_seconds", topic=QUEUE) >= 0
            assert any(name == "raftbus_queue_oldest_ready_age_seconds" for s in samples for name, _, _ in s)
            names = {name for s in samples for name, _, _ in s}
            missing = {n for n in queried_metric_names() if not exported(n, names)}
            assert not missing, f"the dashboard or alert rules query metrics no broker exports: {missing}"
            queues.ack(leased[0]).result(30)
        assert total(everyone(), "raftbus_partition_records_out_total", topic=STREAM) >= 5

        with Admin(cluster.bootstrap) as admin:
            admin.drain_broker(1, wait=False)
            wait_until(lambda: total([scrape(urls[0])], "raftbus_broker_draining") == 1, 30, 0.3,
                       what="broker 1 reporting that it drains")
            admin.undrain_broker(1)
            wait_until(lambda: total([scrape(urls[0])], "raftbus_broker_draining") == 0, 30, 0.3,
                       what="broker 1 reporting that it no longer drains")


def test_metrics_off_by_default(tmp_path):
    """Without metrics_listen a broker serves no metrics and reports an empty metrics_url."""
    with running_cluster(tmp_path) as cluster:
        with Admin(cluster.bootstrap) as admin:
            assert [b.metrics_url for b in admin.cluster_status().brokers] == ["", "", ""]
