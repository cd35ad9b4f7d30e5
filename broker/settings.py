"""Broker settings: one section per feature (broker/section.py), declared beside the feature, composed here.

A setting's default is written once, in its section; config/defaults.toml is generated from the sections
(`python -m raftbus.broker.settings --write-defaults`, `make defaults`) and a test fails when it differs. A
broker's values come from its TOML file (--config), then RAFTBUS_* environment variables, then command-line flags
(last wins), over the defaults. Keys stay flat: an operator writes `queue_tick_interval_ms`, the code reads
`settings.queues.queue_tick_interval_ms`. A new feature adds its section as one field of BrokerSettings.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from dynaconf import Dynaconf

from raftbus.client import errors

from raftbus.broker.grpc_server import GrpcSettings
from raftbus.broker.groups.settings import GroupSettings
from raftbus.broker.kafka.settings import KafkaSettings
from raftbus.broker.leadership.settings import LeadershipSettings
from raftbus.broker.log.settings import LogSettings
from raftbus.broker.metadata.settings import MembershipSettings, TopicSettings
from raftbus.broker.metrics.settings import MetricsSettings
from raftbus.broker.node import NodeSettings
from raftbus.broker.queues.settings import QueueSettings
from raftbus.broker.raft.cluster_secret import is_loopback
from raftbus.broker.raft_settings import RaftSection
from raftbus.broker.section import Key, build_section, parse_address, parse_peers, read, require, section_keys, typed
from raftbus.broker.security.settings import SecuritySettings
from raftbus.broker.storage.settings import StorageSettings

__all__ = ["BrokerSettings", "load_settings", "parse_address", "parse_peers", "render_defaults"]


@dataclass(frozen=True)
class BrokerSettings:
    """Every section of a broker, in the order config/defaults.toml lists them."""

    node: NodeSettings = field(default_factory=NodeSettings)
    metrics: MetricsSettings = field(default_factory=MetricsSettings)
    grpc: GrpcSettings = field(default_factory=GrpcSettings)
    raft: RaftSection = field(default_factory=RaftSection)
    leadership: LeadershipSettings = field(default_factory=LeadershipSettings)
    membership: MembershipSettings = field(default_factory=MembershipSettings)
    storage: StorageSettings = field(default_factory=StorageSettings)
    log: LogSettings = field(default_factory=LogSettings)
    topics: TopicSettings = field(default_factory=TopicSettings)
    groups: GroupSettings = field(default_factory=GroupSettings)
    queues: QueueSettings = field(default_factory=QueueSettings)
    security: SecuritySettings = field(default_factory=SecuritySettings)
    kafka: KafkaSettings = field(default_factory=KafkaSettings)

    @classmethod
    def from_keys(cls, **values) -> "BrokerSettings":
        """Settings from flat keys (`queue_tick_interval_ms=50`), the others at their defaults; not validated."""
        return cls().replace(**values)

    def replace(self, **values) -> "BrokerSettings":
        """A copy with the given keys changed; InvalidArgument for an unknown key or a value of the wrong type."""
        unknown = set(values) - set(KEYS)
        if unknown:
            raise errors.InvalidArgument(f"unknown settings: {sorted(unknown)}")
        by_section: dict[str, dict] = {}
        for name, value in values.items():
            section, key = KEYS[name]
            by_section.setdefault(section, {})[name] = typed(key, value)
        return dataclasses.replace(self, **{section: build_section(getattr(self, section), changes)
                                            for section, changes in by_section.items()})

    def value(self, key: str):
        """The value of one setting by its key."""
        section, found = KEYS[key]
        return read(getattr(self, section), found)

    def validate(self) -> "BrokerSettings":
        """Each section's own rules, then those across sections."""
        for name in SECTIONS:
            getattr(self, name).validate()
        require(self.log.batch_bytes_max + 1024 <= self.raft.group.command_bytes_max,
                "raft_command_bytes_max must exceed batch_bytes_max by at least 1 KiB")
        require(not (self.membership.join and self.node.peers),
                "a broker joins a running cluster (join) or starts with peers, not both")
        require(len(self.node.peer_addresses) <= self.membership.metadata_voters_max,
                f"peers lists {len(self.node.peer_addresses)} brokers, more than metadata_voters_max="
                f"{self.membership.metadata_voters_max}: every broker of peers votes in the metadata group")
        self._validate_internal_identity()
        self._validate_exposure()
        return self

    @property
    def exposed_without_auth(self) -> list[str]:
        """The ports listening beyond loopback that serve callers without authenticating them, as `setting=value`:
        the client and Kafka ports while auth_enabled is off, the metrics port without metrics_token_file."""
        exposed = []
        if not self.security.auth_enabled:
            exposed += [f"{name}={value}" for name, value in (("listen", self.node.listen),
                                                              ("kafka_listen", self.kafka.kafka_listen))
                        if value and not is_loopback(parse_address(value)[0])]
        metrics = self.metrics.metrics_listen
        if metrics and not self.metrics.metrics_token_file and not is_loopback(parse_address(metrics)[0]):
            exposed.append(f"metrics_listen={metrics}")
        return exposed

    def _validate_exposure(self) -> None:
        """Protected mode: a port beyond loopback that anyone reaching it may use is refused unless asked for."""
        exposed = self.exposed_without_auth
        require(not exposed or self.security.allow_insecure_network,
                f"refusing to serve without authentication beyond loopback ({', '.join(exposed)}): set auth_enabled "
                "= true (RAFTBUS_AUTH_ENABLED; metrics: metrics_token_file), bind loopback, or set "
                "allow_insecure_network = true to accept anyone who reaches the port (docs/security.md)")

    def _validate_internal_identity(self) -> None:
        """With auth on, brokers call each other's client port as the internal principal with a key of the cluster
        secret: a public or weak secret would let anyone who knows it compute that key, even on loopback."""
        problem = self.node.secret_problem if self.security.auth_enabled else None
        require(not problem, f"auth_enabled needs a cluster secret of this cluster's own: {problem}. The brokers' "
                             "internal identity is derived from it; set cluster_secret (RAFTBUS_CLUSTER_SECRET; "
                             "`raftbus secret generate` makes one) and cluster_id (RAFTBUS_CLUSTER_ID)")


