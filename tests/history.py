"""A history checker for produce/consume runs: what was acknowledged must be read back exactly once, in place."""
from __future__ import annotations

import threading
from collections import defaultdict


class History:
    """Records every send and its outcome; `check` compares them with what a reader saw."""

    def __init__(self):
        self._lock = threading.Lock()
        self.acked: dict[bytes, tuple[int, int]] = {}  # value -> (partition, offset)
        self.failed: set[bytes] = set()
        self.errors: list[str] = []  # the first few failures, for assertion messages
        self.sent = 0

    def track(self, value: bytes, future) -> None:
        with self._lock:
            self.sent += 1
        future.add_done_callback(lambda f: self._done(value, f))

    def _done(self, value: bytes, future) -> None:
        error = future.exception()
        with self._lock:
            if error is None:
                meta = future.result()
                self.acked[value] = (meta.partition, meta.offset)
            else:
                self.failed.add(value)
                if len(self.errors) < 5:
                    self.errors.append(repr(error))

    @property
    def acked_count(self) -> int:
        with self._lock:
            return len(self.acked)

    def check(self, records, partitions: int) -> None:
        """Assert: every acked record at its acked offset, no value twice, offsets gapless from the log start."""
        by_partition: dict[int, list] = defaultdict(list)
        seen: dict[bytes, tuple[int, int]] = {}
        for record in records:
            by_partition[record.partition].append(record)
            where = (record.partition, record.offset)
            assert record.value not in seen, f"{record.value!r} read twice: at {seen[record.value]} and {where}"
            seen[record.value] = where
        for partition in range(partitions):
            offsets = [r.offset for r in by_partition[partition]]
            start = offsets[0] if offsets else 0
            assert offsets == list(range(start, start + len(offsets))), (
                f"partition {partition}: offsets not gapless/increasing: first gap near "
                f"{next((a, b) for a, b in zip(offsets, offsets[1:]) if b != a + 1)}")
        with self._lock:
            acked = dict(self.acked)
            failed = set(self.failed)
        lost = [v for v in acked if v not in seen]
        assert not lost, f"{len(lost)} acknowledged records lost, e.g. {lost[:5]}"
        moved = [(v, acked[v], seen[v]) for v in acked if seen[v] != acked[v]]
        assert not moved, f"{len(moved)} records read at another offset than acknowledged, e.g. {moved[:5]}"
        unknown = [v for v in seen if v not in acked and v not in failed]
        assert not unknown, f"{len(unknown)} records read that were never sent, e.g. {unknown[:5]}"
