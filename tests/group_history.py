"""A history checker for consumer-group runs, over the JSON-lines journals of tests/system/group_member.py.

Checks: every acknowledged record was processed at least once, at its acknowledged offset; within any one
generation no partition was owned by two members; every record was processed by a member that owned its
partition at the generation it was processed in.
"""
from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class GroupHistory:
    owned: dict[tuple[str, int], set[int]] = field(default_factory=lambda: defaultdict(set))  # (member, gen)
    processed: list[tuple[str, int, int, int, str]] = field(default_factory=list)  # member, gen, p, offset, value

    @classmethod
    def read(cls, journals: list[Path]) -> "GroupHistory":
        history = cls()
        for path in journals:
            if path.exists():
                history._read_one(path.read_text().splitlines())
        return history

    def _read_one(self, lines: list[str]) -> None:
        for number, line in enumerate(lines):
            try:
                entry = json.loads(line)
            except ValueError:
                assert number == len(lines) - 1, f"garbled journal line {number}: {line[:80]!r}"
                continue  # the last line of a member killed while writing it (never committed)
            if "owned" in entry:
                self.owned[(entry["m"], entry["g"])].update(p for _, p in entry["owned"])
            else:
                self.processed.append((entry["m"], entry["g"], entry["p"], entry["o"], entry["v"]))

    def member_ids(self) -> set[str]:
        return {m for m, _ in self.owned}

    def values(self) -> set[str]:
        return {v for *_, v in self.processed}

    def check(self, acked: dict[bytes, tuple[int, int]]) -> dict:
        """Assert every property above; returns figures about the run."""
        by_value: dict[str, set[tuple[int, int]]] = defaultdict(set)
        for _, _, partition, offset, value in self.processed:
            by_value[value].add((partition, offset))
        lost = [v for v in acked if v.decode() not in by_value]
        assert not lost, f"{len(lost)} acknowledged records never processed, e.g. {lost[:5]}"
        moved = [(v, acked[v], by_value[v.decode()]) for v in acked if by_value[v.decode()] != {acked[v]}]
        assert not moved, f"{len(moved)} records processed at another offset than acknowledged, e.g. {moved[:3]}"
        self._check_one_owner_per_generation()
        strangers = [(m, g, p, o) for m, g, p, o, _ in self.processed if p not in self.owned.get((m, g), ())]
        assert not strangers, f"{len(strangers)} records processed without owning the partition, e.g. {strangers[:3]}"
        return {"processed": len(self.processed), "distinct": len(by_value),
                "reprocessed": len(self.processed) - len(by_value),
                "generations": len({g for _, g in self.owned}), "members": len({m for m, _ in self.owned})}

    def _check_one_owner_per_generation(self) -> None:
        by_generation: dict[int, dict[int, str]] = defaultdict(dict)
        for (member, generation), partitions in sorted(self.owned.items()):
            for partition in partitions:
                other = by_generation[generation].setdefault(partition, member)
                assert other == member, (f"partition {partition} owned by {other} and {member} "
                                         f"in generation {generation}")
