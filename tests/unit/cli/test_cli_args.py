"""Goal: the `raftbus` command parses every subcommand and flag (with --json/--bootstrap before or after the
subcommand), passes them to the SDK and the broker entry point unchanged, and reports failures as
`error: CODE: message` with exit 1 and usage errors with exit 2, using fake Admin/Producer/Reader classes."""
import argparse
import io
import json
import time
from concurrent.futures import Future

import pytest

from raftbus.broker import main as broker_main
from raftbus.bench import runner as bench
from raftbus.cli import app as cli
from raftbus.client.admin import (
    BrokerDescription,
    ClusterStatus,
    PartitionDescription,
    TopicDescription,
)
from raftbus.client.errors import TopicExists, UnknownTopic
from raftbus.client.cluster_admin import MetadataMembers
from raftbus.client.records import Record, RecordMetadata

TOPIC = TopicDescription(
    name="orders", topic_id=7, kind="stream", ordering="", retention_ms=-1, retention_bytes=-1, created_ms=5,
    partitions=(PartitionDescription(0, 1, (1, 2, 3), (1, 2, 3), 0, 10),
                PartitionDescription(1, None, (2, 3, 1), (2, 3), 0, 4)),
)
STATUS = ClusterStatus(
    brokers=(BrokerDescription(1, "127.0.0.1:7070", "127.0.0.1:7071", True),
             BrokerDescription(2, "127.0.0.1:7072", "127.0.0.1:7073", False)),
    controller_id=1, topics=(TOPIC,), answering_broker_id=2, cluster_id="dev-1",
)
MEMBERS = MetadataMembers(voters=(1, 2), learners=(3,), config_index=7, controller_id=1, answering_broker_id=2)


class Calls:
    """What the fakes were asked, in order."""

    def __init__(self):
        self.items: list[tuple] = []
        self.fail: Exception | None = None

    def record(self, *call):
        self.items.append(call)
        if self.fail is not None:
            raise self.fail


@pytest.fixture
def calls(monkeypatch):
    calls = Calls()

    class FakeAdmin:
        def __init__(self, bootstrap=None, **options):
            calls.record("Admin", bootstrap)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            pass

        def create_topic(self, name, **options):
            calls.record("create_topic", name, options)
            return TOPIC

        def list_topics(self):
            calls.record("list_topics")
            return [TOPIC]

        def describe_topic(self, name):
            calls.record("describe_topic", name)
            return TOPIC

        def delete_topic(self, name):
            calls.record("delete_topic", name)

        def alter_partitions(self, name, partitions):
            calls.record("alter_partitions", name, partitions)
            return TOPIC

        def alter_topic(self, name, **changes):
            calls.record("alter_topic", name, changes)
            return TOPIC

        def cluster_status(self):
            calls.record("cluster_status")
            return STATUS

        def metadata_members(self):
            calls.record("metadata_members")
            return MEMBERS

    class FakeProducer:
        def __init__(self, bootstrap=None, **options):
            calls.record("Producer", bootstrap)
            self.offset = 0

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            pass

        def send(self, topic, value, key=None, headers=None, partition=None, **queue_fields):
            calls.record("send", topic, value, key, tuple(headers or ()), partition, *sorted(queue_fields.items()))
            future = Future()
            future.set_result(RecordMetadata(topic, partition or 0, self.offset, 123))
            self.offset += 1
            return future

        def flush(self):
            calls.record("flush")

    class FakeReader:
        def __init__(self, bootstrap=None, **options):
            calls.record("Reader", bootstrap)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            pass

        def iter_topic(self, topic, from_beginning=False, stop_at_end=False, idle_timeout_ms=None):
            calls.record("iter_topic", topic, from_beginning, idle_timeout_ms)
            for offset in range(5):
                yield Record(topic, offset % 2, offset, b"k", f"v{offset}".encode(), (("h", b"x"),), 1000 + offset)

        def iter_partition(self, topic, partition, offset="earliest", stop_at_end=False, idle_timeout_ms=None):
            calls.record("iter_partition", topic, partition, offset, idle_timeout_ms)
            yield Record(topic, partition, 42, None, b"only", (), 1000)

    monkeypatch.setattr(cli, "Admin", FakeAdmin)
    monkeypatch.setattr(cli, "Producer", FakeProducer)
    monkeypatch.setattr(cli, "Reader", FakeReader)
    monkeypatch.delenv("RAFTBUS_BOOTSTRAP", raising=False)
    return calls


