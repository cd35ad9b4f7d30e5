"""Goal: the peers benchmark's pure parts — argument parsing, raftbus / peer ratios, the Markdown report and the
peers' server configurations — say exactly what was measured, without starting any server or importing a peer's
client library."""
import subprocess
import sys
from pathlib import Path

import pytest

from raftbus.bench import runner as bench
from raftbus.bench.peers import cli, report
from raftbus.bench.peers.servers import nats_config, redis_command
from raftbus.client.errors import InvalidArgument

MACHINE = {"cores": 2, "cpu_model": "AMD EPYC 7B13", "python": "3.11.7", "os": "Linux 6.1",
           "load_average_1m_at_start": 1.5}


def lines():
    """JSON lines as the three systems print them (raftbus has no queue or failover workload)."""
    return [
        {"bench": "produce", "system": "raftbus", "records_per_s": 500_000, "mb_per_s": 50.0,
         "latency_p50_ms": 1.5, "latency_p99_ms": 6.0, "brokers": 3, "replication_factor": 3,
         "durability_window_p99_ms": 12},
        {"bench": "consume", "system": "raftbus", "records_per_s": 1_200_000, "mb_per_s": 120.0},
        {"bench": "produce", "system": "nats", "records_per_s": 25_000, "mb_per_s": 2.5, "latency_p50_ms": 0.75,
         "latency_p99_ms": 3.0, "servers": 3, "server_version": "nats-server: v2.9.10", "durability": "R3 file",
         "client": "nats-py 2.16.0"},
        {"bench": "consume", "system": "nats", "records_per_s": 20_000, "mb_per_s": 2.0},
        {"bench": "queue", "system": "nats", "records_per_s": 12_500, "mb_per_s": 1.25},
        {"bench": "failover", "system": "nats", "failover_ms": 5_500.0},
        {"bench": "produce", "system": "redis", "records_per_s": 0, "mb_per_s": 0.0, "latency_p50_ms": 0.125,
         "latency_p99_ms": 2.0, "servers": 1, "server_version": "Redis server v=7.0.15", "durability": "AOF everysec",
         "client": "redis-py 8.1.0"},
        {"bench": "failover", "system": "redis", "failover_ms": None},
    ]


def row(rows, label):
    return next(r for r in rows if r["figure"] == label)


def test_ratio_is_raftbus_over_peer_and_missing_when_either_side_is_missing_or_the_peer_is_zero():
    assert report.ratio(500_000, 25_000) == 20
    assert report.ratio(None, 25_000) is None
    assert report.ratio(500_000, None) is None
    assert report.ratio(500_000, 0) is None


def test_table_rows_take_each_figure_from_its_workload_line_and_divide_by_each_peer():
    rows = report.table_rows(report.by_system(lines()))
    assert [r["figure"] for r in rows] == [r.label for r in report.ROWS]
    produce = row(rows, "produce, records/s")
    assert (produce["raftbus"], produce["nats"], produce["redis"]) == (500_000, 25_000, 0)
    assert produce["raftbus_over_nats"] == 20 and produce["raftbus_over_redis"] is None
    p50 = row(rows, "light-load produce latency p50, ms")
    assert p50["lower_is_better"] and p50["raftbus_over_nats"] == 2 and p50["raftbus_over_redis"] == 12
    queue = row(rows, "queue, lease + ack per message, messages/s")
    assert queue["raftbus"] is None and queue["nats"] == 12_500 and queue["raftbus_over_nats"] is None
    failover = row(rows, "leader kill -9 to next acknowledged produce, ms")
    assert failover["nats"] == 5_500 and failover["redis"] is None


def test_figures_are_formatted_with_thousands_separators_or_three_significant_digits():
    assert report.format_figure(1_234_567.4) == "1,234,567"
    assert report.format_figure(95.44) == "95.4"
    assert report.format_figure(0.1254) == "0.125"
    assert report.format_figure(None) == report.MISSING
    assert report.format_ratio(19.996) == "20.00×"
    assert report.format_ratio(None) == report.MISSING


