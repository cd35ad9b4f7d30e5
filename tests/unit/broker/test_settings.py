"""Goal: every broker setting is declared once, in its feature's section, with its default, unit and comment;
config/defaults.toml is exactly what the sections say; operators keep their flat keys and RAFTBUS_* variables; and
each section refuses the values its own rules forbid."""
from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from raftbus.broker.grpc_server import GrpcSettings
from raftbus.broker.groups.settings import GroupSettings
from raftbus.broker.leadership.settings import LeadershipSettings
from raftbus.broker.log.settings import LogSettings
from raftbus.broker.metadata.settings import MembershipSettings, TopicSettings
from raftbus.broker.metrics.settings import MetricsSettings
from raftbus.broker.kafka.settings import KafkaSettings
from raftbus.broker.node import NodeSettings
from raftbus.broker.raft.group import RaftSettings
from raftbus.broker.raft.quiesce import QuiesceSettings
from raftbus.broker.raft_settings import RaftSection
from raftbus.broker.section import setting
from raftbus.broker.security.settings import SecuritySettings
from raftbus.broker.settings import KEYS, SECTIONS, BrokerSettings, keys_of, load_settings, main, render_defaults
from raftbus.broker.storage.settings import StorageSettings
from raftbus.client import errors

ROOT = Path(__file__).resolve().parents[3]
DEFAULTS = ROOT / "config" / "defaults.toml"


def test_config_defaults_toml_is_generated_from_the_sections():
    """Goal: the committed defaults file is the sections' rendering (run `make defaults` after changing one)."""
    assert DEFAULTS.read_text() == render_defaults(), "config/defaults.toml is stale: run `make defaults`"


def test_the_defaults_file_loads_as_exactly_the_code_defaults(monkeypatch):
    """Goal: every key of the file carries the code's default (loaded as a broker's file, nothing changes)."""
    for name in list(os.environ):
        if name.startswith("RAFTBUS_"):
            monkeypatch.delenv(name)
    assert load_settings(str(DEFAULTS)) == BrokerSettings() == load_settings()


def test_write_defaults_writes_the_rendering(tmp_path):
    target = tmp_path / "defaults.toml"
    assert main(["--write-defaults", str(target)]) == 0
    assert target.read_text() == render_defaults()


def test_every_field_of_every_section_is_a_documented_setting():
    """Goal: a section holds settings only (each with a comment), and a part of another package (RaftSettings,
    QuiesceSettings) has a comment for each of its fields and none for a field it lacks."""
    for cls in SECTIONS.values():
        for f in dataclasses.fields(cls):
            if f.metadata.get("part"):
                names = {g.name for g in dataclasses.fields(getattr(cls(), f.name))}
                assert set(f.metadata["comments"]) == names, (cls.__name__, f.name)
                assert set(f.metadata["keys"]) <= names, (cls.__name__, f.name)
            else:
                assert f.metadata.get("comment"), f"{cls.__name__}.{f.name} is not declared with setting()"
        assert cls.TITLE
    assert all(key.comment.strip() for _, key in KEYS.values())


COUNTS = {  # numbers whose noun is their unit
    "node_id", "raft_log_compaction_entries", "storage_fds_reserved", "storage_raft_fds_reserved",
    "gc_drops_collect_fraction",
    "default_partitions", "default_replication_factor", "queue_default_max_deliveries",
    "queue_default_max_in_flight_per_group", "auth_scram_iterations",
}


def test_every_number_carries_its_unit_in_its_name():
    for name, (_, key) in KEYS.items():
        if key.kind in (int, float):
            assert name in COUNTS or re.search(r"(_ms|_bytes|_max|_min|_per_s)$", name), name
        if re.search(r"timeout|interval|retention|delay|idle|window", name):
            assert "_ms" in name or "_bytes" in name, name