def run(capsys, *argv) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def parse(*argv) -> argparse.Namespace:
    return cli.build_parser().parse_args(list(argv))


# ---------------------------------------------------------------------- parsing

@pytest.mark.parametrize("argv, expected", [
    (["topics", "create", "t"], {"name": "t", "partitions": None, "replication_factor": None, "kind": "stream",
                                 "ordering": None, "retention_ms": None, "retention_bytes": None}),
    (["topics", "create", "q", "--partitions", "6", "--replication-factor", "1", "--kind", "queue",
      "--ordering", "fair", "--retention-ms", "60000", "--retention-bytes", "1000"],
     {"partitions": 6, "replication_factor": 1, "kind": "queue", "ordering": "fair", "retention_ms": 60000,
      "retention_bytes": 1000}),
    (["topics", "list"], {"topics_command": "list"}),
    (["topics", "describe", "t"], {"topics_command": "describe", "name": "t"}),
    (["topics", "delete", "t"], {"topics_command": "delete", "name": "t"}),
    (["topics", "alter", "t", "--partitions", "9"], {"topics_command": "alter", "partitions": 9}),
    (["produce", "t"], {"topic": "t", "key": None, "partition": None, "value": None, "header": []}),
    (["produce", "t", "--key", "k", "--partition", "2", "--value", "v", "--header", "a=1", "--header", "b=x=y",
      "--priority", "4", "--group", "g", "--delay-ms", "500", "--idempotency-key", "id-1"],
     {"key": "k", "partition": 2, "value": "v", "header": [("a", "1"), ("b", "x=y")], "priority": 4,
      "group": "g", "delay_ms": 500, "idempotency_key": "id-1"}),
    (["consume", "t"], {"topic": "t", "partition": None, "offset": None, "from_beginning": False, "max": None,
                        "timeout_ms": None, "group": None}),
    (["consume", "t", "--partition", "1", "--offset", "42", "--max", "5", "--timeout-ms", "2000"],
     {"partition": 1, "offset": 42, "max": 5, "timeout_ms": 2000}),
    (["consume", "t", "--partition", "0", "--offset", "latest", "--from-beginning", "--group", "g"],
     {"offset": "latest", "from_beginning": True, "group": "g"}),
    (["cluster", "status"], {"cluster_command": "status"}),
    (["broker", "start", "--config", "b.toml", "--node-id", "2", "--data-dir", "d", "--listen", "h:1",
      "--raft-listen", "h:2", "--peers", "1@h:2", "--advertised-listen", "pub:1", "--log-level", "DEBUG"],
     {"config": "b.toml", "node_id": 2, "data_dir": "d", "listen": "h:1", "raft_listen": "h:2", "peers": "1@h:2",
      "advertised_listen": "pub:1", "log_level": "DEBUG"}),
    (["dev"], {"brokers": 3, "data_dir": "./data", "base_port": 7070, "demo": False}),
    (["dev", "--brokers", "5", "--data-dir", "/tmp/d", "--base-port", "9000", "--demo"],
     {"brokers": 5, "data_dir": "/tmp/d", "base_port": 9000, "demo": True}),
    (["bench", "produce"], {"workload": "produce", "records": 1_000_000, "record_bytes": 100, "partitions": 3,
                            "replication_factor": 3, "bootstrap": None, "out": None, "keep_cluster": False}),
    (["bench", "all", "--bootstrap", "h:1", "--records", "10", "--record-bytes", "8", "--partitions", "2",
      "--replication-factor", "1", "--producers", "4", "--linger-ms", "0", "--batch-bytes-max", "4096",
      "--out", "r.json", "--keep-cluster"],
     {"workload": "all", "bootstrap": "h:1", "records": 10, "record_bytes": 8, "partitions": 2,
      "replication_factor": 1, "producers": 4, "linger_ms": 0, "batch_bytes_max": 4096, "out": "r.json",
      "keep_cluster": True}),
])
def test_every_subcommand_and_flag_parses(argv, expected):
    """Each subcommand accepts its documented flags with the documented defaults."""
    args = parse(*argv)
    assert {name: getattr(args, name) for name in expected} == expected


