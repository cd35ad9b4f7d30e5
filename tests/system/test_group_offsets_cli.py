"""System test: `raftbus groups reset-offsets` through real brokers rewinds a stopped group so its next consumer
reads the topic again, shows a dry run without changing anything, and refuses while the group has members."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from raftbus.client import Admin, Consumer, Producer
from tests.helpers import wait_until

pytestmark = pytest.mark.system

TOPIC = "ledger"
GROUP = "auditors"
RECORDS = 20


def raftbus_cli(bootstrap: str, *argv: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-c", "from raftbus.client.cli import main; raise SystemExit(main())",
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
