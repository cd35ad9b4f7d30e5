"""Goal: `raftbus bench soak`, run short, drives its three loads on a fresh cluster, kills -9 and restarts a broker
every period, samples every broker, and accounts for every acknowledged record and message: none lost, none acked
twice, queue deliveries within 1.05 per message, and its JSON and Markdown reports carry every figure.

The full hour is run by hand (docs/performance.md, Soak); this checks the plumbing: 36 seconds, a kill every
15 s, modest fixed rates (no peak measurement), 6-second report intervals.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.system

REPORT_SECONDS = 6


def test_short_soak_kills_samples_and_loses_nothing(tmp_path):
    out, table = tmp_path / "soak.json", tmp_path / "soak.md"
    command = [sys.executable, "-c", "from raftbus.cli import main; raise SystemExit(main())", "bench", "soak",
               "--minutes", "0.6", "--kill-every-minutes", "0.25", "--report-seconds", str(REPORT_SECONDS),
               "--sample-seconds", "3", "--produce-rate-per-s", "1000", "--queue-rate-per-s", "250",
               "--out", str(out), "--table-out", str(table)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=420)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert [k["broker"] for k in result["kills"]] == [1, 2]
    assert all("restarted_at_s" in k for k in result["kills"])
    assert result["lost"] == {"produce": 0, "queue": 0}
    assert result["produce"]["acked"] > 0 and result["group"]["read"] >= result["produce"]["acked"]
    queue = result["queue"]
    assert queue["enqueued"] > 0 and queue["acked"] >= queue["enqueued"] and queue["acked_twice"] == 0
    assert queue["deliveries_per_message"] <= 1.05
    intervals = result["intervals"]
    assert len(intervals) == 6
    for row in intervals:
        assert all(row[load]["count"] > 0 and row[load]["p99_ms"] is not None for load in ("produce", "group",
                                                                                          "queue")), row
        sampled = [b for b, figures in row["brokers"].items() if figures]
        assert len(sampled) >= 2, row  # a killed broker may miss an interval's samples, never two of three
    assert set(result["growth"]) == {"anon_mb", "file_mb", "lmdb_mapped_mb", "open_files", "lmdb_mb", "journal_mb",
                                     "raft_log_mb", "anon_beside_log_mb"}
    assert all(g["max_percent"] is not None for g in result["growth"].values())
    assert all(r["ratio"] is not None for r in result["p99_ratio"].values())
    assert "| acknowledged records lost | produce → group | 0 | 0 |" in table.read_text()
    assert set(result["heap_trims"]) == {"1", "2", "3"}  # BrokerStats read at the end
    assert result["heap_trims"]["3"]["trims"] >= 2  # never killed: up the whole run, a trim every 10 s
    assert "Heap trims since each broker last started: broker 1: " in table.read_text()


def test_peaks_measured_together_run_every_load_at_once_and_stop_the_group():
    """Goal: `--peaks together` (the default) measures produce and queue with the group reading beside them, as the
    soak runs them; both rates come back and no load process is left running."""
    import argparse
    import multiprocessing

    from raftbus.bench import ops as bench_ops
    from raftbus.bench import soak
    from raftbus.client.admin import Admin

    args = argparse.Namespace(produce_rate_per_s=0, queue_rate_per_s=0, peaks="together", peak_seconds=3.0,
                              group_members=2, record_bytes=100)
    messages = []
    with bench_ops.fresh_cluster(3, messages.append) as cluster:
        with Admin(cluster.bootstrap) as admin:
            admin.create_topic(soak.STREAM_TOPIC + "-peak", partitions=soak.PARTITIONS, replication_factor=3)
            admin.create_topic(soak.QUEUE_TOPIC + "-peak", partitions=soak.PARTITIONS, replication_factor=3,
                               kind="queue")
        peaks = soak.measure_peaks(cluster, args, messages.append)
        assert set(peaks) == {"produce", "queue"} and peaks["produce"] > 0 and peaks["queue"] > 0
        assert "soak: measuring the peak of produce + group + queue for 3 s" in messages
        assert multiprocessing.active_children() == []
        with Admin(cluster.bootstrap) as admin:  # the group read beside them, in a group of its own
            assert soak.PEAK_GROUP in {g.name for g in admin.list_groups()}