@pytest.mark.parametrize("argv", [
    ["--json", "--bootstrap", "h:1", "topics", "list"],
    ["topics", "list", "--json", "--bootstrap", "h:1"],
    ["--bootstrap", "h:1", "topics", "list", "--json"],
    ["--json", "cluster", "status", "--bootstrap", "h:1"],
])
def test_json_and_bootstrap_go_before_or_after_the_subcommand(argv):
    """--json and --bootstrap take effect wherever they are placed."""
    args = parse(*argv)
    assert args.json is True
    assert args.bootstrap == "h:1"


def test_flags_before_the_subcommand_are_not_reset_by_it():
    """A leaf command without --json keeps the value given before it; without either, JSON is off."""
    assert parse("--json", "topics", "describe", "t").json is True
    assert parse("topics", "describe", "t").json is False
    assert parse("topics", "describe", "t").bootstrap is None


def test_bootstrap_defaults_to_the_environment(calls, capsys, monkeypatch):
    """Without --bootstrap the SDK gets RAFTBUS_BOOTSTRAP, else localhost:7070."""
    assert run(capsys, "topics", "list")[0] == 0
    monkeypatch.setenv("RAFTBUS_BOOTSTRAP", "env:1")
    assert run(capsys, "topics", "list")[0] == 0
    assert run(capsys, "--bootstrap", "flag:1", "topics", "list")[0] == 0
    assert [c[1] for c in calls.items if c[0] == "Admin"] == ["localhost:7070", "env:1", "flag:1"]


@pytest.mark.parametrize("argv", [
    [],
    ["topics"],
    ["topics", "alter", "t"],
    ["topics", "create"],
    ["topics", "create", "t", "--kind", "log"],
    ["topics", "create", "t", "--partitions", "three"],
    ["produce", "t", "--header", "no-equals-sign"],
    ["consume", "t", "--offset", "5"],
    ["consume", "t", "--partition", "0", "--offset", "-3"],
    ["consume", "t", "--max", "-1"],
    ["cluster"],
    ["nonsense"],
])
def test_usage_errors_exit_2(calls, capsys, argv):
    """Bad or missing arguments exit with status 2 before anything connects, with one line saying what is wrong and
    where the help is."""
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert len(err.splitlines()) == 1 and err.startswith("error: raftbus") and err.endswith("--help)\n"), err
    assert calls.items == []


# ---------------------------------------------------------------------- topics and cluster

def test_topics_create_passes_every_option(calls, capsys):
    """topics create hands its flags to Admin.create_topic (a flag not given is the cluster's default, None) and
    prints the topic as JSON with --json."""
    code, out, _ = run(capsys, "--bootstrap", "h:1", "topics", "create", "orders", "--partitions", "2",
                       "--retention-ms", "1000", "--json")
    assert code == 0
    assert calls.items[1] == ("create_topic", "orders", {
        "partitions": 2, "replication_factor": None, "kind": "stream", "ordering": None, "retention_ms": 1000,
        "retention_bytes": None})
    assert json.loads(out) == TOPIC.to_dict()


def test_topics_describe_prints_a_table(calls, capsys):
    """The human output lists each partition's leader, replicas and in-sync replicas."""
    code, out, _ = run(capsys, "topics", "describe", "orders")
    lines = out.splitlines()
    assert code == 0
    assert lines[0].startswith("topic orders id=7 kind=stream")
    assert lines[1].split() == ["PARTITION", "LEADER", "REPLICAS", "ISR", "LOG_START", "HIGH_WATERMARK"]
    assert lines[2].split() == ["0", "1", "1,2,3", "1,2,3", "0", "10"]
    assert lines[3].split() == ["1", "-", "2,3,1", "2,3", "0", "4"]


def test_topics_list_delete_and_alter(calls, capsys):
    """list, delete and alter call the matching Admin methods."""
    assert run(capsys, "topics", "list", "--json")[0] == 0
    assert run(capsys, "topics", "delete", "orders")[1] == "deleted topic orders\n"
    assert run(capsys, "topics", "alter", "orders", "--partitions", "4")[0] == 0
    assert [c for c in calls.items if c[0] != "Admin"] == [
        ("list_topics",), ("delete_topic", "orders"), ("alter_partitions", "orders", 4)]


