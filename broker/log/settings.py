"""LogSettings: produce, fetch and retention of stream partitions (the produce bounds hold for queue enqueues too)."""
from __future__ import annotations

from dataclasses import dataclass

from raftbus.broker.section import at_least, require, setting

WEEK_MS = 7 * 24 * 3600 * 1000


@dataclass(frozen=True)
class LogSettings:
    TITLE = "Produce and fetch"

    batch_bytes_max: int = setting(4 * 1024 * 1024, "largest produce batch (records bytes)")
    record_bytes_max: int = setting(1024 * 1024, "largest single record, enforced by the SDK")
    produce_timeout_ms: int = setting(10_000, "wait for majority commit before answering REQUEST_TIMED_OUT (every "
                                              "command a service proposes waits this long)")
    produce_stream_in_flight_max: int = setting(64, "unanswered batches per produce stream (the reader waits "
                                                    "beyond it)")
    batch_decompressed_bytes_max: int = setting(64 * 1024 * 1024, "a compressed record batch (Kafka's format) may "
                                                                   "inflate to at most this (else CORRUPT_BATCH)")
    fetch_bytes_max: int = setting(16 * 1024 * 1024, "cap on one fetch answer")
    fetch_wait_max_ms: int = setting(30_000, "cap on a fetch long-poll")
    fetch_waiters_max: int = setting(4096, "fetch long-polls and streams waiting on one partition")
    fetch_many_partitions_max: int = setting(1000, "partitions one FetchMany call may name")
    retention_check_interval_ms: int = setting(5000, "how often partition leaders trim what retention drops")
    producer_idle_ms: int = setting(WEEK_MS, "idempotent producer state kept this long after last use")

    compaction_check_interval_ms: int = setting(1000, "how often a broker looks at the compacted partitions it "
                                                      "leads for a pass that is due")
    compaction_bytes_per_s: int = setting(32 * 1024 * 1024, "stored bytes a broker's compaction reads per second, "
                                                             "across the partitions it leads")
    compaction_key_map_bytes_max: int = setting(64 * 1024 * 1024, "memory of the key map one compaction pass "
                                                                  "keeps (each key's latest record)")
    compaction_command_bytes_max: int = setting(1024 * 1024, "bytes one compaction command carries and rewrites "
                                                             "(bounds the work of applying it; <= batch_bytes_max)")
    compacted_key_bytes_max: int = setting(500, "largest key of a record on a compacted topic (at most 500: the key "
                                                "index is an LMDB table)")
    table_keys_per_call_max: int = setting(1000, "keys one ListKeys call answers")

    def validate(self) -> None:
        """The compaction bounds; batch_bytes_max is checked against raft_command_bytes_max (BrokerSettings)."""
        require(1 <= self.compaction_command_bytes_max <= self.batch_bytes_max,
                "compaction_command_bytes_max must be between 1 and batch_bytes_max")
        require(1 <= self.compacted_key_bytes_max <= 500, "compacted_key_bytes_max must be between 1 and 500")
        at_least(self, 1, "fetch_many_partitions_max", "compaction_check_interval_ms", "compaction_bytes_per_s", "compaction_key_map_bytes_max",
                 "table_keys_per_call_max")
