"""System test of operator commands through real brokers: `raftbus groups reset-offsets` rewinds a stopped group
so its next consumer reads the topic again, shows a dry run without changing anything, and refuses while the group
has members; `raftbus topics alter` changes retention and queue options, and a lowered max_deliveries takes
effect on the next delivery."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from raftbus.client import Admin, Consumer, Producer, QueueConsumer
from tests.helpers import wait_until
from tests.system.conftest import running_cluster

pytestmark = pytest.mark.system

TOPIC = "ledger"
GROUP = "auditors"
RECORDS = 20


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with running_cluster(tmp_path_factory.mktemp("operator-cluster")) as running:
        yield running


def raftbus_cli(bootstrap: str, *argv: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-c", "from raftbus.cli import main; raise SystemExit(main())",
               "--bootstrap", bootstrap, *argv]
    return subprocess.run(command, capture_output=True, text=True, timeout=60)


def consume_all(bootstrap: str, expected: int) -> tuple[Consumer, list]:
    """A group member that read `expected` records and committed them; the caller closes it."""
    consumer = Consumer(bootstrap, group=GROUP, topics=[TOPIC], auto_offset_reset="earliest")
    seen = []

    def read_all():
        seen.extend(consumer.poll(timeout_s=0.5, max_records=500))
        return len(seen) >= expected
    wait_until(read_all, 30, what=f"{expected} records consumed")
    consumer.commit()
    return consumer, seen


def committed(bootstrap: str) -> dict[int, int | None]:
    with Admin(bootstrap) as admin:
        return {p.partition: p.committed_offset for p in admin.describe_group(GROUP).partitions}


def test_reset_offsets_rewinds_a_stopped_group(cluster):
    with Admin(cluster.bootstrap) as admin:
        admin.create_topic(TOPIC, partitions=2, replication_factor=3)
    with Producer(cluster.bootstrap) as producer:
        for i in range(RECORDS):
            producer.send(TOPIC, f"entry-{i}", partition=i % 2)
    consumer, _ = consume_all(cluster.bootstrap, RECORDS)
    consumer.close()
    assert committed(cluster.bootstrap) == {0: RECORDS // 2, 1: RECORDS // 2}

    dry = raftbus_cli(cluster.bootstrap, "groups", "reset-offsets", GROUP, "--topic", TOPIC, "--to-offset", "3",
                      "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    assert json.loads(dry.stdout)["offsets"] == [{"topic": TOPIC, "partition": 0, "offset": 3},
                                                 {"topic": TOPIC, "partition": 1, "offset": 3}]
    assert committed(cluster.bootstrap) == {0: RECORDS // 2, 1: RECORDS // 2}

    done = raftbus_cli(cluster.bootstrap, "groups", "reset-offsets", GROUP, "--topic", TOPIC, "--to-earliest")
    assert done.returncode == 0, done.stderr
    assert "NEW_OFFSET" in done.stdout
    assert committed(cluster.bootstrap) == {0: 0, 1: 0}

    again, seen = consume_all(cluster.bootstrap, RECORDS)
    try:
        assert sorted(r.value for r in seen) == sorted(f"entry-{i}".encode() for i in range(RECORDS))
        refused = raftbus_cli(cluster.bootstrap, "groups", "reset-offsets", GROUP, "--topic", TOPIC, "--to-latest")
        assert refused.returncode == 1 and "GROUP_NOT_EMPTY" in refused.stderr
    finally:
        again.close()


def test_topics_alter_changes_retention_and_queue_options(cluster):
    with Admin(cluster.bootstrap) as admin:
        admin.create_topic("chores", partitions=1, replication_factor=3, kind="queue", max_deliveries=5,
                           backoff_base_ms=100, backoff_max_ms=200)
    done = raftbus_cli(cluster.bootstrap, "topics", "alter", "chores", "--retention-ms", "-1", "--max-deliveries", "1",
                       "--json")
    assert done.returncode == 0, done.stderr
    described = json.loads(done.stdout)
    assert described["retention_ms"] == -1 and described["queue"]["max_deliveries"] == 1
    refused = raftbus_cli(cluster.bootstrap, "topics", "alter", "chores.dlq", "--max-deliveries", "3")
    assert refused.returncode == 1 and "INVALID_ARGUMENT" in refused.stderr
    with Producer(cluster.bootstrap) as producer:
        producer.send("chores", b"fails once").result()
    with QueueConsumer(cluster.bootstrap, topics="chores", visibility_ms=1_000) as consumer:
        leased = wait_until(lambda: consumer.poll(0.5), 20, what="the message leased")
        leased[0].nack(reason="boom").result()  # one delivery is now the limit: dead-lettered, not retried
    with QueueConsumer(cluster.bootstrap, topics="chores.dlq") as dead:
        moved = wait_until(lambda: dead.poll(0.5), 30, what="the message in chores.dlq")
        # moved with its history (one delivery, its error, where it came from), then leased here once more
        assert (moved[0].value, moved[0].last_error, moved[0].delivery_count) == (b"fails once", "boom", 2)
        assert moved[0].origin_id == leased[0].message_id
        moved[0].ack().result()