def test_cluster_status_json_and_table(calls, capsys):
    """cluster status prints the brokers, the controller and partition leaders."""
    code, out, _ = run(capsys, "cluster", "status", "--json")
    assert code == 0 and json.loads(out) == {**STATUS.to_dict(), "metadata_voters": [1, 2], "metadata_learners": [3]}
    code, out, _ = run(capsys, "cluster", "status")
    assert out.splitlines()[0] == "cluster dev-1; controller: 1 (answered by broker 2)"
    assert "controller" in out.splitlines()[2] and out.splitlines()[3].split()[3] == "no"
    assert out.splitlines()[-1] == "metadata voters: 1,2; non-voters (learners): 3"


def test_errors_print_code_and_message_and_exit_1(calls, capsys):
    """A typed error from the SDK becomes `error: CODE: message` on stderr with exit status 1."""
    calls.fail = TopicExists("topic 'orders' already exists")
    code, out, err = run(capsys, "topics", "create", "orders")
    assert (code, out) == (1, "")
    assert err == "error: TOPIC_EXISTS: topic 'orders' already exists\n"


# ---------------------------------------------------------------------- produce and consume

def test_produce_sends_one_record_per_stdin_line(calls, capsys, monkeypatch):
    """Without --value each stdin line is one record, and each acknowledgement prints topic/partition@offset."""
    monkeypatch.setattr("sys.stdin", io.StringIO("first\nsecond\r\n\nlast"))
    code, out, _ = run(capsys, "produce", "orders", "--key", "k", "--header", "a=1")
    assert code == 0
    sends = [c for c in calls.items if c[0] == "send"]
    assert [s[2] for s in sends] == ["first", "second", "", "last"]
    assert sends[0] == ("send", "orders", "first", "k", (("a", "1"),), None)
    assert out.splitlines() == ["orders/0@0", "orders/0@1", "orders/0@2", "orders/0@3"]


def test_produce_value_to_a_partition_as_json(calls, capsys):
    """--value sends exactly one record; --json prints its metadata as JSON."""
    code, out, _ = run(capsys, "produce", "orders", "--value", "hello", "--partition", "2", "--json")
    assert code == 0
    assert [c for c in calls.items if c[0] == "send"] == [("send", "orders", "hello", None, (), 2)]
    assert json.loads(out) == {"topic": "orders", "partition": 2, "offset": 0, "timestamp_ms": 123}


@pytest.mark.parametrize("flag, field", [(["--priority", "1"], ("priority", 1)), (["--group", "g"], ("group", "g")),
                                         (["--idempotency-key", "x"], ("idempotency_key", "x"))])
def test_produce_queue_options_reach_the_producer(calls, capsys, flag, field):
    """Queue options go to Producer.send (which refuses them on stream topics)."""
    code, _, _ = run(capsys, "produce", "orders", "--value", "v", *flag)
    assert code == 0
    assert [c for c in calls.items if c[0] == "send"] == [("send", "orders", "v", None, (), None, field)]


def test_produce_delay_becomes_a_delivery_time(calls, capsys):
    """--delay-ms D sends deliver_at_ms = now + D."""
    before = time.time_ns() // 1_000_000
    run(capsys, "produce", "orders", "--value", "v", "--delay-ms", "5000")
    (send,) = [c for c in calls.items if c[0] == "send"]
    name, deliver_at_ms = send[-1]
    assert name == "deliver_at_ms" and before + 5000 <= deliver_at_ms <= time.time_ns() // 1_000_000 + 5000


def test_produce_failure_is_reported(calls, capsys):
    """An error raised while sending (here an unknown topic) exits 1 with its code."""
    calls.fail = UnknownTopic("topic 'nope' does not exist")
    code, _, err = run(capsys, "produce", "nope", "--value", "v")
    assert code == 1 and err == "error: UNKNOWN_TOPIC: topic 'nope' does not exist\n"


def test_consume_whole_topic_with_max(calls, capsys):
    """Without --partition consume reads the whole topic and stops after --max records."""
    code, out, _ = run(capsys, "consume", "orders", "--from-beginning", "--max", "2", "--timeout-ms", "300")
    assert code == 0
    assert ("iter_topic", "orders", True, 300) in calls.items
    assert out.splitlines() == ["orders/0@0\tk\tv0", "orders/1@1\tk\tv1"]


def test_consume_one_partition_from_an_offset_as_json(calls, capsys):
    """--partition with --offset reads that partition from that offset; --json prints full records."""
    code, out, _ = run(capsys, "--json", "consume", "orders", "--partition", "1", "--offset", "42")
    assert code == 0
    assert ("iter_partition", "orders", 1, 42, None) in calls.items
    assert json.loads(out) == {"topic": "orders", "partition": 1, "offset": 42, "timestamp_ms": 1000,
                               "key": None, "value": "only", "headers": []}


