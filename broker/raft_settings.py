"""RaftSection: the raft_* settings. The groups' own `RaftSettings` and `QuiesceSettings` (broker/raft/) are held
as they are, as parts of the section, beside what the broker's one loop, its replica opener and its peer transport
take. Every key is `raft_` + the field's name, except `isr_lag_time_ms` and `raft_quiesce_enabled`."""
from __future__ import annotations

from dataclasses import dataclass

from raftbus.broker.raft.group import RaftSettings
from raftbus.broker.raft.quiesce import QuiesceSettings
from raftbus.broker.section import part, require, setting

GROUP_COMMENTS = {
    "election_timeout_min_ms": "a follower that hears from no leader stands for election after a random time "
                               "between this",
    "election_timeout_max_ms": "... and this",
    "leader_lost_election_min_ms": "a follower whose leader's broker connection closes stands this long after,",
    "leader_lost_election_max_ms": "... at random up to this (unless the leader is heard from again first)",
    "heartbeat_interval_ms": "leaders of idle groups send heartbeats this often (sent at the next tick)",
    "leader_fallback_timeout_ms": "a leader that hears from no majority for this long steps down",
    "command_bytes_max": "largest command: batch_bytes_max plus headroom",
    "commands_queue_max": "commands submitted to one group and not yet in its log; beyond: OVERLOADED",
    "reads_waiting_max": "reads waiting for one group's leader to confirm its leadership and apply (ReadIndex); "
                         "beyond: OVERLOADED",
    "log_compaction_bytes": "snapshot a group once this much log has been applied since the last (while its "
                            "store is at most raft_snapshot_copy_ratio_max times that log)",
    "log_compaction_entries": "... or this many entries",
    "log_bytes_max": "snapshot regardless once a group's log (its journal) reaches this",
    "log_entries_max": "... or this many entries",
    "snapshot_copy_ratio_max": "a snapshot copies the store: a larger store than this many times the log since the "
                               "last snapshot waits for raft_log_bytes_max",
    "isr_lag_time_ms": "a follower not caught up within this long leaves the in-sync replicas",
    "snapshot_chunk_bytes": "a snapshot travels to a follower in chunks of this size",
    "snapshot_chunks_in_flight_max": "... with at most this many sent and not acknowledged, per group and peer",
    "snapshot_ack_timeout_ms": "chunks in flight this long without an acknowledgement are sent again",
    "catch_up_bytes_in_flight_max": "log entries one group has sent one peer and not had acknowledged",
    "bulk_send_buffer_bytes_max": "of raft_send_buffer_bytes_max, what log entries and snapshot chunks of all "
                                  "groups may fill (shared evenly by the groups sending); the rest is for heartbeats "
                                  "and votes. Must leave room for two of the largest messages",
}
QUIESCE_COMMENTS = {
    "enabled": "idle groups stop ticking and heartbeating (docs/replication.md, Quiescence)",
    "quiesce_after_ms": "a led group idle this long (all committed, applied, replicated) quiesces",
    "liveness_interval_ms": "one liveness message per connected peer this often, for all quiesced groups",
    "liveness_timeout_ms": "a broker silent this long wakes the groups it leads on the others",
}


