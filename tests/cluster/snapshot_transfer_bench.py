"""Measures one snapshot transfer between two brokers on loopback: wall time, CPU time and peak RSS of each side.

    .venv/bin/python -m tests.cluster.snapshot_transfer_bench --mb 300 --dir /tmp/snapshot-bench

1. `setup` (one process): brokers 1 and 2 commit MB of 100 KiB records into one partition, snapshot it and stop.
2. `leader` (broker 1 on its data directory) and `follower` (broker 3, empty) start as two processes with the
   default flow-control settings; broker 1 is elected (broker 3's vote) and streams its snapshot to broker 3.
   The follower reports the seconds from its start to the first chunk received (`first_chunk_s`: startup and the
   election) and to holding every record (`done_s`: written, checked, installed, store restored); each side
   reports its CPU time, its peak RSS (ru_maxrss) and the RSS it had before the transfer started.
Prints one JSON line. Not a test: it is run by hand and its figures go to docs/replication.md.
"""
from __future__ import annotations

import argparse
import json
import logging
import resource
import subprocess
import sys
import time
from pathlib import Path

from raftbus.broker.raft.group import RaftSettings
from tests.cluster.harness import Node, RaftCluster
from tests.ports import reserve_ports

GROUP = "p1.0"
RECORD = b"b" * (100 << 10)
SETTINGS = RaftSettings()  # production defaults (config/defaults.toml)


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def setup(root: Path, addresses: dict, records: int) -> dict:
    cluster = RaftCluster(root, settings=SETTINGS)
    cluster.addresses = addresses
    cluster.start(1)
    cluster.start(2)
    for first in range(0, records, 20):
        cluster.produce(min(20, records - first), first_sequence=first, payload=RECORD)
    group = cluster.nodes[1].groups[GROUP]  # broker 1 restarts next to an empty broker 3: it leads and sends
    cluster.run_until(lambda: group.state_machine.offsets()[1] == records, 600, what="broker 1 holds every record")
    applied = group.raft.applied_index
    group.maybe_compact(force=True)
    cluster.run_until(lambda: group.raft.first_index >= applied - 1, 600, what="compacted")
    size = (group.data_dir / "raft.snapshot").stat().st_size
    cluster.close()
    return {"records": records, "snapshot_bytes": size}


def serve(root: Path, addresses: dict, node_id: int, records: int) -> dict:
    """Run one broker until the transfer is over on both sides: the follower holds every record (it writes
    `follower-done`) and the leader knows it (`leader-done`); each side reports its figures as they were at that
    moment."""
    node = Node(node_id, addresses, root, SETTINGS)
    group = node.add_partition(GROUP, list(addresses))
    mine, theirs = (root / "leader-done", root / "follower-done") if node_id == 1 else \
        (root / "follower-done", root / "leader-done")
    rss_before, cpu_before, started = rss_mib(), cpu_s(), time.monotonic()
    marks, result = {}, None
    deadline = started + 900
    while time.monotonic() < deadline and not (result and theirs.exists()):
        node.step()
        receiver = group.replication._receiver
        if receiver.written and "first_chunk_s" not in marks:
            marks["first_chunk_s"] = time.monotonic() - started
        if result is None and _finished(group, node_id, records, root):
            marks["done_s"] = time.monotonic() - started
            result = {"node": node_id, **{k: round(v, 2) for k, v in marks.items()},
                      "cpu_s": round(cpu_s() - cpu_before, 2), "rss_before_mib": round(rss_before),
                      "rss_peak_mib": round(rss_mib()), "hub": node.hub.stats(),
                      "transfer": dict(group.replication.stats)}
            mine.write_text("done")
        time.sleep(0.001)
    node.close()
    if result is None or not theirs.exists():
        raise SystemExit(f"broker {node_id}: the transfer did not finish in 900 s")
    return result


def _finished(group, node_id: int, records: int, root: Path) -> bool:
    """The follower: it holds every record. The leader: the follower said so (the leader may have stepped down
    meanwhile and never seen the install acknowledged: the follower's loop is blocked while it restores the store)."""
    if node_id == 3:
        return group.state_machine.offsets()[1] == records
    return (root / "follower-done").exists()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=int, default=300)
    parser.add_argument("--dir", required=True)
    parser.add_argument("--role", choices=("all", "setup", "leader", "follower"), default="all")
    parser.add_argument("--addresses", default="")
    args = parser.parse_args()
    root = Path(args.dir)
    records = args.mb * 1024 * 1024 // len(RECORD)
    if args.role == "all":
        root.mkdir(parents=True, exist_ok=False)
        with reserve_ports(3) as reserved:  # held while the sides run: their hubs bind beside it
            addresses = json.dumps({n: f"127.0.0.1:{p}" for n, p in zip((1, 2, 3), reserved.ports)})
            base = [sys.executable, "-m", "tests.cluster.snapshot_transfer_bench", "--mb", str(args.mb),
                    "--dir", str(root), "--addresses", addresses, "--role"]
            setup_out = json.loads(subprocess.run(base + ["setup"], check=True, capture_output=True).stdout)
            sides = [subprocess.Popen(base + [role], stdout=subprocess.PIPE) for role in ("leader", "follower")]
            results = [json.loads(p.communicate()[0]) for p in sides]
        print(json.dumps({**setup_out, "leader": results[0], "follower": results[1]}))
        return
    addresses = {int(n): a for n, a in json.loads(args.addresses).items()}
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s {args.role} %(name)s %(message)s")
    if args.role == "setup":
        print(json.dumps(setup(root, addresses, records)))
    else:
        print(json.dumps(serve(root, addresses, 1 if args.role == "leader" else 3, records)))


if __name__ == "__main__":
    main()