def test_consume_partition_defaults_to_the_end_or_the_beginning(calls, capsys):
    """--partition without --offset starts at the end, or at the beginning with --from-beginning."""
    run(capsys, "consume", "orders", "--partition", "0")
    run(capsys, "consume", "orders", "--partition", "0", "--from-beginning")
    starts = [c[3] for c in calls.items if c[0] == "iter_partition"]
    assert starts == ["latest", "earliest"]


# ---------------------------------------------------------------------- broker processes and bench

def test_broker_start_and_dev_run_the_broker_entry_point_with_its_own_flags(monkeypatch):
    """broker start and dev parse the broker's own flags (raftbus.broker.main) and run its entry points."""
    seen = []
    monkeypatch.setattr(broker_main, "start_broker", lambda args: seen.append(("start", args)) or 0)
    monkeypatch.setattr(broker_main, "run_dev", lambda args: seen.append(("dev", args)) or 0)
    parser = cli.build_parser()
    for argv in (["broker", "start", "--config", "b.toml", "--node-id", "2", "--peers", "1@h:1,2@h:2"],
                 ["dev", "--brokers", "5", "--demo"]):
        args = parser.parse_args(argv)
        assert args.handler(args) == 0
    (_, start), (_, dev) = seen[0], seen[1]
    assert (start.config, start.node_id, start.peers, start.listen) == ("b.toml", 2, "1@h:1,2@h:2", None)
    assert (dev.brokers, dev.demo, dev.base_port, dev.restart_delay_ms) == (5, True, 7070, 2000)


def test_a_broker_that_fails_to_start_prints_one_line_and_exits_1(monkeypatch, capsys):
    """An OS error (a taken port, an unreadable file) while starting is one line on stderr and exit 1."""
    def refuse(args):
        raise OSError(98, "Address already in use")
    monkeypatch.setattr(broker_main, "start_broker", refuse)
    args = cli.build_parser().parse_args(["broker", "start", "--node-id", "1"])
    assert args.handler(args) == 1
    assert capsys.readouterr().err == "error: Address already in use\n"


def test_bench_dispatches_to_the_bench_module(monkeypatch, capsys):
    """`raftbus bench` hands the parsed flags to bench.main, with --bootstrap from before or after `bench`."""
    seen = []
    monkeypatch.setattr(bench, "main", lambda args: seen.append(args) or 0)
    parser = cli.build_parser()
    args = parser.parse_args(["--bootstrap", "h:1", "bench", "consume", "--records", "5"])
    assert args.handler(args) == 0
    assert (seen[0].workload, seen[0].bootstrap, seen[0].records) == ("consume", "h:1", 5)


def test_bench_rejects_out_of_range_flags(capsys):
    """A benchmark flag out of range is a typed error reported before any cluster starts."""
    code, _, err = run(capsys, "bench", "produce", "--records", "0")
    assert code == 1
    assert err == "error: INVALID_ARGUMENT: --records must be >= 1\n"


def test_topics_alter_changes_retention_and_queue_options_then_partitions(calls, capsys):
    """alter sends settings through alter_topic and a partition count through alter_partitions, in one command."""
    assert run(capsys, "topics", "alter", "jobs", "--retention-ms", "-1", "--max-deliveries", "9",
               "--partitions", "6")[0] == 0
    assert [c for c in calls.items if c[0] != "Admin"] == [
        ("alter_topic", "jobs", {"retention_ms": -1, "max_deliveries": 9}), ("alter_partitions", "jobs", 6)]


def test_an_unexpected_failure_is_one_line_unless_debugging(monkeypatch, capsys):
    def broken(args):
        raise ValueError("no such thing")

    monkeypatch.setattr(cli, "run_topics_list", broken)
    assert cli.main(["topics", "list"]) == 1
    assert capsys.readouterr().err == ("error: INTERNAL: ValueError: no such thing (RAFTBUS_LOG_LEVEL=DEBUG shows "
                                       "where)\n")
    monkeypatch.setenv("RAFTBUS_LOG_LEVEL", "debug")
    with pytest.raises(ValueError):
        cli.main(["topics", "list"])
