"""Goal: the `make bench` table shows each measured figure beside its target and says whether it is met."""
from raftbus.bench.table import markdown


def test_figures_are_shown_with_their_targets_and_verdicts():
    results = {"produce": {"records_per_s": 713_023, "latency_p50_ms": 2.4, "latency_p99_ms": 9.1},
               "queue": {"lease_ack_per_s": 28_123},
               "idle": {"idle_cpu_percent_max": 4.39}}
    table = markdown(results, "2 cores", "raftbus bench all")
    rows = {line.split(" | ")[0].lstrip("| "): line for line in table.splitlines() if line.startswith("| ")}
    assert "| 713,023 | records/s | ≥ 500,000 | met |" in rows["produce, 100-byte records, acked after majority commit"]
    assert "| 28,123 | messages/s | ≥ 50,000 | missed |" in rows["queue, lease + ack per message, priority ordering"]
    assert "| 2.4 | ms | ≤ 2 | missed |" in rows["light-load produce latency p50 (1,000 sends/s)"]
    assert "| 4.39 | % of a core | ≤ 5 | met |" in rows["idle: 100 partitions on 3 brokers, CPU of the busiest broker"]
    assert "| — | records/s | ≥ 1,000,000 |  |" in rows["consume with a consumer group, committing per batch"]
    assert table.startswith("Machine: 2 cores. Command: `raftbus bench all`.")


def test_scale_rows_show_partitions_producers_and_per_record_send():
    results = {"scale": {"send_records_per_s": 251_000, "send_producer_cpu_us_per_record": 3.9,
                         "send_broker_cpu_us_per_record": 2.25, "produce_p300_records_per_s": 90_000, "consume_p30_records_per_s": 800_000,
                         "produce_producers16_records_per_s": 300_000}}
    table = markdown(results, "2 cores", "raftbus bench all")
    rows = {line.split(" | ")[0].lstrip("| "): line for line in table.splitlines() if line.startswith("| ")}
    send_row = "produce, Producer.send per record, --producers processes (2), acked after majority commit"
    assert "| 251,000 | records/s | ≥ 250,000 | met |" in rows[send_row]
    assert "| 2.25 | µs |" in rows["its CPU per record of the 3 brokers together (user + system)"]
    assert "| 90,000 | records/s |" in rows["scale: produce (send_batch), 300 partitions"]
    assert "| 800,000 | records/s |" in rows["scale: consume (Reader), 30 partitions"]
    assert "| 300,000 | records/s |" in rows["scale: produce (send_batch), 16 producer processes"]
    assert "| — | records/s |" in rows["scale: produce (send_batch), 1 producer process"]


def test_the_machine_line_says_how_fast_the_machine_was():
    """A shared VM runs at different speeds at different times: the table names the reference loop's time before
    and after the run beside the load average."""
    from raftbus.bench.runner import machine_description, reference_loop_ms

    assert reference_loop_ms() > 0
    line = machine_description(206.0, 1_342.4)
    assert "reference loop (5,000,000 Python additions) 206 ms before the run and 1,342 ms after" in line
    assert "load average" in line and "reference loop" not in machine_description()


def test_make_bench_keeps_every_scaling_row(monkeypatch):
    """`make bench` (`raftbus bench all`) runs the scale workload, and its table has a row for each partition count
    (3, 30, 300: produce and consume) and each producer count (1, 4, 16), so a regression shows as a number."""
    import argparse

    from raftbus.bench import runner
    from raftbus.client import settings

    assert settings.BENCH_SCALE_PARTITIONS == (3, 30, 300) and settings.BENCH_SCALE_PRODUCERS == (1, 4, 16)
    ran = []
    monkeypatch.setattr(runner.bench_scale, "bench_scale", lambda args, module: ran.append("scale") or {})
    monkeypatch.setattr(runner.bench_ops, "bench_failover", lambda *a: {})
    monkeypatch.setattr(runner.bench_ops, "bench_idle", lambda *a: {})
    runner.run_fresh_cluster_workloads(argparse.Namespace(workload="all"))
    assert ran == ["scale"]
    fields = [f"produce_p{n}_records_per_s" for n in (3, 30, 300)] + \
        [f"consume_p{n}_records_per_s" for n in (3, 30, 300)] + \
        [f"produce_producers{n}_records_per_s" for n in (1, 4, 16)]
    table = markdown({"scale": {field: 1_000 + i for i, field in enumerate(fields)}}, "2 cores", "raftbus bench all")
    for i, _ in enumerate(fields):
        assert f"| {1_000 + i:,} | records/s |" in table
