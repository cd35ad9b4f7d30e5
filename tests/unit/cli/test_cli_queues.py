"""Goal: the queue parts of `raftbus` parse their flags, call the SDK with them and print text or JSON, using
fake Admin, Queues and QueueConsumer classes."""
import json
from concurrent.futures import Future

import pytest

from raftbus.cli import app as cli
from raftbus.cli import queues as cli_queues
from raftbus.client.errors import LeaseLost, UnknownMessage
from raftbus.client.queues.messages import GroupQueueStats, Message, PartitionQueueStats, QueueStats


def message(mid, value, state="ready", settler=None):
    return Message("jobs", 0, mid, state, 1, "acme", 1, 5, 5, 0, 0, "", "", None, value, (), 5, settler)


class Calls(list):
    def record(self, *call):
        self.append(call)


@pytest.fixture
def calls(monkeypatch):
    calls = Calls()

    class Acks:
        def ack(self, m):
            calls.record("ack", m.message_id)
            future = Future()
            if m.message_id == 4:  # its lease expired while it was printed
                future.set_exception(LeaseLost("the lease expired"))
            else:
                future.set_result(None)
            return future

    class FakeAdmin:
        def __init__(self, bootstrap=None, **_):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            pass

        def describe_topic(self, name):
            calls.record("describe_topic", name)
            return type("T", (), {"kind": "queue" if name == "jobs" else "stream"})()

        def create_topic(self, name, **options):
            calls.record("create_topic", name, options)
            return cli_queues_topic()

    class FakeQueues:
        def __init__(self, bootstrap=None, **_):
            calls.record("Queues", bootstrap)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            pass

        def stats(self, topic):
            calls.record("stats", topic)
            p = PartitionQueueStats(0, 2, 1, 0, 0, 40, 1_796_000_060_000, 3, (GroupQueueStats("acme", 2, 1, 0, 0, 40),),
                                    False)
            empty = PartitionQueueStats(1, 0, 0, 0, 0, None, None, 0, (), False)
            return QueueStats.combine(topic, [p, empty], dead_lettered=4)

        def peek(self, topic, partition, state, max_messages):
            calls.record("peek", topic, partition, state, max_messages)
            return [message(1, b"a"), message(2, b"b")]

        def redrive(self, topic, max_messages):
            calls.record("redrive", topic, max_messages)
            return 3

        def get(self, topic, mid):
            calls.record("get", topic, mid)
            return message(mid, b"x")

        def delete(self, topic, ids):
            calls.record("delete", topic, ids)
            return [None if mid % 2 else UnknownMessage("gone") for mid in ids]

        def change_priority(self, topic, mid, priority, deliver_at_ms):
            calls.record("change_priority", topic, mid, priority, deliver_at_ms)
            return message(mid, b"x", state="delayed")

    class FakeConsumer:
        def __init__(self, bootstrap=None, **options):
            calls.record("QueueConsumer", options)
            self.left = [message(i, f"m{i}".encode(), "in_flight", Acks()) for i in range(1, 6)]

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            pass

        def poll(self, timeout_s, max_messages):
            taken, self.left = self.left[:max_messages], self.left[max_messages:]
            return taken

        def flush(self, timeout_s):
            calls.record("flush")

    monkeypatch.setattr(cli, "Admin", FakeAdmin)
    monkeypatch.setattr(cli_queues, "Queues", FakeQueues)
    monkeypatch.setattr(cli_queues, "QueueConsumer", FakeConsumer)
    return calls


def cli_queues_topic():
    from raftbus.client.admin import TopicDescription

    return TopicDescription("jobs", 1, "queue", "fair", -1, -1, 5, (), {"max_deliveries": 3})