def test_markdown_table_has_a_column_per_system_and_ratio_and_a_line_per_figure():
    table = report.markdown_table(report.table_rows(report.by_system(lines()))).splitlines()
    assert table[0] == ("| figure | raftbus | NATS JetStream R3 | raftbus / NATS | Redis Streams | raftbus / Redis |")
    assert table[1] == "|---|---:|---:|---:|---:|---:|"
    assert table[2] == "| produce, records/s | 500,000 | 25,000 | 20.00× | 0 | — |"
    assert "| light-load produce latency p50, ms | 1.5 | 0.75 | 2.00× | 0.125 | 12.00× |" in table
    assert len(table) == 2 + len(report.ROWS)


def test_report_names_the_machine_the_command_and_the_failed_systems():
    args = cli.parse_args(["--records", "1000", "--queue-records", "500"])
    document = cli.build_document(args, ["--records", "1000", "--queue-records", "500"], lines(),
                                  [{"system": "redis", "error": "UNAVAILABLE: redis-server not found"}], MACHINE)
    text = report.report_markdown(document)
    assert "2 cores, AMD EPYC 7B13, Python 3.11.7" in text
    assert f"`{cli.PROG} --records 1000 --queue-records 500`" in text
    assert ("`raftbus bench all --records 1000 --record-bytes 100 --partitions 3 --producers 2 --readers 3 "
            "--messages 500 --consumers 3 --kv-keys 10000`") in text
    assert "produce and consume 1,000 records" in text and "queue 500 messages" in text
    assert "- raftbus: 3 brokers, replication factor 3, acknowledged after a majority commit" in text
    assert "- NATS JetStream R3: nats-server: v2.9.10, 3 server(s), R3 file; client nats-py 2.16.0" in text
    assert "- Redis Streams: Redis server v=7.0.15, 1 server(s), AOF everysec; client redis-py 8.1.0" in text
    assert "FAILED: redis: UNAVAILABLE: redis-server not found" in text
    assert document["settings"]["queue_records"] == 500 and document["errors"][0]["system"] == "redis"


def test_cpu_model_is_the_first_model_name_of_proc_cpuinfo():
    cpuinfo = "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7B13\n\nmodel name\t: other\n"
    assert report.cpu_model(cpuinfo) == "AMD EPYC 7B13"
    assert report.cpu_model("processor\t: 0\n") == "unknown"


def test_counts_default_to_raftbus_bench_defaults_and_queue_records_to_records():
    args = cli.parse_args([])
    defaults = bench.build_parser().parse_args(["all"])
    assert (args.records, args.record_bytes, args.partitions, args.producers, args.readers) == (
        defaults.records, defaults.record_bytes, defaults.partitions, defaults.producers, defaults.readers)
    assert args.queue_records == args.records
    assert args.systems == ("raftbus", "nats", "redis") and args.redis_appendonly == "everysec"
    assert cli.parse_args(["--records", "5000", "--systems", "nats, redis"]).systems == ("nats", "redis")


def test_raftbus_runs_with_the_same_counts_as_the_peers():
    args = cli.parse_args(["--records", "5000", "--record-bytes", "200", "--partitions", "6", "--producers", "1",
                           "--readers", "2"])
    bench_args = bench.build_parser().parse_args(cli.raftbus_argv(args))
    assert (bench_args.workload, bench_args.records, bench_args.record_bytes, bench_args.partitions,
            bench_args.producers, bench_args.readers) == ("all", 5000, 200, 6, 1, 2)
    assert (bench_args.messages, bench_args.consumers) == (5000, 2)  # queue: as many messages and workers
    assert bench.build_parser().parse_args(cli.raftbus_argv(cli.parse_args(["--kv-keys", "300"]))).kv_keys == 300


def test_raftbus_queue_moves_the_peers_queue_records():
    args = cli.parse_args(["--records", "5000", "--queue-records", "700", "--readers", "3"])
    bench_args = bench.build_parser().parse_args(cli.raftbus_argv(args))
    assert (bench_args.records, bench_args.messages, bench_args.consumers) == (5000, 700, 3)


@pytest.mark.parametrize("flag", ["--records", "--queue-records", "--record-bytes", "--partitions", "--producers",
                                  "--readers", "--batch-records", "--kv-keys"])
