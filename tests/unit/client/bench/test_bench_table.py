"""Goal: the `make bench` table shows each measured figure beside its target and says whether it is met."""
from raftbus.client.bench.table import markdown


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