def run(capsys, *argv):
    code = cli.main(["--bootstrap", "h:1", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_topics_create_passes_queue_options(calls, capsys):
    """Queue options of `topics create` reach Admin.create_topic (only the ones given)."""
    assert run(capsys, "topics", "create", "jobs", "--kind", "queue", "--ordering", "fair", "--max-deliveries", "3",
               "--max-in-flight-per-group", "2")[0] == 0
    (_, name, options), = [c for c in calls if c[0] == "create_topic"]
    assert options["max_deliveries"] == 3 and options["max_in_flight_per_group"] == 2
    assert "backoff_base_ms" not in options


def test_consume_a_queue_topic_leases_prints_and_acks(calls, capsys):
    """consume on a queue topic acks each leased message and prints it as acked (not in_flight); --max stops it."""
    code, out, _ = run(capsys, "consume", "jobs", "--max", "3")
    assert code == 0
    assert [line.split("\t")[:2] for line in out.splitlines()] == [["jobs/0#1", "acked"], ["jobs/0#2", "acked"],
                                                                     ["jobs/0#3", "acked"]]
    assert [c for c in calls if c[0] == "ack"] == [("ack", 1), ("ack", 2), ("ack", 3)]
    assert ("flush",) in calls


def test_a_refused_ack_is_an_error_line_and_exit_1(calls, capsys):
    code, out, err = run(capsys, "--json", "consume", "jobs", "--max", "5")
    assert code == 1
    assert [(json.loads(line)["message_id"], json.loads(line)["state"]) for line in out.splitlines()] == [
        (1, "acked"), (2, "acked"), (3, "acked"), (5, "acked")]
    assert err == "error: LEASE_LOST: message 4: the lease expired\n"


def test_consume_no_ack_leaves_messages_to_expire(calls, capsys):
    """--no-ack prints without acking; --json prints whole messages."""
    code, out, _ = run(capsys, "--json", "consume", "jobs", "--max", "2", "--no-ack", "--visibility-ms", "500")
    assert code == 0 and [json.loads(line)["value"] for line in out.splitlines()] == ["m1", "m2"]
    assert not [c for c in calls if c[0] == "ack"]
    (_, options), = [c for c in calls if c[0] == "QueueConsumer"]
    assert options["visibility_ms"] == 500


def test_consume_a_queue_topic_refuses_offsets_and_groups_as_the_wrong_kind(calls, capsys):
    code, _, err = run(capsys, "consume", "jobs", "--from-beginning")
    assert code == 1 and err.startswith("error: WRONG_TOPIC_KIND: --offset and --from-beginning read stream topics")
    code, _, err = run(capsys, "consume", "jobs", "--group", "g")
    assert code == 1 and err.startswith("error: WRONG_TOPIC_KIND: --group reads stream topics; 'jobs' is a queue")


def test_queues_stats_text_and_json(calls, capsys):
    """queues stats prints the counts and, per partition, when its earliest delayed message is delivered."""
    code, out, _ = run(capsys, "queues", "stats", "jobs", "--groups")
    assert code == 0 and out.startswith("queue jobs: ready=2 delayed=1 in_flight=0 dead=0 dead_lettered=4")
    assert "acme" in out
    rows = [line.split() for line in out.splitlines()[1:4]]
    assert rows == [["PARTITION", "READY", "DELAYED", "IN_FLIGHT", "DEAD", "OLDEST_READY_AGE_MS", "ENQUEUED_TOTAL",
                     "NEXT_DELIVERY_MS"], ["0", "2", "1", "0", "0", "40", "3", "1796000060000"],
                    ["1", "0", "0", "0", "0", "-", "0", "-"]]
    stats = json.loads(run(capsys, "--json", "queues", "stats", "jobs")[1])
    assert stats["ready"] == 2 and stats["partitions"][0]["enqueued_total"] == 3
    assert [p["next_delivery_ms"] for p in stats["partitions"]] == [1_796_000_060_000, None]


@pytest.mark.parametrize("argv, call", [
    (["queues", "peek", "jobs", "--state", "delayed", "--max", "5"], ("peek", "jobs", None, "delayed", 5)),
    (["queues", "peek", "jobs", "--partition", "2"], ("peek", "jobs", 2, "ready", 10)),
    (["queues", "redrive", "jobs", "--max", "7"], ("redrive", "jobs", 7)),
    (["queues", "get", "jobs", "9"], ("get", "jobs", 9)),
    (["queues", "change-priority", "jobs", "9", "--priority", "0", "--deliver-at-ms", "77"],
     ("change_priority", "jobs", 9, 0, 77)),
])
def test_queue_commands_call_the_sdk(calls, capsys, argv, call):
    code, out, _ = run(capsys, *argv)
    assert code == 0 and call in calls and out


def test_delete_reports_per_id_and_fails_when_one_did(calls, capsys):
    code, out, err = run(capsys, "queues", "delete", "jobs", "3", "4")
    assert code == 1 and out.splitlines() == ["deleted 3"] and err == "error: UNKNOWN_MESSAGE: gone\n"


def test_change_priority_with_a_delay_and_usage_errors(calls, capsys):
    code, _, _ = run(capsys, "queues", "change-priority", "jobs", "9", "--delay-ms", "1000")
    (_, _, _, priority, deliver_at_ms), = [c for c in calls if c[0] == "change_priority"]
    assert code == 0 and priority is None and deliver_at_ms > 1000
    assert run(capsys, "queues", "change-priority", "jobs", "9", "--delay-ms", "1", "--deliver-at-ms", "2")[0] == 2
    assert run(capsys, "queues", "peek", "jobs", "--state", "gone")[0] == 2