def test_a_count_below_one_is_a_typed_error(flag):
    with pytest.raises(InvalidArgument, match=flag):
        cli.parse_args([flag, "0"])


def test_unknown_systems_and_appendonly_modes_are_usage_errors(capsys):
    for argv in (["--systems", "kafka"], ["--systems", ","], ["--redis-appendonly", "always"]):
        with pytest.raises(SystemExit) as exc:
            cli.parse_args(argv)
        assert exc.value.code == 2
    assert "subset of raftbus,nats,redis" in capsys.readouterr().err


def test_nats_node_config_routes_to_the_other_nodes_on_loopback_with_jetstream_on_disk():
    config = nats_config("n2", 4223, 6223, [6222, 6223, 6224], Path("/tmp/x/n2"))
    assert "server_name: n2\n" in config and "listen: 127.0.0.1:4223\n" in config
    assert 'store_dir: "/tmp/x/n2"' in config
    assert "listen: 127.0.0.1:6223\n" in config
    assert "routes: [nats-route://127.0.0.1:6222, nats-route://127.0.0.1:6224]" in config


def test_redis_runs_on_loopback_without_snapshots_and_with_the_chosen_appendonly_mode():
    everysec = redis_command("/usr/bin/redis-server", 7000, Path("/tmp/r"), "everysec")
    assert everysec[:9] == ["/usr/bin/redis-server", "--port", "7000", "--bind", "127.0.0.1", "--dir", "/tmp/r",
                            "--save", ""]
    assert everysec[-4:] == ["--appendonly", "yes", "--appendfsync", "everysec"]
    assert redis_command("/usr/bin/redis-server", 7000, Path("/tmp/r"), "no")[-2:] == ["--appendonly", "no"]


def test_the_sdk_cli_and_the_peers_entry_point_import_no_peer_client_library():
    code = ("import sys, raftbus.client, raftbus.cli.app, raftbus.bench.peers.cli; "
            "print(sorted(name for name in ('nats', 'redis', 'hiredis') if name in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_kafka_rows_take_raftbus_from_its_kafka_workload_and_the_peers_from_their_produce_and_consume():
    """Goal: the Kafka port's rows set raftbus's `kafka` line beside each peer's own produce and consume figures."""
    kafka = {"bench": "kafka", "system": "raftbus", "producer_records_per_s": 400_000,
             "consumer_records_per_s": 800_000, "latency_p50_ms": 0.6, "latency_p99_ms": 2.5}
    rows = report.table_rows(report.by_system(lines() + [kafka]))
    producer = row(rows, "Kafka port: confluent-kafka producer (linger.ms 5, acks=all), records/s")
    assert (producer["raftbus"], producer["nats"], producer["raftbus_over_nats"]) == (400_000, 25_000, 16)
    consumer = row(rows, "Kafka port: confluent-kafka consumer, records/s")
    assert (consumer["raftbus"], consumer["nats"]) == (800_000, 20_000)
    p50 = row(rows, "Kafka port: light-load produce latency p50 (linger.ms 0, acks=all), ms")
    assert (p50["raftbus"], p50["nats"], p50["lower_is_better"]) == (0.6, 0.75, True)


def test_key_value_rows_set_raftbus_tables_beside_the_nats_bucket():
    """Goal: the key-value rows take both systems' figures from their kv lines (same keys and value size)."""
    results = report.by_system([
        {"system": "raftbus", "bench": "kv", "gets_per_s": 300, "get_p99_ms": 20.0, "cas_puts_per_s": 320},
        {"system": "nats", "bench": "kv", "gets_per_s": 1_200, "get_p99_ms": 4.0, "cas_puts_per_s": 800}])
    rows = {r["figure"]: r for r in report.table_rows(results)}
    gets = rows["key-value get of random keys, one call in flight per process, gets/s"]
    assert (gets["raftbus"], gets["nats"], gets["raftbus_over_nats"], gets["redis"]) == (300, 1_200, 0.25, None)
    assert rows["key-value get latency p99, ms"]["raftbus_over_nats"] == 5.0
    assert rows["key-value compare-and-set put, one in flight per process, puts/s"]["raftbus_over_nats"] == 0.4
