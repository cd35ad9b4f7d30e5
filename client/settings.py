"""Client-side defaults of the raftbus SDK, as named constants with their units in the name.

Every queue, batch, wait and buffer on the client has a bound here; callers may override each one
through the constructor argument of the same name.
"""
from __future__ import annotations

import os

from raftbus.client.errors import InvalidArgument

# Where to find the cluster when nothing is given: the `--bootstrap` flag, then this variable, then the default.
BOOTSTRAP_ENV = "RAFTBUS_BOOTSTRAP"
BOOTSTRAP_DEFAULT = "localhost:7070"

# gRPC channels.
GRPC_MESSAGE_BYTES_MAX = 64 * 1024 * 1024

# Requests and retries (router).
REQUEST_TIMEOUT_MS = 30_000
METADATA_MAX_AGE_MS = 300_000
RETRIES = 150                         # at RETRY_BACKOFF_LEADER_MAX_MS apart, about 15 s of leader changes
RETRY_BACKOFF_MS = 50
RETRY_BACKOFF_MAX_MS = 1_000          # the longest wait between retries of an overloaded or timed-out call
RETRY_BACKOFF_LEADER_MAX_MS = 100     # ... while a partition has no reachable leader (an election: 0.4-1.2 s); each
#                                       such retry refreshes the map, and concurrent refreshes share one request
# A channel to a broker that went away dials it again after RECONNECT_BACKOFF_MS, growing (gRPC's 1.6x, jittered
# +-20 %) up to RECONNECT_BACKOFF_MAX_MS; while it waits, calls to that broker fail at once. The cap is short so that
# a broker back from a restart is reachable as soon as it leads again (gRPC's own default grows to 120 s); the cost is
# one connection attempt every RECONNECT_BACKOFF_MAX_MS to a broker that is down (docs/performance.md, "Failover").
RECONNECT_BACKOFF_MS = 100
RECONNECT_BACKOFF_MAX_MS = 250
# A call that can reach no broker (the bootstrap list and the known brokers all refuse connections, or the attempts
# time out) fails with BROKER_UNREACHABLE once each has refused for this long, instead of retrying until
# REQUEST_TIMEOUT_MS; it is also the timeout of the probe that tells a refused connection from a TLS mismatch.
CONNECT_TIMEOUT_MS = 2_000

# Producer.
LINGER_MS = 5
BATCH_BYTES_MAX = 1_048_576
BUFFER_BYTES_MAX = 64 * 1024 * 1024
DELIVERY_TIMEOUT_MS = 120_000
MAX_BLOCK_MS = 60_000
IDEMPOTENT = True
# Batches in flight per partition (at most 5: the broker remembers the last 5 batches of each producer to answer
# retries). 1 by default: what is sent while a partition's batch is in flight gathers into its next batch, so a
# busy partition gets fewer, larger requests (docs/performance.md, "One batch in flight").
MAX_IN_FLIGHT_PER_PARTITION = 1
MAX_IN_FLIGHT_PER_PARTITION_MAX = 5
PRODUCER_ID_BYTES = 16
# Keyed records: the producer remembers the murmur2 of this many recent keys (forgotten all at once when full).
KEY_HASH_ENTRIES_MAX = 10_000

# Admin: create_topic/alter_partitions with wait=True poll metadata until every partition has a leader.
TOPIC_READY_TIMEOUT_MS = 30_000
TOPIC_READY_POLL_MS = 100
TOPIC_READY_POLL_MAX_MS = 1000  # the wait for a new topic's leaders polls at most this far apart

# Reader.
FETCH_BYTES_MAX = 1_048_576
FETCH_WAIT_MS = 500
POLL_IDLE_SLEEP_MS = 100
# A Reader's iterators send their next fetches while the caller takes the records of the last one: at most this
# many at once per iterator (iter_partition one; iter_topic one per partition, so it holds at most this many
# answers of at most fetch_bytes_max each). The sync Reader runs them on a pool of this many threads, on which
# iter_topic also asks for its partitions' start positions; AsyncReader runs them as tasks.
READER_FETCHES_AHEAD_MAX = 8
# Partitions one FetchMany of a Reader names at most (a leader of more gets several calls); the broker's own bound is
# fetch_many_partitions_max.
READER_FETCH_MANY_PARTITIONS_MAX = 1000
# How long a reader waits for a new leader's high watermark to catch up with an offset it already read up to.
HIGH_WATERMARK_CATCH_UP_MS = 5_000

