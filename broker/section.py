"""A settings section: a frozen dataclass a feature declares beside its code, one field per operator setting.

Each field is declared with `setting(default, comment)`: the default is written there and nowhere else, the
comment is what config/defaults.toml says of it (the file is generated from the sections, broker/settings.py).
A field's key (its TOML key and `RAFTBUS_<KEY>` environment variable) is the section's `KEY_PREFIX` plus the field
name, or the `key=` it names. A section may hold a dataclass of another package as it is (`part(...)`: the Raft
groups' `RaftSettings`), whose fields get their keys and comments from the section. Keys are flat: a section is
who owns a setting in the code, not a level of the operator's file. A section checks its own values
(`validate()`, raising InvalidArgument); rules across sections live in `BrokerSettings.validate`.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from raftbus.client import errors


def setting(default, comment: str, *, key: str | None = None):
    """A section field: its default, the comment config/defaults.toml carries, its key when not prefix + name."""
    return field(default=default, metadata={"comment": comment, "key": key})


def part(cls, *, comments: dict[str, str], keys: dict[str, str] | None = None, defaults: dict | None = None):
    """A field holding a whole dataclass of another package inside a section: each of its fields is a setting
    keyed prefix + name (or `keys[name]`), documented by `comments[name]`; `defaults` are the broker's own
    defaults where they differ from the class's."""
    value = cls(**(defaults or {}))
    return field(default_factory=lambda: value,
                 metadata={"part": True, "comments": comments, "keys": keys or {}})


@dataclass(frozen=True)
class Key:
    """One operator setting: its key, where it lives in its section, its default and its comment."""

    name: str
    path: tuple[str, ...]  # attribute names from the section down to the value
    default: Any
    comment: str

    @property
    def kind(self) -> type:
        return type(self.default)


def section_keys(cls) -> list[Key]:
    """The settings of a section class, in declaration order."""
    prefix = getattr(cls, "KEY_PREFIX", "")
    found = []
    defaults = cls()
    for f in dataclasses.fields(cls):
        if f.metadata.get("part"):
            inner = getattr(defaults, f.name)
            for g in dataclasses.fields(inner):
                name = f.metadata["keys"].get(g.name, prefix + g.name)
                found.append(Key(name, (f.name, g.name), getattr(inner, g.name), f.metadata["comments"].get(g.name, "")))
        elif "comment" in f.metadata:
            found.append(Key(f.metadata["key"] or prefix + f.name, (f.name,), f.default, f.metadata["comment"]))
    return found


def build_section(base, values: dict[str, Any]):
    """A copy of section `base` with `values` (by key) set."""
    direct, parts = {}, {}
    for key in section_keys(type(base)):
        if key.name in values:
            if len(key.path) == 1:
                direct[key.path[0]] = values[key.name]
            else:
                parts.setdefault(key.path[0], {})[key.path[1]] = values[key.name]
    for name, changes in parts.items():
        direct[name] = dataclasses.replace(getattr(base, name), **changes)
    return dataclasses.replace(base, **direct)


def read(section, key: Key):
    value = section
    for name in key.path:
        value = getattr(value, name)
    return value


def typed(key: Key, value):
    """`value` as the type of the key's default (a string from the environment, an int from TOML...)."""
    kind = key.kind
    if isinstance(value, kind) and not (kind is int and isinstance(value, bool)):
        return value
    if kind is bool:  # bool("false") is True: only true or false will do
        raise errors.InvalidArgument(f"setting {key.name}={value!r} is not true or false")
    try:
        return kind(value)
    except (TypeError, ValueError):
        raise errors.InvalidArgument(f"setting {key.name}={value!r} is not a {kind.__name__}") from None


# ---------------------------------------------------------------------- checks shared by the sections' validate()
def require(ok: bool, message: str) -> None:
    if not ok:
        raise errors.InvalidArgument(message)


def at_least(section, floor: int, *names: str) -> None:
    """Each named field of `section` is >= floor."""
    for name in names:
        require(getattr(section, name) >= floor, f"{name} must be >= {floor}")


def parse_address(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise errors.InvalidArgument(f"address {text!r} is not host:port")
    return host, int(port)


def parse_peers(text: str) -> dict[int, tuple[str, int]]:
    """'1@127.0.0.1:7071,2@127.0.0.1:7072' → {1: ('127.0.0.1', 7071), ...}"""
    peers: dict[int, tuple[str, int]] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        node, sep, address = item.partition("@")
        if not sep or not node.isdigit() or int(node) < 1:
            raise errors.InvalidArgument(f"peer {item!r} is not id@host:port with id >= 1")
        peers[int(node)] = parse_address(address)
    return peers
