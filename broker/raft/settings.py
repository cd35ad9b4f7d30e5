"""Timers and bounds of every Raft group (config/defaults.toml holds their units and defaults)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RaftSettings:
    election_timeout_min_ms: int = 600
    election_timeout_max_ms: int = 1200
    # A follower whose connection to its leader's broker closes stands for election this long after, at random
    # between min and max, unless the leader is heard from again first (see RaftGroup.on_peer_lost).
    leader_lost_election_min_ms: int = 400
    leader_lost_election_max_ms: int = 600
    heartbeat_interval_ms: int = 150
    leader_fallback_timeout_ms: int = 3000
    command_bytes_max: int = 4 * 1024 * 1024
    commands_queue_max: int = 100_000
    reads_waiting_max: int = 100_000
    log_compaction_bytes: int = 64 * 1024 * 1024
    log_compaction_entries: int = 20_000
    log_bytes_max: int = 256 * 1024 * 1024
    log_entries_max: int = 200_000
    snapshot_copy_ratio_max: int = 4
    isr_lag_time_ms: int = 10_000
    # Flow control of what a leader sends each peer (see transfer.py).
    snapshot_chunk_bytes: int = 1024 * 1024
    snapshot_chunks_in_flight_max: int = 8
    snapshot_ack_timeout_ms: int = 5000
    catch_up_bytes_in_flight_max: int = 8 * 1024 * 1024
    bulk_send_buffer_bytes_max: int = 64 * 1024 * 1024
