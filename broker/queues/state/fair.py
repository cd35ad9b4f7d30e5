"""Fair delivery: round-robin over message groups, hierarchical on "." and rotating at every level.

Groups form a tree ("acme.web.alice" is leaf "alice" under "web" under "acme"). Each node remembers the child it
served last (its cursor); a pick walks from the root, at each node taking the next child after its cursor
(wrapping around), down to a group, whose best message (priority, then arrival) is delivered. A group's own
messages count as one more child of its node, ordered first, so "acme" and "acme.web" can both hold messages.

Byte layout (table `leaves`, one key per group that can be delivered from now):
    group path = each part followed by \\x01, then \\x00     ("" -> \\x00, "a.b" -> a\\x01b\\x01\\x00)
so the keys under a node share its prefix and LMDB order walks children in name order. Parts never hold bytes
below 0x20 (queue_commands.check_group), so seeking just after a child skips its whole subtree.
Cursors live in table `cursors` under b"n" + node prefix and are dropped when their node empties.
"""
from __future__ import annotations

LEAF_END = b"\x00"
PART_END = b"\x01"
_AFTER_PART = b"\x02"
_CURSOR_PREFIX = b"n"


def group_path(group: bytes) -> bytes:
    return group.replace(b".", PART_END) + PART_END + LEAF_END if group else LEAF_END


def node_prefixes(path: bytes) -> list[bytes]:
    """The prefixes of the nodes above a group path, deepest first (the root is b"")."""
    ends = [i + 1 for i, byte in enumerate(path) if byte == PART_END[0]]
    return [path[:end] for end in reversed(ends)] + [b""]


class FairRotation:
    """Picks groups in hierarchical round-robin over one write transaction; cursors are flushed at the end."""

    def __init__(self, txn, leaves_table: str, cursors_table: str):
        self._txn = txn
        self._leaves = leaves_table
        self._cursors_table = cursors_table
        self._cursors: dict[bytes, bytes | None] = {}
        self._dirty: set[bytes] = set()

    def pick(self) -> bytes | None:
        """The group path to deliver from next, or None when no group can be delivered from."""
        prefix = b""
        while True:
            child = self._next_child(prefix, self._cursor(prefix))
            if child is None:
                return None
            self._set_cursor(prefix, child)
            if not child:
                return prefix + LEAF_END
            prefix += child + PART_END

    def leaf_removed(self, path: bytes) -> None:
        """Drop the cursors of the nodes that no longer have any group below them."""
        for prefix in node_prefixes(path):
            if self._first_with_prefix(prefix) is not None:
                return
            self._set_cursor(prefix, None)

    def flush(self) -> None:
        for prefix in self._dirty:
            key = _CURSOR_PREFIX + prefix
            child = self._cursors[prefix]
            if child is None:
                self._txn.delete(self._cursors_table, key)
            else:
                self._txn.put(self._cursors_table, key, child)
        self._dirty.clear()

    # ------------------------------------------------------------------ inside
    def _cursor(self, prefix: bytes) -> bytes | None:
        if prefix not in self._cursors:
            raw = self._txn.get(self._cursors_table, _CURSOR_PREFIX + prefix)
            self._cursors[prefix] = None if raw is None else bytes(raw)
        return self._cursors[prefix]

    def _set_cursor(self, prefix: bytes, child: bytes | None) -> None:
        if self._cursor(prefix) != child:
            self._cursors[prefix] = child
            self._dirty.add(prefix)

    def _first_at(self, start: bytes, prefix: bytes) -> bytes | None:
        found = next(self._txn.items(self._leaves, start or None), None)
        if found is None or not bytes(found[0]).startswith(prefix):
            return None
        return bytes(found[0])

    def _first_with_prefix(self, prefix: bytes) -> bytes | None:
        return self._first_at(prefix, prefix)

    def _next_child(self, prefix: bytes, last: bytes | None) -> bytes | None:
        """The child of node `prefix` after `last` (b"" = the node's own group), wrapping around; None if none."""
        key = None
        if last is not None:
            key = self._first_at(prefix + last + (_AFTER_PART if last else PART_END), prefix)
        if key is None:
            key = self._first_with_prefix(prefix)
        if key is None:
            return None
        rest = key[len(prefix):]
        return b"" if rest[:1] == LEAF_END else rest[:rest.index(PART_END)]
