"""What every chaos test checks besides the produce history: replicas byte-identical, and committed consumer-group
offsets that never move backwards."""
from __future__ import annotations

import threading
from pathlib import Path

import lmdb

from raftbus.client import Admin, Consumer
from raftbus.client import errors


def store_content(store_dir: Path) -> dict[bytes, dict[bytes, bytes]]:
    """Every table of one replica's LMDB store (read-only, beside the running broker: LMDB is multi-process)."""
    env = lmdb.open(str(store_dir), readonly=True, max_dbs=64, max_readers=8)
    try:
        with env.begin() as txn:
            names = [key for key, _ in txn.cursor()]
            tables = {}
            for name in names:
                db = env.open_db(name, txn=txn, create=False)
                tables[name] = dict(txn.cursor(db=db))
        return tables
    finally:
        env.close()


def replicas_identical(data_dirs: list[Path]):
    """For every partition group present under each data dir: all replicas hold the same tables, byte for
    byte (applied index, log, producer state, committed offsets). Returns the group ids, or False."""
    groups = [{p.name for p in (d / "partitions").iterdir()} for d in data_dirs]
    common = set.intersection(*groups)
    if not common or any(g != common for g in groups):
        return False
    for group_id in sorted(common):
        contents = [store_content(d / "partitions" / group_id / "store") for d in data_dirs]
        if any(c != contents[0] for c in contents[1:]):
            return False
    return sorted(common)


class OffsetWatch:
    """A consumer that commits as it reads, and a sampler of the group's committed offsets; `check` asserts that
    no sampled committed offset ever moved backwards."""

    def __init__(self, bootstrap: str, topic: str, group: str = "chaos-readers"):
        self.bootstrap, self.topic, self.group = bootstrap, topic, group
        self.samples: dict[int, list[int]] = {}
        self.consumed = 0
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._consume, daemon=True),
                         threading.Thread(target=self._sample, daemon=True)]

    def __enter__(self):
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        for thread in self._threads:
            thread.join(60)

    def _consume(self) -> None:
        while not self._stop.is_set():
            try:
                with Consumer(self.bootstrap, group=self.group, topics=[self.topic], auto_offset_reset="earliest",
                              enable_auto_commit=False) as consumer:
                    while not self._stop.is_set():
                        records = consumer.poll(0.5)
                        self.consumed += len(list(records))
                        consumer.commit()
            except Exception:  # a broker went away under it (a typed error or a closed channel): join again
                continue

    def _sample(self) -> None:
        while not self._stop.wait(0.3):
            try:
                with Admin(self.bootstrap) as admin:
                    description = admin.describe_group(self.group)
            except errors.RaftbusError:
                continue
            for lag in description.partitions:
                if lag.committed_offset is not None:
                    self.samples.setdefault(lag.partition, []).append(lag.committed_offset)

    def check(self) -> None:
        assert self.samples and any(max(s) > 0 for s in self.samples.values()), "no committed offset was seen"
        for partition, seen in self.samples.items():
            backwards = [(a, b) for a, b in zip(seen, seen[1:]) if b < a]
            assert not backwards, f"partition {partition}: committed offset moved backwards: {backwards[:5]}"