def test_the_operators_keys_are_unchanged():
    """Goal: the 152 keys of the flat file (and RAFTBUS_<KEY>) are those operators set before the sections, with
    the 40 added since (the Kafka port's 16, batch_decompressed_bytes_max, listen_reuse_port, tls_principal_rules,
    allow_insecure_network, metrics_token_file, metadata_voters_max, membership_join_catch_up_timeout_ms,
    raft_reads_waiting_max, auth_scram_iterations, compaction's 6, grpc_connections_max,
    grpc_connections_per_address_max, grpc_handshake_timeout_ms, storage_raft_fds_reserved,
    raft_loop_stall_report_ms, queue_lease_failover_grace_ms, fetch_many_partitions_max,
    malloc_trim_interval_ms and malloc_arenas_max)."""
    assert len(KEYS) == 152 + 40 and "listen_reuse_port" in KEYS and "raft_reads_waiting_max" in KEYS
    assert "raft_loop_stall_report_ms" in KEYS and "queue_lease_failover_grace_ms" in KEYS
    assert "fetch_many_partitions_max" in KEYS and "malloc_arenas_max" in KEYS
    for name in ("node_id", "raft_election_timeout_min_ms", "isr_lag_time_ms", "raft_quiesce_enabled",
                 "raft_liveness_timeout_ms", "raft_tls_ca_file", "leader_gossip_interval_ms", "join",
                 "storage_sync_interval_ms", "batch_bytes_max", "default_partitions", "session_timeout_ms",
                 "queue_tick_interval_ms", "tls_cert_file", "metrics_listen", "grpc_workers_max", "kafka_listen",
                 "batch_decompressed_bytes_max", "raft_reads_waiting_max"):
        assert name in KEYS


def test_a_flat_key_reaches_its_section(monkeypatch):
    monkeypatch.setenv("RAFTBUS_QUEUE_TICK_INTERVAL_MS", "50")
    monkeypatch.setenv("RAFTBUS_ISR_LAG_TIME_MS", "7000")
    monkeypatch.setenv("RAFTBUS_RAFT_QUIESCE_ENABLED", "false")
    settings = load_settings(raft_election_timeout_max_ms=1300, retention_check_interval_ms=100)
    assert settings.queues.queue_tick_interval_ms == 50
    assert settings.raft.group.isr_lag_time_ms == 7000 and settings.raft.quiesce.enabled is False
    assert settings.raft.group.election_timeout_max_ms == 1300 == settings.value("raft_election_timeout_max_ms")
    assert settings.log.retention_check_interval_ms == 100
    assert settings.raft.group.election_timeout_min_ms == 600  # the others keep their defaults


def test_the_raft_section_holds_the_groups_own_settings():
    """Goal: what every Raft group takes is RaftSettings and QuiesceSettings themselves, not a copy of them."""
    raft = BrokerSettings.from_keys(raft_snapshot_chunk_bytes=2 << 20).raft
    assert type(raft.group) is RaftSettings and type(raft.quiesce) is QuiesceSettings
    assert raft.group.snapshot_chunk_bytes == 2 << 20
    assert {key.path[1] for _, key in KEYS.values() if key.path[0] == "group"} == \
        {f.name for f in dataclasses.fields(RaftSettings)}


def test_unknown_keys_and_values_of_the_wrong_type_are_refused():
    with pytest.raises(errors.InvalidArgument, match="unknown settings"):
        BrokerSettings.from_keys(queue_tick_ms=5)
    with pytest.raises(errors.InvalidArgument, match="node_id"):
        BrokerSettings.from_keys(node_id="one")
    with pytest.raises(errors.InvalidArgument, match="true or false"):
        BrokerSettings.from_keys(auth_enabled="yes")
    assert BrokerSettings.from_keys(node_id="2", gc_drops_collect_fraction=1).node.node_id == 2


def test_replace_changes_only_the_keys_named():
    before = BrokerSettings.from_keys(node_id=3, queue_tick_interval_ms=20)
    after = before.replace(queue_tick_interval_ms=30)
    assert (after.node.node_id, after.queues.queue_tick_interval_ms) == (3, 30)
    assert before.queues.queue_tick_interval_ms == 20


def test_two_sections_cannot_declare_one_key():
    @dataclass(frozen=True)
    class Other:
        TITLE = "other"
        batch_bytes_max: int = setting(1, "the same key as the log section's")

    with pytest.raises(TypeError, match="batch_bytes_max"):
        keys_of({"log": LogSettings, "other": Other})