@dataclass(frozen=True)
class RaftSection:
    TITLE = "Raft (every group of the broker)"
    KEY_PREFIX = "raft_"

    group: RaftSettings = part(RaftSettings, comments=GROUP_COMMENTS, keys={"isr_lag_time_ms": "isr_lag_time_ms"},
                               defaults={"command_bytes_max": 4_259_840})
    quiesce: QuiesceSettings = part(QuiesceSettings, comments=QUIESCE_COMMENTS,
                                    keys={"enabled": "raft_quiesce_enabled"})
    tick_interval_ms: int = setting(100, "every group is ticked this often for its timers (heartbeats, elections)")
    loop_stall_report_ms: int = setting(500, "a Raft loop pass running this long is logged with the loop thread's "
                                             "stack (0: never)")
    log_bytes_broker_max: int = setting(512 * 1024 * 1024, "all groups' logs held in memory together (entries not "
                                                           "yet applied everywhere); above it the largest "
                                                           "snapshots first")
    replicas_starting_max: int = setting(64, "new replicas started and not quiesced yet, at most; the others wait "
                                             "their turn")
    replica_starting_timeout_ms: int = setting(10_000, "... a new replica stops counting after this long even if "
                                                       "not quiesced")
    early_votes_keep_ms: int = setting(2_000, "a vote request for a replica not opened here yet is kept this long "
                                              "(0: dropped)")
    early_votes_groups_max: int = setting(10_000, "... for at most this many groups at once (the oldest go first)")
    frame_bytes_max: int = setting(64 * 1024 * 1024, "largest frame between brokers")
    send_buffer_bytes_max: int = setting(256 * 1024 * 1024, "bytes queued to one peer; above it the connection is "
                                                            "dropped")
    connect_retry_ms: int = setting(200, "a lost peer connection is dialed again after this long")
    handshake_timeout_ms: int = setting(2000, "a Raft-port connection not authenticated within this is closed")
    handshakes_pending_max: int = setting(64, "Raft-port connections not yet authenticated, in total")
    handshakes_pending_per_address_max: int = setting(8, "... and from one source address")
    tls_cert_file: str = setting("", 'mutual TLS between brokers: this broker\'s certificate (PEM); "" = TLS off')
    tls_key_file: str = setting("", "... its private key (PEM)")
    tls_ca_file: str = setting("", "... the CA that signs every broker's certificate (PEM)")

    def validate(self) -> None:
        g = self.group
        require(g.election_timeout_min_ms > 3 * g.heartbeat_interval_ms,
                "raft_election_timeout_min_ms must exceed 3 × raft_heartbeat_interval_ms")
        require(g.election_timeout_max_ms > g.election_timeout_min_ms,
                "raft_election_timeout_max_ms must exceed raft_election_timeout_min_ms")
        require(self.connect_retry_ms + g.heartbeat_interval_ms < g.leader_lost_election_min_ms
                <= g.leader_lost_election_max_ms <= g.election_timeout_max_ms,
                "need raft_connect_retry_ms + raft_heartbeat_interval_ms < raft_leader_lost_election_min_ms <= "
                "raft_leader_lost_election_max_ms <= raft_election_timeout_max_ms (a live leader is dialed again "
                "and heard from before a follower that lost its connection stands)")
        require(self.quiesce.liveness_timeout_ms > 2 * self.quiesce.liveness_interval_ms,
                "raft_liveness_timeout_ms must exceed 2 × raft_liveness_interval_ms")
        require(self.early_votes_keep_ms >= 0 and self.early_votes_groups_max >= 0,
                "raft_early_votes_keep_ms and raft_early_votes_groups_max must be >= 0")
        for name in ("replicas_starting_max", "replica_starting_timeout_ms"):
            require(getattr(self, name) >= 1, f"raft_{name} must be >= 1")
        self._validate_flow_control()
        require(1 <= self.handshakes_pending_per_address_max <= self.handshakes_pending_max,
                "need 1 <= raft_handshakes_pending_per_address_max <= raft_handshakes_pending_max")

    def _validate_flow_control(self) -> None:
        """Entries and snapshot chunks fill at most raft_bulk_send_buffer_bytes_max of a peer's send buffer, plus one
        message (a command or a chunk); the rest stays free for heartbeats and votes, so it never overflows."""
        g = self.group
        for name in ("snapshot_chunk_bytes", "snapshot_chunks_in_flight_max", "snapshot_ack_timeout_ms",
                     "catch_up_bytes_in_flight_max", "bulk_send_buffer_bytes_max"):
            require(getattr(g, name) >= 1, f"raft_{name} must be >= 1")
        largest = max(g.command_bytes_max + 64 * 1024, g.snapshot_chunk_bytes + 1024)
        require(largest <= self.frame_bytes_max // 2,
                "raft_snapshot_chunk_bytes and raft_command_bytes_max must stay below half of raft_frame_bytes_max")
        require(g.bulk_send_buffer_bytes_max + 2 * largest <= self.send_buffer_bytes_max,
                "raft_send_buffer_bytes_max must exceed raft_bulk_send_buffer_bytes_max by two of the largest Raft "
                f"messages ({2 * largest} bytes: raft_command_bytes_max or raft_snapshot_chunk_bytes, with headroom)")