SECTIONS: dict[str, type] = {f.name: f.default_factory for f in dataclasses.fields(BrokerSettings)}


def keys_of(sections: dict[str, type]) -> dict[str, tuple[str, Key]]:
    """Every key of `sections` → (its section's name, Key); TypeError when two sections declare one key."""
    found: dict[str, tuple[str, Key]] = {}
    for section, cls in sections.items():
        for key in section_keys(cls):
            if key.name in found:
                raise TypeError(f"setting {key.name} is declared by sections {found[key.name][0]} and {section}")
            found[key.name] = (section, key)
    return found


KEYS = keys_of(SECTIONS)  # every setting's key → (its section's name in BrokerSettings, Key)


def load_settings(config_file: str | None = None, **overrides) -> BrokerSettings:
    """Defaults → per-broker TOML → RAFTBUS_* env → overrides (None values are ignored), validated."""
    files = []
    if config_file:
        if not Path(config_file).is_file():
            raise errors.InvalidArgument(f"config file {config_file} does not exist")
        files.append(config_file)
    conf = Dynaconf(settings_files=files, envvar_prefix="RAFTBUS", environments=True, env="default",
                    load_dotenv=False)
    values = {}
    for name in KEYS:
        value = conf.get(name, None)
        if value is not None:
            values[name] = value
    values.update({k: v for k, v in overrides.items() if v is not None})
    return BrokerSettings.from_keys(**values).validate()


# ---------------------------------------------------------------------- config/defaults.toml
HEADER = """\
# raftbus broker defaults. Generated from the settings sections in the code: run `make defaults` after changing one
# (a test fails while this file differs). Every limit carries its unit in its name.
# Override per broker with a TOML file (--config FILE) and with RAFTBUS_<NAME> environment variables
# (e.g. RAFTBUS_NODE_ID=2, RAFTBUS_PEERS="1@127.0.0.1:7071,2@127.0.0.1:7072").

[default]
"""
LINE_CHARS_MAX = 120
COMMENT_COLUMN_MAX = 48


def toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    return repr(value)


def _comment_lines(assignment: str, column: int, comment: str) -> list[str]:
    """`assignment  # comment`, the comment wrapped onto lines of its own at the same column."""
    width = LINE_CHARS_MAX - column - 2
    words, lines, current = comment.split(), [], ""
    for word in words:
        if current and len(current) + 1 + len(word) > width:
            lines.append(current)
            current = word
        else:
            current = f"{current} {word}" if current else word
    lines.append(current)
    first = f"{assignment.ljust(column)}# {lines[0]}"
    return [first] + [f"{' ' * column}# {line}" for line in lines[1:]]


def render_defaults() -> str:
    """config/defaults.toml as the sections declare it: each key with its default and comment, by section."""
    out = [HEADER]
    for cls in SECTIONS.values():
        keys = section_keys(cls)
        assignments = [f"{key.name} = {toml_value(key.default)}" for key in keys]
        column = min(max(len(a) for a in assignments) + 2, COMMENT_COLUMN_MAX)
        out.append(f"\n# {cls.TITLE}\n")
        for key, assignment in zip(keys, assignments):
            lines = _comment_lines(assignment, max(column, len(assignment) + 2), key.comment)
            out.extend(line + "\n" for line in lines)
    return "".join(out)


def defaults_path() -> Path:
    return Path(str(resources.files("raftbus.config").joinpath("defaults.toml")))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m raftbus.broker.settings",
                                     description="Write or print config/defaults.toml from the settings sections.")
    parser.add_argument("--write-defaults", nargs="?", const=str(defaults_path()), metavar="PATH",
                        help="write the defaults file (config/defaults.toml when no path is given)")
    args = parser.parse_args(argv)
    text = render_defaults()
    if args.write_defaults:
        Path(args.write_defaults).write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
