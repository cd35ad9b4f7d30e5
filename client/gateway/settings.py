"""Limits and defaults of the HTTP gateway, as named constants with their units in the name."""
from __future__ import annotations

LISTEN_DEFAULT = "127.0.0.1:8080"
LISTEN_BACKLOG = 2048                      # connections the listening socket queues

# One request's size: records of a produce, messages of an enqueue, leases of an ack/nack/extend.
RECORDS_PER_REQUEST_MAX = 10_000
MESSAGES_PER_REQUEST_MAX = 10_000
LEASES_PER_REQUEST_MAX = 10_000
# Records one fetch returns at most, and the default when `max` is not given.
FETCH_RECORDS_MAX = 10_000
FETCH_RECORDS_DEFAULT = 500
# How long one request may long-poll (fetch, lease, consumer poll).
WAIT_MS_MAX = 30_000
# Messages one lease request takes at most (the brokers' queue_lease_messages_max).
LEASE_MESSAGES_MAX = 1_000
# A lease request that found nothing waits on the partitions in turn, this long on each.
LEASE_WAIT_SLICE_MS = 200
# Messages one peek returns at most per partition.
PEEK_MESSAGES_MAX = 1_000

# The shared Producer: how long records of concurrent requests wait to share a batch.
PRODUCE_LINGER_MS = 2

# Consumer instances (consumer-group members held by this gateway for HTTP clients), in all and per principal.
CONSUMER_INSTANCES_MAX = 1_000
CONSUMER_INSTANCES_PER_PRINCIPAL_MAX = 500
CONSUMER_INSTANCE_IDLE_MS = 300_000        # an instance not used for this long leaves its group and is dropped
CONSUMER_INSTANCE_CHECK_MS = 5_000         # how often idle instances are looked for

# Client sets (a Router, Producer, Reader and Queues holding one bearer token): built only for a token the
# cluster accepted, kept for this many tokens at once in all and per principal (the least recently used go).
TOKEN_CLIENT_SETS_MAX = 64
TOKEN_CLIENT_SETS_PER_PRINCIPAL_MAX = 4
# A kept token is asked about again (WhoAmI) when its last check is this old; a revoked one then loses its set.
TOKEN_RECHECK_MS = 60_000
# A bearer token longer than this, or not one line of printable ASCII, is refused without asking the cluster.
BEARER_TOKEN_BYTES_MAX = 512

# Request bodies: larger ones are refused (413) from Content-Length before anything is read, or as soon as the
# streamed bytes pass it; bodies are read into memory only up to it.
REQUEST_BODY_BYTES_MAX = 16 * 1024 * 1024
# Open HTTP connections, in total and from one source address: one more is closed as soon as it is accepted.
CONNECTIONS_MAX = 1000
CONNECTIONS_PER_ADDRESS_MAX = 100

# Hosts always served besides the listen address (`--allowed-hosts` replaces the whole list).
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")
# A state-changing call (POST, PUT, PATCH, DELETE) needs `Content-Type: application/json` or this header.
REQUEST_HEADER = "x-raftbus-request"
# On a cluster that does not check bearer tokens, answers to requests bearing one carry `<this>: false`.
TOKEN_CHECKED_HEADER = "x-raftbus-token-checked"

# Threads that run blocking SDK calls for requests (long polls hold one each).
REQUEST_THREADS_MAX = 64

# The dashboard's JSON snapshot: consumer groups it describes with lag at most (the rest are listed only).
DASHBOARD_GROUPS_MAX = 50
# Tables (compacted topics): the dashboard counts a table's live keys up to this many ("at least" beyond it).
DASHBOARD_TABLE_KEYS_MAX = 10_000
# Keys one GET /v1/tables/{table}/keys returns at most, and the default when `limit` is not given.
TABLE_KEYS_MAX = 10_000
TABLE_KEYS_DEFAULT = 1_000
# Events one watch poll returns at most.
TABLE_WATCH_EVENTS_MAX = 10_000

# `raftbus bench http`: concurrent keep-alive connections to the gateway, records (messages) per produce
# (enqueue) request, messages per lease request, and the single-record requests timed at light load.
BENCH_CONNECTIONS = 8
BENCH_RECORDS_PER_REQUEST = 100
BENCH_LEASE_MESSAGES = 100
BENCH_LEASE_VISIBILITY_MS = 60_000
BENCH_LIGHT_LOAD_REQUESTS = 500
BENCH_GATEWAY_READY_TIMEOUT_MS = 30_000
BENCH_GATEWAY_STOP_TIMEOUT_MS = 15_000