SECTION_RULES = [
    (NodeSettings, {"node_id": 0}, "node_id"),
    (NodeSettings, {"listen": "nowhere"}, "not host:port"),
    (NodeSettings, {"peers": "1@127.0.0.1:9999"}, "raft_listen"),
    (NodeSettings, {"listen": "0.0.0.0:7070"}, "refusing to listen beyond loopback"),
    (GrpcSettings, {"grpc_long_calls_max": 200}, "grpc_workers_max"),
    (GrpcSettings, {"grpc_concurrent_rpcs_max": 0}, "grpc_concurrent_rpcs_max"),
    (RaftSection, {"group": RaftSettings(election_timeout_min_ms=400)}, "3 ×"),
    (RaftSection, {"group": RaftSettings(command_bytes_max=40 << 20)}, "half of raft_frame_bytes_max"),
    (RaftSection, {"quiesce": QuiesceSettings(liveness_timeout_ms=300)}, "raft_liveness_timeout_ms"),
    (RaftSection, {"connect_retry_ms": 500}, "raft_connect_retry_ms"),
    (RaftSection, {"replicas_starting_max": 0}, "raft_replicas_starting_max"),
    (RaftSection, {"handshakes_pending_max": 4}, "raft_handshakes_pending_per_address_max"),
    (LeadershipSettings, {"leader_gossip_interval_ms": 0}, "leader_gossip_interval_ms"),
    (MembershipSettings, {"reassignments_running_max": 0}, "reassignments_running_max"),
    (MembershipSettings, {"reassign_throttle_bytes_per_s": -1}, "reassign_throttle_bytes_per_s"),
    (StorageSettings, {"gc_drops_collect_fraction": 0.0}, "gc_drops_collect_fraction"),
    (StorageSettings, {"storage_fds_reserved": -1}, "storage_fds_reserved"),
    (StorageSettings, {"malloc_trim_threshold_bytes": -1}, "malloc_trim_threshold_bytes"),
    (StorageSettings, {"malloc_arenas_max": -1}, "malloc_arenas_max"),
    (TopicSettings, {"topics_max": 0}, "topics_max"),
    (GroupSettings, {"heartbeat_interval_ms": 7_000}, "heartbeat_interval_ms"),
    (GroupSettings, {"offsets_retention_ms": 0}, "offsets_retention_ms"),
    (SecuritySettings, {"tls_cert_file": "cert.pem"}, "tls_key_file"),
    (SecuritySettings, {"auth_bootstrap_token_file": "admin.token"}, "auth_enabled"),
    (MetricsSettings, {"metrics_listen": "no-port"}, "not host:port"),
    (MetricsSettings, {"metrics_lag_groups_per_partition_max": -1}, "metrics_lag_groups_per_partition_max"),
    (KafkaSettings, {"kafka_listen": "no-port"}, "not host:port"),
    (KafkaSettings, {"kafka_in_flight_per_connection_max": 0}, "kafka_in_flight_per_connection_max"),
]


@pytest.mark.parametrize("cls, values, word", SECTION_RULES, ids=lambda v: getattr(v, "__name__", None))
def test_each_section_refuses_what_its_own_rules_forbid(cls, values, word):
    cls().validate()
    with pytest.raises(errors.InvalidArgument, match=word):
        cls(**values).validate()


def test_every_section_has_rules_or_says_it_has_none():
    for cls in SECTIONS.values():
        cls().validate()
        assert cls.validate.__doc__ or cls in {c for c, _, _ in SECTION_RULES}, cls.__name__


@pytest.mark.parametrize("values, word", [
    ({"batch_bytes_max": 4_259_840}, "raft_command_bytes_max"),
    ({"join": "127.0.0.1:7070", "peers": "1@127.0.0.1:7071"}, "not both"),
])
def test_rules_across_sections_are_the_brokers(values, word):
    with pytest.raises(errors.InvalidArgument, match=word):
        BrokerSettings.from_keys(**values).validate()
