"""QueueSettings: queue topics' per-topic defaults and their bounds, what one call may carry, the lease streams,
the queue tick and the dead-letter mover."""
from __future__ import annotations

from dataclasses import dataclass

from raftbus.broker.section import setting

DAY_MS = 24 * 3600 * 1000


@dataclass(frozen=True)
class QueueSettings:
    TITLE = "Queue topics"

    queue_default_max_deliveries: int = setting(5, "deliveries before a message moves to <topic>.dlq; 0 = never")
    queue_default_backoff_base_ms: int = setting(1000, "first retry delay after a nack or an expired lease")
    queue_default_backoff_max_ms: int = setting(300_000, "cap of the exponential retry delay (5 min)")
    queue_default_max_in_flight_per_group: int = setting(0, "fair ordering: leased messages per group at once; 0 = "
                                                            "unlimited")
    queue_default_idempotency_window_ms: int = setting(DAY_MS, "idempotency keys are remembered this long (24 h)")
    queue_default_visibility_ms: int = setting(30_000, "lease length when a consumer names none")
    queue_max_deliveries_max: int = setting(1000, "bounds of the per-topic options above: max_deliveries")
    queue_backoff_ceiling_ms: int = setting(DAY_MS, "... backoff_max_ms")
    queue_idempotency_window_min_ms: int = setting(60_000, "... idempotency_window_ms (the window also deduplicates "
                                                           "dead-letter moves and redrives)")
    queue_idempotency_window_max_ms: int = setting(7 * DAY_MS, "... and its upper bound")
    queue_visibility_min_ms: int = setting(100, "shortest lease a consumer may ask for")
    queue_visibility_max_ms: int = setting(12 * 3600 * 1000, "longest lease a consumer may ask for (12 h)")
    queue_delay_max_ms: int = setting(90 * DAY_MS, "deliver_at at most 90 days ahead")
    queue_batch_messages_max: int = setting(10_000, "messages per enqueue, ack, nack, extend or delete request")
    queue_lease_messages_max: int = setting(1000, "messages per lease")
    queue_lease_bytes_max: int = setting(4 * 1024 * 1024, "record bytes per lease (at least one message)")
    queue_lease_wait_max_ms: int = setting(30_000, "cap on a lease long-poll")
    queue_lease_waiters_max: int = setting(4096, "lease long-polls and streams waiting on one partition")
    queue_waiting_calls_max: int = setting(32, "lease streams and long-polls open on one broker (each holds a gRPC "
                                               "worker thread: keep it below grpc_workers_max)")
    queue_stream_in_flight_max: int = setting(10_000, "unsettled leases one lease stream may hold")
    queue_stream_wait_slice_ms: int = setting(1000, "a waiting lease stream re-checks its client this often")
    queue_group_bytes_max: int = setting(255, "longest message group name")
    queue_idempotency_key_bytes_max: int = setting(255, "longest idempotency key")
    queue_nack_reason_bytes_max: int = setting(1024, "longest reason a nack records")
    queue_due_per_command_max: int = setting(10_000, "expired leases (and due messages, expired keys) per command")
    queue_runs_enabled: bool = setting(True, "enqueues store plain messages a run per priority (docs/queues.md, "
                                             "Runs); false on upgraded brokers until every broker runs a version with "
                                             "runs")
    queue_tick_interval_ms: int = setting(100, "a partition leader submits due work this often when idle")
    queue_lease_failover_grace_ms: int = setting(3000, "a new partition leader expires no lease that ran out "
                                                 "before its term until this long into it, so consumers can renew "
                                                 "their leases across a failover (0: off)")
    queue_dead_letter_interval_ms: int = setting(500, "the dead-letter mover looks for dead messages this often")
    queue_dead_letter_batch_max: int = setting(500, "dead messages one partition moves per round")
    queue_redrive_batch_max: int = setting(1000, "dead messages one redrive call moves back")
    queue_forward_timeout_ms: int = setting(10_000, "broker-to-broker enqueue of a dead-letter move or redrive")
    queue_peek_messages_max: int = setting(1000, "messages one peek or scan returns")
    queue_stats_groups_max: int = setting(1000, "groups listed per partition by stats")
    queue_stats_scan_max: int = setting(100_000, "ready messages scanned for each group's oldest")

    def validate(self) -> None:
        """Nothing of its own: each per-topic option is checked against these bounds when a topic is created."""