# Queue topics: the Producer's queue path, QueueConsumer and Queues.
QUEUE_BATCH_MESSAGES_MAX = 5_000       # messages per Enqueue, Ack, Nack or Extend request (brokers allow 10,000)
# A QueueConsumer sends the settlements of this many partitions at once (threads of its pool; one partition's go one
# after the other), so a partition whose leader is gone does not hold up the acks and renewals of the others.
QUEUE_SETTLE_PARTITIONS_AT_ONCE = 8
QUEUE_VISIBILITY_MS = 30_000           # lease length a consumer asks for
QUEUE_PREFETCH_MESSAGES = 200          # unsettled leases a consumer holds per partition (the stream's max_in_flight)
# The most a consumer may prefetch per partition: after a stream is reopened on a new leader it may hold up to
# twice its prefetch there, and one Extend request (QUEUE_BATCH_MESSAGES_MAX) must renew them all.
QUEUE_PREFETCH_MESSAGES_MAX = QUEUE_BATCH_MESSAGES_MAX // 2
# A consumer renews the leases it holds (prefetched or handed out, not settled) with one Extend per partition when
# one of them has less than this left (at most half of visibility_ms), up to QUEUE_LEASE_EXTENSION_MAX_MS after
# each message arrived; it hands the application no message with less than half this margin left.
QUEUE_LEASE_EXTENSION_MARGIN_MS = 2_000
QUEUE_LEASE_EXTENSION_MAX_MS = 3_600_000  # 1 h; 0 turns lease extension off
QUEUE_LEASE_CHECK_MAX_MS = 500          # the lease keeper looks at least this often at what it holds
QUEUE_LEASE_BATCH_MESSAGES = 100       # messages per LeaseStream answer
QUEUE_POLL_MESSAGES_MAX = 500          # messages one QueueConsumer.poll returns at most
QUEUE_ACK_LINGER_MS = 2                # acks, nacks and extends wait this long to share a request
QUEUE_STREAM_RETRY_BACKOFF_MS = 100    # first wait before a consumer reopens a failed lease stream
QUEUE_STREAM_RETRY_BACKOFF_MAX_MS = 2_000
QUEUE_PARTITIONS_CHECK_MS = 30_000      # a consumer of whole topics looks for added partitions this often
QUEUE_REDRIVE_BATCH_MESSAGES = 1_000   # messages per Redrive request

# CLI: records sent by `raftbus produce` whose acknowledgement is not printed yet.
CLI_PENDING_SENDS_MAX = 10_000

# Benchmarks (`raftbus bench`).
BENCH_CLUSTER_READY_TIMEOUT_MS = 120_000
BENCH_CLUSTER_STOP_TIMEOUT_MS = 20_000
BENCH_PORT_ATTEMPTS_MAX = 50
BENCH_LIGHT_LOAD_RATE_PER_S = 1_000
BENCH_LIGHT_LOAD_DURATION_MS = 3_000
BENCH_WORKER_READY_TIMEOUT_MS = 60_000
BENCH_BATCHES_QUEUED_PER_PARTITION = 5
BENCH_PREFERRED_LEADERS_TIMEOUT_MS = 20_000  # wait for leaders to settle before measuring latency
BENCH_FAILOVER_ROUNDS = 3               # leader kills in `raftbus bench failover`
BENCH_IDLE_PARTITIONS = 100             # partitions of the idle topic in `raftbus bench idle`
BENCH_IDLE_SECONDS = 10.0               # how long idle CPU is measured
BENCH_REFERENCE_LOOP_ITERATIONS = 5_000_000  # a pure-Python loop timed before and after a run: the machine's speed
BENCH_IDLE_SETTLE_MS = 120_000          # wait at most this long after the idle topic has leaders for every group to quiesce
BENCH_IDLE_LEADERS_TIMEOUT_MS = 600_000  # how long `bench idle` waits for every partition of its topic to have a leader
BENCH_SCALE_RECORDS = 200_000          # records per row of `raftbus bench scale` (kept small: `make bench` runs it)
# records per producer row (1, 4, 16 processes): enough for each of 16 processes to send ~12 full batches, so the
# row measures writing rather than each process's first requests (a 200,000-record row lasted 0.2-0.8 s)
BENCH_SCALE_PRODUCER_RECORDS = 1_600_000
BENCH_SCALE_PARTITIONS = (3, 30, 300)   # partition counts of its rows
BENCH_SCALE_PRODUCERS = (1, 4, 16)      # producer process counts of its rows
BENCH_ERROR_TEXT_CHARS_MAX = 400       # a failed row's error as reported in the results
BENCH_SCALE_TOPIC_READY_TIMEOUT_MS = 180_000  # until every partition of a row's topic has a leader (300 take a while)
BENCH_KV_KEYS = 10_000                  # keys of `raftbus bench kv`'s table and compacted topic
BENCH_KV_COMPACTION_RECORDS = 100_000   # records written over those keys before `bench kv` times a compaction
BENCH_KV_MEASURE_MS = 3_000             # each timed window of `bench kv` (gets, CAS puts, produce before and after)
BENCH_KV_LIGHT_LOAD_RATE_PER_S = 200     # single-record sends/s timed beside `bench kv`'s produce load
BENCH_KV_CAS_KEYS = 100                 # keys each compare-and-set process of `bench kv` cycles over
BENCH_KV_COMPACTION_TIMEOUT_MS = 120_000  # `bench kv` gives up on a compaction pass after this long
BENCH_AIO_SENDERS = 500                # concurrent AsyncProducer.send tasks per process in `raftbus bench aio`
BENCH_QUEUE_CALLERS_PER_PARTITION = 2   # lease+ack loops per partition (one leases while another acks)
# Messages per Lease (and per Ack) of `bench queue`: the most one lease may take (the brokers' default
# queue_lease_messages_max), as a worker pool draining a backlog asks for; the peer benchmark's NATS workers
# fetch the same 1,000 per call.
BENCH_QUEUE_LEASE_BATCH_MESSAGES = 1_000
# `raftbus bench soak` (client/bench/soak.py): how long, how often a broker is killed and the brokers sampled, the
# stream topic's retention (bytes per partition: it bounds the data kept), and the verdicts' targets.
BENCH_SOAK_MINUTES = 60.0
BENCH_SOAK_KILL_EVERY_MINUTES = 10.0
BENCH_SOAK_SAMPLE_SECONDS = 2.0
BENCH_SOAK_PEAK_SECONDS = 15.0          # each load alone, unpaced, when its rate is not given
BENCH_SOAK_RETENTION_BYTES = 128 * 1024 * 1024
BENCH_SOAK_BATCH_RECORDS = 500          # records per send_batch of the produce load
BENCH_SOAK_LATENCY_SAMPLES_MAX = 20_000  # latency samples a load keeps per report interval (thinned evenly beyond)
BENCH_SOAK_DRAIN_TIMEOUT_MS = 120_000   # at the end: how long a drain goes on without progress (reads, acks)
BENCH_SOAK_STATS_TIMEOUT_MS = 1_000     # a broker's BrokerStats (its Raft log in memory) at each sample
BENCH_SOAK_RESTART_DELAY_MS = 5_000     # from a broker's kill -9 to its restart
BENCH_SOAK_GROWTH_PERCENT_MAX = 5.0     # memory, open files and file sizes: the end against the first kill
BENCH_SOAK_GROWTH_WINDOW_MINUTES = 5.0  # ... each the largest sample of this long (saw-tooth figures)
BENCH_SOAK_P99_RATIO_MAX = 2.0          # latency p99 of each later kill period vs the first


