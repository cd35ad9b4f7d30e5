"""Broker settings: defaults in config/defaults.toml, a TOML file per broker, RAFTBUS_* environment variables,
then command-line flags, in that order of precedence (last wins)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from dynaconf import Dynaconf

from raftbus.client import errors

from raftbus.broker.raft import cluster_secret as cluster_secret_policy
from raftbus.broker.raft.group import RaftSettings
from raftbus.broker.raft.quiesce import QuiesceSettings


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


@dataclass(frozen=True)
class BrokerSettings:
    node_id: int = 1
    data_dir: str = "./data/broker-1"
    listen: str = "127.0.0.1:7070"
    advertised_listen: str = ""
    raft_listen: str = "127.0.0.1:7071"
    peers: str = ""
    cluster_secret: str = cluster_secret_policy.DEFAULT_SECRET
    cluster_id: str = cluster_secret_policy.DEFAULT_CLUSTER_ID
    cluster_secret_bytes_min: int = 32
    cluster_secret_accepted: str = ""
    metrics_listen: str = ""
    metrics_lag_groups_per_partition_max: int = 1000
    grpc_workers_max: int = 128
    grpc_concurrent_rpcs_max: int = 1024
    grpc_long_calls_max: int = 96
    grpc_long_calls_per_connection_max: int = 64
    grpc_message_bytes_max: int = 64 * 1024 * 1024
    raft_tick_interval_ms: int = 100
    raft_election_timeout_min_ms: int = 600
    raft_election_timeout_max_ms: int = 1200
    raft_leader_lost_election_min_ms: int = 400
    raft_leader_lost_election_max_ms: int = 600
    raft_heartbeat_interval_ms: int = 150
    raft_leader_fallback_timeout_ms: int = 3000
    raft_quiesce_enabled: bool = True
    raft_quiesce_after_ms: int = 2000
    raft_replicas_starting_max: int = 64
    raft_replica_starting_timeout_ms: int = 10_000
    raft_early_votes_keep_ms: int = 2_000
    raft_early_votes_groups_max: int = 10_000
    raft_liveness_interval_ms: int = 200
    raft_liveness_timeout_ms: int = 1000
    raft_command_bytes_max: int = 4_259_840
    raft_commands_queue_max: int = 100_000
    raft_log_compaction_bytes: int = 64 * 1024 * 1024
    raft_log_compaction_entries: int = 20_000
    raft_log_bytes_max: int = 256 * 1024 * 1024
    raft_log_bytes_broker_max: int = 512 * 1024 * 1024
    raft_log_entries_max: int = 200_000
    raft_snapshot_copy_ratio_max: int = 4
    raft_frame_bytes_max: int = 64 * 1024 * 1024
    raft_send_buffer_bytes_max: int = 256 * 1024 * 1024
    raft_bulk_send_buffer_bytes_max: int = 64 * 1024 * 1024
    raft_catch_up_bytes_in_flight_max: int = 8 * 1024 * 1024
    raft_snapshot_chunk_bytes: int = 1024 * 1024
    raft_snapshot_chunks_in_flight_max: int = 8
    raft_snapshot_ack_timeout_ms: int = 5000
    raft_connect_retry_ms: int = 200
    raft_handshake_timeout_ms: int = 2000
    raft_handshakes_pending_max: int = 64
    raft_handshakes_pending_per_address_max: int = 8
    raft_tls_cert_file: str = ""
    raft_tls_key_file: str = ""
    raft_tls_ca_file: str = ""
    isr_lag_time_ms: int = 10_000
    leader_gossip_interval_ms: int = 1000
    leader_gossip_full_interval_ms: int = 30_000
    preferred_leader_check_interval_ms: int = 5000
    drain_check_interval_ms: int = 500
    # membership and data movement (docs/replication.md, "Membership changes")
    join: str = ""
    join_timeout_ms: int = 60_000
    membership_check_interval_ms: int = 500
    membership_promote_lag_entries_max: int = 64
    membership_change_timeout_ms: int = 30_000
    reassign_throttle_bytes_per_s: int = 0
    reassignments_running_max: int = 8
    storage_sync_interval_ms: int = 200
    storage_map_size_bytes: int = 64 * 1024 * 1024
    storage_verify_on_open_bytes_max: int = 1024 * 1024 * 1024
    storage_free_bytes_min: int = 64 * 1024 * 1024
    storage_free_check_interval_ms: int = 1000
    storage_replicas_open_max: int = 0
    storage_fds_reserved: int = 1024
    gc_freeze_interval_ms: int = 1000
    gc_drops_collect_fraction: float = 0.1
    malloc_mmap_threshold_bytes: int = 1024 * 1024
    malloc_trim_threshold_bytes: int = 16 * 1024 * 1024
    batch_bytes_max: int = 4 * 1024 * 1024
    record_bytes_max: int = 1024 * 1024
    produce_timeout_ms: int = 10_000
    produce_stream_in_flight_max: int = 64
    fetch_bytes_max: int = 16 * 1024 * 1024
    fetch_wait_max_ms: int = 30_000
    fetch_waiters_max: int = 4096
    default_partitions: int = 3
    default_replication_factor: int = 3
    partitions_per_topic_max: int = 10_000
    topics_max: int = 10_000
    cluster_partitions_max: int = 40_000
    broker_replicas_max: int = 12_000
    default_retention_ms: int = 7 * 24 * 3600 * 1000
    default_retention_bytes: int = -1
    retention_check_interval_ms: int = 5000
    producer_idle_ms: int = 7 * 24 * 3600 * 1000
    shutdown_timeout_ms: int = 5000
    # consumer groups
    session_timeout_ms: int = 45_000
    session_timeout_min_ms: int = 6_000
    session_timeout_max_ms: int = 1_800_000
    heartbeat_interval_ms: int = 3_000
    rebalance_timeout_ms: int = 60_000
    rebalance_timeout_max_ms: int = 1_800_000
    group_members_max: int = 1_000
    groups_max: int = 10_000
    group_topics_per_member_max: int = 100
    group_expiry_check_interval_ms: int = 500
    group_empty_retention_ms: int = 7 * 24 * 3600 * 1000
    group_heartbeat_waiters_max: int = 32
    offset_metadata_bytes_max: int = 4096
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    offsets_retention_check_interval_ms: int = 600_000
    offsets_expire_groups_per_command_max: int = 1_000
    # queue topics
    queue_default_max_deliveries: int = 5
    queue_default_backoff_base_ms: int = 1000
    queue_default_backoff_max_ms: int = 300_000
    queue_default_max_in_flight_per_group: int = 0
    queue_default_idempotency_window_ms: int = 24 * 3600 * 1000
    queue_default_visibility_ms: int = 30_000
    queue_max_deliveries_max: int = 1000
    queue_backoff_ceiling_ms: int = 24 * 3600 * 1000
    queue_idempotency_window_min_ms: int = 60_000
    queue_idempotency_window_max_ms: int = 7 * 24 * 3600 * 1000
    queue_visibility_min_ms: int = 100
    queue_visibility_max_ms: int = 12 * 3600 * 1000
    queue_delay_max_ms: int = 90 * 24 * 3600 * 1000
    queue_batch_messages_max: int = 10_000
    queue_lease_messages_max: int = 1000
    queue_lease_bytes_max: int = 4 * 1024 * 1024
    queue_lease_wait_max_ms: int = 30_000
    queue_lease_waiters_max: int = 4096
    queue_waiting_calls_max: int = 32
    queue_stream_in_flight_max: int = 10_000
    queue_stream_wait_slice_ms: int = 1000
    queue_group_bytes_max: int = 255
    queue_idempotency_key_bytes_max: int = 255
    queue_nack_reason_bytes_max: int = 1024
    queue_due_per_command_max: int = 10_000
    queue_runs_enabled: bool = True
    queue_tick_interval_ms: int = 100
    queue_dead_letter_interval_ms: int = 500
    queue_dead_letter_batch_max: int = 500
    queue_redrive_batch_max: int = 1000
    queue_forward_timeout_ms: int = 10_000
    queue_peek_messages_max: int = 1000
    queue_stats_groups_max: int = 1000
    queue_stats_scan_max: int = 100_000
    # client-port security (docs/security.md)
    tls_cert_file: str = ""
    tls_key_file: str = ""
    tls_client_ca_file: str = ""
    tls_ca_file: str = ""
    auth_enabled: bool = False
    auth_bootstrap_principal: str = "admin"
    auth_bootstrap_token_file: str = ""

    extra: dict = field(default_factory=dict, compare=False)

    # ------------------------------------------------------------------ derived
    @property
    def listen_address(self) -> tuple[str, int]:
        return parse_address(self.listen)

    @property
    def client_address(self) -> str:
        return self.advertised_listen or self.listen

    @property
    def raft_address(self) -> tuple[str, int]:
        return parse_address(self.raft_listen)

    @property
    def peer_addresses(self) -> dict[int, tuple[str, int]]:
        peers = parse_peers(self.peers)
        peers.setdefault(self.node_id, self.raft_address)
        return peers

    @property
    def raft_secret(self) -> bytes:
        """The Raft key, derived from the secret and the cluster id; the transport never sees the string itself."""
        return cluster_secret_policy.raft_key(self.cluster_secret, self.cluster_id)

    @property
    def raft_accepted_secrets(self) -> list[bytes]:
        """Keys of `cluster_secret_accepted`: proofs under them are accepted, never sent (secret rotation)."""
        if not self.cluster_secret_accepted:
            return []
        return [cluster_secret_policy.raft_key(self.cluster_secret_accepted, self.cluster_id)]

    @property
    def loopback_only(self) -> bool:
        """Whether every listener (listen, raft_listen) is on a loopback address."""
        return all(cluster_secret_policy.is_loopback(host) for host, _ in (self.listen_address, self.raft_address))

    def raft(self) -> RaftSettings:
        return RaftSettings(
            election_timeout_min_ms=self.raft_election_timeout_min_ms,
            election_timeout_max_ms=self.raft_election_timeout_max_ms,
            leader_lost_election_min_ms=self.raft_leader_lost_election_min_ms,
            leader_lost_election_max_ms=self.raft_leader_lost_election_max_ms,
            heartbeat_interval_ms=self.raft_heartbeat_interval_ms,
            leader_fallback_timeout_ms=self.raft_leader_fallback_timeout_ms,
            command_bytes_max=self.raft_command_bytes_max,
            commands_queue_max=self.raft_commands_queue_max,
            log_compaction_bytes=self.raft_log_compaction_bytes,
            log_compaction_entries=self.raft_log_compaction_entries,
            log_bytes_max=self.raft_log_bytes_max,
            log_entries_max=self.raft_log_entries_max,
            snapshot_copy_ratio_max=self.raft_snapshot_copy_ratio_max,
            isr_lag_time_ms=self.isr_lag_time_ms,
            snapshot_chunk_bytes=self.raft_snapshot_chunk_bytes,
            snapshot_chunks_in_flight_max=self.raft_snapshot_chunks_in_flight_max,
            snapshot_ack_timeout_ms=self.raft_snapshot_ack_timeout_ms,
            catch_up_bytes_in_flight_max=self.raft_catch_up_bytes_in_flight_max,
            bulk_send_buffer_bytes_max=self.raft_bulk_send_buffer_bytes_max,
        )

    def quiesce(self) -> QuiesceSettings:
        return QuiesceSettings(enabled=self.raft_quiesce_enabled, quiesce_after_ms=self.raft_quiesce_after_ms,
                               liveness_interval_ms=self.raft_liveness_interval_ms,
                               liveness_timeout_ms=self.raft_liveness_timeout_ms)

    def validate(self) -> "BrokerSettings":
        if self.node_id < 1:
            raise errors.InvalidArgument("node_id must be >= 1")
        self.listen_address, self.raft_address  # noqa: B018 - parse errors surface here
        if self.metrics_listen:
            parse_address(self.metrics_listen)
        if self.metrics_lag_groups_per_partition_max < 0:
            raise errors.InvalidArgument("metrics_lag_groups_per_partition_max must be >= 0")
        peers = self.peer_addresses
        if peers[self.node_id] != self.raft_address:
            raise errors.InvalidArgument(
                f"peers lists {peers[self.node_id]} for node {self.node_id} but raft_listen is {self.raft_listen}")
        if self.batch_bytes_max + 1024 > self.raft_command_bytes_max:
            raise errors.InvalidArgument("raft_command_bytes_max must exceed batch_bytes_max by at least 1 KiB")
        if self.raft_election_timeout_min_ms <= 3 * self.raft_heartbeat_interval_ms:
            raise errors.InvalidArgument("raft_election_timeout_min_ms must exceed 3 × raft_heartbeat_interval_ms")
        if self.raft_election_timeout_max_ms <= self.raft_election_timeout_min_ms:
            raise errors.InvalidArgument("raft_election_timeout_max_ms must exceed raft_election_timeout_min_ms")
        if not (self.raft_connect_retry_ms + self.raft_heartbeat_interval_ms < self.raft_leader_lost_election_min_ms
                <= self.raft_leader_lost_election_max_ms <= self.raft_election_timeout_max_ms):
            raise errors.InvalidArgument(
                "need raft_connect_retry_ms + raft_heartbeat_interval_ms < raft_leader_lost_election_min_ms <= "
                "raft_leader_lost_election_max_ms <= raft_election_timeout_max_ms (a live leader is dialed again "
                "and heard from before a follower that lost its connection stands)")
        if self.raft_liveness_timeout_ms <= 2 * self.raft_liveness_interval_ms:
            raise errors.InvalidArgument("raft_liveness_timeout_ms must exceed 2 × raft_liveness_interval_ms")
        if not 0 < self.grpc_long_calls_per_connection_max <= self.grpc_long_calls_max < self.grpc_workers_max:
            raise errors.InvalidArgument("need 0 < grpc_long_calls_per_connection_max <= grpc_long_calls_max < "
                                         "grpc_workers_max (short calls need workers of their own)")
        for name in ("membership_check_interval_ms", "membership_change_timeout_ms", "reassignments_running_max",
                     "join_timeout_ms"):
            if getattr(self, name) < 1:
                raise errors.InvalidArgument(f"{name} must be >= 1")
        if self.membership_promote_lag_entries_max < 0 or self.reassign_throttle_bytes_per_s < 0:
            raise errors.InvalidArgument("membership_promote_lag_entries_max and reassign_throttle_bytes_per_s "
                                         "must be >= 0")
        if self.join and self.peers:
            raise errors.InvalidArgument("a broker joins a running cluster (join) or starts with peers, not both")
        if not 0 < self.leader_gossip_interval_ms <= self.leader_gossip_full_interval_ms:
            raise errors.InvalidArgument("need 0 < leader_gossip_interval_ms <= leader_gossip_full_interval_ms")
        if self.malloc_mmap_threshold_bytes < 0:
            raise errors.InvalidArgument("malloc_mmap_threshold_bytes must be >= 0")
        if self.malloc_trim_threshold_bytes < 0:
            raise errors.InvalidArgument("malloc_trim_threshold_bytes must be >= 0")
        if self.gc_freeze_interval_ms < 0 or not 0 < self.gc_drops_collect_fraction <= 1:
            raise errors.InvalidArgument("need gc_freeze_interval_ms >= 0 and 0 < gc_drops_collect_fraction <= 1")
        if self.raft_early_votes_keep_ms < 0 or self.raft_early_votes_groups_max < 0:
            raise errors.InvalidArgument("raft_early_votes_keep_ms and raft_early_votes_groups_max must be >= 0")
        if self.storage_replicas_open_max < 0 or self.storage_fds_reserved < 0:
            raise errors.InvalidArgument("storage_replicas_open_max and storage_fds_reserved must be >= 0")
        for name in ("grpc_concurrent_rpcs_max", "raft_replicas_starting_max", "raft_replica_starting_timeout_ms",
                     "topics_max", "cluster_partitions_max", "broker_replicas_max"):
            if getattr(self, name) < 1:
                raise errors.InvalidArgument(f"{name} must be >= 1")
        self._validate_consumer_groups()
        self._validate_raft_port()
        self._validate_client_security()
        return self

    def _validate_client_security(self) -> None:
        if bool(self.tls_cert_file) != bool(self.tls_key_file):
            raise errors.InvalidArgument("TLS on the client port needs both tls_cert_file and tls_key_file")
        if self.tls_client_ca_file and not self.tls_cert_file:
            raise errors.InvalidArgument("tls_client_ca_file (mutual TLS) needs tls_cert_file and tls_key_file")
        if self.auth_bootstrap_token_file and not self.auth_enabled:
            raise errors.InvalidArgument("auth_bootstrap_token_file is set but auth_enabled is false")

    def _validate_raft_port(self) -> None:
        problem = cluster_secret_policy.secret_problem(self.cluster_secret, self.cluster_id,
                                                       self.cluster_secret_bytes_min)
        if not problem and self.cluster_secret_accepted:
            problem = cluster_secret_policy.secret_problem(self.cluster_secret_accepted, self.cluster_id,
                                                           self.cluster_secret_bytes_min)
            problem = problem and problem.replace("cluster_secret", "cluster_secret_accepted", 1)
        if problem and not self.loopback_only:
            raise errors.InvalidArgument(
                f"refusing to listen beyond loopback (listen={self.listen}, raft_listen={self.raft_listen}): "
                f"{problem}. Set cluster_secret (RAFTBUS_CLUSTER_SECRET) to a random string of at least "
                f"{self.cluster_secret_bytes_min} bytes and cluster_id (RAFTBUS_CLUSTER_ID) to a name of this "
                "cluster, the same on every broker")
        self._validate_raft_flow_control()
        if self.raft_handshakes_pending_per_address_max < 1 or \
                self.raft_handshakes_pending_max < self.raft_handshakes_pending_per_address_max:
            raise errors.InvalidArgument(
                "need 1 <= raft_handshakes_pending_per_address_max <= raft_handshakes_pending_max")

    def _validate_raft_flow_control(self) -> None:
        """Entries and snapshot chunks fill at most raft_bulk_send_buffer_bytes_max of a peer's send buffer, plus one
        message (a command or a chunk); the rest stays free for heartbeats and votes, so it never overflows."""
        for name in ("raft_snapshot_chunk_bytes", "raft_snapshot_chunks_in_flight_max", "raft_snapshot_ack_timeout_ms",
                     "raft_catch_up_bytes_in_flight_max", "raft_bulk_send_buffer_bytes_max"):
            if getattr(self, name) < 1:
                raise errors.InvalidArgument(f"{name} must be >= 1")
        largest = max(self.raft_command_bytes_max + 64 * 1024, self.raft_snapshot_chunk_bytes + 1024)
        if largest > self.raft_frame_bytes_max // 2:
            raise errors.InvalidArgument("raft_snapshot_chunk_bytes and raft_command_bytes_max must stay below half "
                                         "of raft_frame_bytes_max")
        if self.raft_bulk_send_buffer_bytes_max + 2 * largest > self.raft_send_buffer_bytes_max:
            raise errors.InvalidArgument(
                "raft_send_buffer_bytes_max must exceed raft_bulk_send_buffer_bytes_max by two of the largest Raft "
                f"messages ({2 * largest} bytes: raft_command_bytes_max or raft_snapshot_chunk_bytes, with headroom)")

    # ------------------------------------------------------------------ consumer groups
    def _validate_consumer_groups(self) -> None:
        if not 0 < self.session_timeout_min_ms <= self.session_timeout_ms <= self.session_timeout_max_ms:
            raise errors.InvalidArgument(
                "need 0 < session_timeout_min_ms <= session_timeout_ms <= session_timeout_max_ms")
        if not 0 < self.heartbeat_interval_ms < self.session_timeout_min_ms:
            raise errors.InvalidArgument("heartbeat_interval_ms must be > 0 and below session_timeout_min_ms")
        if not 0 < self.rebalance_timeout_ms <= self.rebalance_timeout_max_ms:
            raise errors.InvalidArgument("need 0 < rebalance_timeout_ms <= rebalance_timeout_max_ms")
        for name in ("group_members_max", "groups_max", "group_topics_per_member_max",
                     "group_expiry_check_interval_ms", "offset_metadata_bytes_max",
                     "offsets_expire_groups_per_command_max", "offsets_retention_check_interval_ms"):
            if getattr(self, name) < 1:
                raise errors.InvalidArgument(f"{name} must be >= 1")
        if self.offsets_retention_ms < -1 or self.offsets_retention_ms == 0:
            raise errors.InvalidArgument("offsets_retention_ms must be > 0, or -1 to keep committed offsets forever")


_FIELDS = {f.name: f for f in dataclasses.fields(BrokerSettings) if f.name != "extra"}


def load_settings(config_file: str | None = None, **overrides) -> BrokerSettings:
    """Defaults file → per-broker TOML → RAFTBUS_* env → overrides (None values are ignored)."""
    defaults = resources.files("raftbus.config").joinpath("defaults.toml")
    files = [str(defaults)]
    if config_file:
        if not Path(config_file).is_file():
            raise errors.InvalidArgument(f"config file {config_file} does not exist")
        files.append(config_file)
    conf = Dynaconf(settings_files=files, envvar_prefix="RAFTBUS", environments=True, env="default",
                    load_dotenv=False)
    values = {}
    for name, f in _FIELDS.items():
        value = conf.get(name, None)
        if value is not None:
            values[name] = value
    values.update({k: v for k, v in overrides.items() if v is not None})
    unknown = set(values) - set(_FIELDS)
    if unknown:
        raise errors.InvalidArgument(f"unknown settings: {sorted(unknown)}")
    typed = {}
    for name, value in values.items():
        kind = type(_FIELDS[name].default)
        if kind is bool and not isinstance(value, bool):  # bool("false") is True: only true or false will do
            raise errors.InvalidArgument(f"setting {name}={value!r} is not true or false")
        try:
            typed[name] = kind(value)
        except (TypeError, ValueError):
            raise errors.InvalidArgument(f"setting {name}={value!r} is not a {kind.__name__}") from None
    return BrokerSettings(**typed).validate()