def bootstrap_default() -> str:
    """The bootstrap list when the caller gave none: RAFTBUS_BOOTSTRAP, else localhost:7070."""
    return os.environ.get(BOOTSTRAP_ENV) or BOOTSTRAP_DEFAULT


def parse_bootstrap(bootstrap: str | list[str] | tuple[str, ...]) -> list[str]:
    """Split "h1:p1,h2:p2" (or a list of such strings) into a clean list of addresses."""
    items = [bootstrap] if isinstance(bootstrap, str) else list(bootstrap)
    addresses = [part.strip() for item in items for part in item.split(",") if part.strip()]
    if not addresses:
        raise InvalidArgument("bootstrap must name at least one host:port")
    return addresses

# ---------------------------------------------------------------------- consumer groups (Consumer)
# Membership: what the member asks the broker for (the broker bounds the timeouts and may shorten the
# heartbeat interval to a third of the session timeout).
SESSION_TIMEOUT_MS = 45_000
HEARTBEAT_INTERVAL_MS = 3_000
REBALANCE_TIMEOUT_MS = 60_000
# Committing: with auto-commit, positions are committed this often (from poll), before revocation and on close.
ENABLE_AUTO_COMMIT = True
AUTO_COMMIT_INTERVAL_MS = 5_000
# Fetching: one fetch in flight per owned partition, each answer at most CONSUMER_FETCH_BYTES_MAX; no new
# fetch while CONSUMER_BUFFER_BYTES_MAX of answers wait to be polled.
CONSUMER_FETCH_BYTES_MAX = 4 * 1024 * 1024
CONSUMER_BUFFER_BYTES_MAX = 64 * 1024 * 1024
MAX_POLL_RECORDS = 500
# How long one step of `for record in consumer` waits in poll.
POLL_TIMEOUT_MS = 1_000
# Threads that run per-partition calls (commits, committed-offset reads) in parallel.
CONSUMER_CALL_THREADS = 4
# `raftbus bench consume --group`: fetch size and poll size of the throughput run, the members' heartbeat
# interval and session timeout in the rebalance run, and how long a rebalance may take before the run fails.
BENCH_GROUP_FETCH_BYTES_MAX = BATCH_BYTES_MAX  # about one producer batch per poll, so one commit per batch
BENCH_GROUP_POLL_RECORDS_MAX = 1_000_000
BENCH_GROUP_HEARTBEAT_INTERVAL_MS = 500
BENCH_GROUP_SESSION_TIMEOUT_MS = 6_000
BENCH_REBALANCE_TIMEOUT_MS = 30_000
# How long the group of one stays stable (owning every partition) before a member joins it, in both rebalance
# runs: longer than a client takes to settle after an assignment (librdkafka fetches the committed offsets and
# sends its next heartbeat within about 500 ms).
BENCH_REBALANCE_STABLE_MS = 1_000
