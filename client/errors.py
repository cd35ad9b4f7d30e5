"""The one error hierarchy of raftbus, shared by the broker and the SDK.

Every error has a stable string `code`, a `retriable` flag, one row in `GRPC_STATUS` that says which
gRPC status code carries it and one in `KAFKA_ERROR` that says which Kafka error code carries it on the Kafka
port. The broker raises these; the servicers turn them into a status plus the code in trailing metadata; the
SDK rebuilds the same class from the code (never from message text).
"""
from __future__ import annotations

import grpc

# Trailing-metadata keys that carry an error across gRPC.
CODE_KEY = "raftbus-error-code"
LEADER_ID_KEY = "raftbus-leader-id"
LEADER_ADDRESS_KEY = "raftbus-leader-address"


class RaftbusError(Exception):
    """Base of every raftbus error."""

    code = "INTERNAL"
    retriable = False

    def __init__(self, message: str = "", *, leader_id: int | None = None, leader_address: str | None = None):
        super().__init__(message or self.code)
        self.message = message or self.code
        self.leader_id = leader_id
        self.leader_address = leader_address

    def __reduce__(self):
        return (_rebuild, (self.code, self.message, self.leader_id, self.leader_address))


def _rebuild(code, message, leader_id, leader_address):
    return error_from_code(code, message, leader_id=leader_id, leader_address=leader_address)


class InternalError(RaftbusError):
    """A broker bug or an unexpected state; the request had no effect that can be relied upon."""

    code = "INTERNAL"


class InvalidArgument(RaftbusError):
    """A malformed request: a field out of range, a missing field, an unknown option."""

    code = "INVALID_ARGUMENT"


class InvalidName(InvalidArgument):
    """A topic or group name that breaks the naming rules."""

    code = "INVALID_NAME"


class RecordTooLarge(InvalidArgument):
    """A single record is larger than `record_bytes_max`."""

    code = "RECORD_TOO_LARGE"


class BatchTooLarge(InvalidArgument):
    """A produce batch is larger than `batch_bytes_max`."""

    code = "BATCH_TOO_LARGE"


class EmptyBatch(InvalidArgument):
    """A produce request with no records."""

    code = "EMPTY_BATCH"


class CorruptBatch(InvalidArgument):
    """Record bytes that do not decode as a raftbus record batch."""

    code = "CORRUPT_BATCH"


class InvalidReplicationFactor(InvalidArgument):
    """A replication factor below 1 or above the number of brokers."""

    code = "INVALID_REPLICATION_FACTOR"


class InvalidPartitions(InvalidArgument):
    """A partition count below 1, above `partitions_per_topic_max`, or a shrink."""

    code = "INVALID_PARTITIONS"


class WrongTopicKind(InvalidArgument):
    """An operation of one topic kind used on the other (a lease on a stream topic)."""

    code = "WRONG_TOPIC_KIND"

    @classmethod
    def queue_only(cls, names, topic: str | None = None, kind: str = "stream") -> "WrongTopicKind":
        """Queue-topic options `names` given for a topic of another kind: one wording wherever it is found."""
        names = list(names)
        which = f"{topic!r} is a {kind} topic" if topic else f"this is a {kind} topic"
        return cls(f"only queue topics take {', '.join(names)}; {which}: leave {'it' if len(names) == 1 else 'them'} "
                   "out")


class UnknownTopic(RaftbusError):
    """No topic of that name exists."""

    code = "UNKNOWN_TOPIC"


class UnknownPartition(RaftbusError):
    """The topic exists but has no partition of that number."""

    code = "UNKNOWN_PARTITION"


class TopicExists(RaftbusError):
    """A topic of that name already exists."""

    code = "TOPIC_EXISTS"


class OffsetOutOfRange(RaftbusError):
    """A fetch below the log start (removed by retention) or beyond the high watermark."""

    code = "OFFSET_OUT_OF_RANGE"


class OutOfOrderSequence(RaftbusError):
    """An idempotent producer's batch skipped a sequence number; resend the missing batches first."""

    code = "OUT_OF_ORDER_SEQUENCE"
    retriable = True


class UnknownProducerId(RaftbusError):
    """The partition holds no state for this idempotent producer id and the batch does not start at sequence 0
    (its earlier batches are not appended yet, or the state expired after `producer_idle_ms`); the producer
    resends its earlier batches first, or restarts the partition's sequences under a fresh producer id when
    every earlier batch is acknowledged."""

    code = "UNKNOWN_PRODUCER_ID"
    retriable = True


class NotLeader(RaftbusError):
    """This broker does not lead the group; `leader_id`/`leader_address` hint at the one that does."""

    code = "NOT_LEADER"
    retriable = True


class LeaderNotAvailable(RaftbusError):
    """The group has no leader right now (an election is running)."""

    code = "LEADER_NOT_AVAILABLE"
    retriable = True


class RequestTimedOut(RaftbusError):
    """The request was not committed within its deadline; its outcome is unknown, so retry idempotently."""

    code = "REQUEST_TIMED_OUT"
    retriable = True


class Unavailable(RaftbusError):
    """The broker could not be reached or is shutting down."""

    code = "UNAVAILABLE"
    retriable = True


class BrokerUnreachable(Unavailable):
    """No broker of the bootstrap list (or of the cluster map) accepted a connection for `connect_timeout_ms`
    (each refused it, or the attempt timed out): the cluster is down or the address is wrong. An Unavailable, so
    producers and consumers, which retry until their own deadlines, treat it as one; one-shot calls (Admin,
    Queues, the CLI) fail with it at once."""

    code = "BROKER_UNREACHABLE"
    retriable = True


class TlsMismatch(RaftbusError):
    """The client's TLS settings do not fit the broker's: the broker speaks TLS and the client does not (pass a CA:
    --tls-ca, tls_ca=), the client speaks TLS and the broker does not, or the broker's certificate is not signed by
    the client's CA. Raised in the client only."""

    code = "TLS_MISMATCH"


class AddressInUse(RaftbusError):
    """A port a broker (or `raftbus dev`) would listen on is taken by another process; raised before anything
    starts, by the broker process only."""

    code = "ADDRESS_IN_USE"


class Overloaded(RaftbusError):
    """A bounded queue on the broker is full (`raft_commands_queue_max`, `fetch_waiters_max`)."""

    code = "OVERLOADED"
    retriable = True


class DiskFull(Overloaded):
    """The leader's disk is below `storage_free_bytes_min` free: it takes no new writes (reads go on) and hands
    its leaderships to replicas with room, so a retry usually lands on a new leader. An Overloaded: clients
    retry it the same way (forget the cached leader, back off)."""

    code = "DISK_FULL"
    retriable = True


class Unauthenticated(RaftbusError):
    """Missing, unknown or revoked credentials (bearer token or client certificate)."""

    code = "UNAUTHENTICATED"


class PermissionDenied(RaftbusError):
    """The authenticated principal has no ACL allowing this operation on this resource."""

    code = "PERMISSION_DENIED"


# ---------------------------------------------------------------------- consumer groups (stream topics)
class UnknownGroup(RaftbusError):
    """No consumer group of that name exists."""

    code = "UNKNOWN_GROUP"


class UnknownMember(RaftbusError):
    """The member is not (or no longer) in the group: it left or its session expired. Join again."""

    code = "UNKNOWN_MEMBER"


class StaleGeneration(RaftbusError):
    """The request comes from a generation older than the member's ownership of the partition (or older than
    one the partition already saw): fetch the current assignment and go on from there."""

    code = "STALE_GENERATION"


class PartitionNotAssigned(RaftbusError):
    """The member does not own the partition in the group's current assignment."""

    code = "PARTITION_NOT_ASSIGNED"


class MetadataBehind(RaftbusError):
    """This broker's copy of the group metadata has not reached the member's generation yet; retry shortly."""

    code = "METADATA_BEHIND"
    retriable = True


class OffsetRegression(RaftbusError):
    """A commit below the committed offset; only an explicit seek (reset) may move it back."""

    code = "OFFSET_REGRESSION"


class GroupNotEmpty(RaftbusError):
    """An operator's offset reset while the group has members: stop its consumers first."""

    code = "GROUP_NOT_EMPTY"


class GroupLimitReached(RaftbusError):
    """`group_members_max` members are in the group, or `groups_max` groups exist."""

    code = "GROUP_LIMIT_REACHED"


class InconsistentGroupProtocol(RaftbusError):
    """The group is in use by members of another protocol (raftbus's own, Kafka's classic protocol or Kafka's
    consumer protocol), or a classic member shares no assignment protocol with the group's members."""

    code = "INCONSISTENT_GROUP_PROTOCOL"


class RebalanceInProgress(RaftbusError):
    """A classic group is between generations: its members must join again before they sync."""

    code = "REBALANCE_IN_PROGRESS"


class GroupSubscribedToTopic(RaftbusError):
    """Deleting a group's committed offsets of a topic its members still consume."""

    code = "GROUP_SUBSCRIBED_TO_TOPIC"


class FencedInstanceId(RaftbusError):
    """Another consumer joined under the same static member id (Kafka's group.instance.id): this one is fenced."""

    code = "FENCED_INSTANCE_ID"


class GroupStateTooLarge(RaftbusError):
    """A Kafka classic group's members' protocols and assignments would exceed `kafka_group_state_bytes_max`."""

    code = "GROUP_STATE_TOO_LARGE"


class LimitReached(RaftbusError):
    """The change would exceed a configured count: `topics_max`, `cluster_partitions_max` or `broker_replicas_max`."""

    code = "LIMIT_REACHED"


class InvalidSessionTimeout(InvalidArgument):
    """A session or rebalance timeout outside the broker's bounds (`group_session_timeout_min_ms`...)."""

    code = "INVALID_SESSION_TIMEOUT"


# ---------------------------------------------------------------------- queue topics
class UnknownMessage(RaftbusError):
    """No queue message with that id: never enqueued, or already acked, deleted or moved to the dead-letter queue."""

    code = "UNKNOWN_MESSAGE"


class LeaseLost(RaftbusError):
    """An ack, nack or extend from a lease that no longer holds (it expired, or the message was leased again)."""

    code = "LEASE_LOST"


class MessageNotWaiting(RaftbusError):
    """Only a ready or delayed message can be rescheduled; this one is leased or being dead-lettered."""

    code = "MESSAGE_NOT_WAITING"


class SparkSetupError(RaftbusError):
    """Spark cannot use the raftbus data source as set up (its Python workers cannot import raftbus)."""

    code = "SPARK_SETUP"


class UnknownRoute(RaftbusError):
    """No HTTP route at that path takes that method (raised by the HTTP gateway only)."""

    code = "UNKNOWN_ROUTE"


class HostNotAllowed(InvalidArgument):
    """The request's Host header names no host the HTTP gateway serves (`--allowed-hosts`): a DNS-rebinding page
    or a misrouted request (raised by the HTTP gateway only)."""

    code = "HOST_NOT_ALLOWED"


class OriginNotAllowed(PermissionDenied):
    """A browser request from a page of another origin than the HTTP gateway's own or `--allowed-origins`
    (raised by the HTTP gateway only)."""

    code = "ORIGIN_NOT_ALLOWED"


class JsonRequired(InvalidArgument):
    """A state-changing HTTP call (POST, PUT, PATCH, DELETE) without `Content-Type: application/json` or an
    `X-Raftbus-Request` header, the two things a cross-site form cannot send (raised by the HTTP gateway only)."""

    code = "JSON_REQUIRED"


class RequestTooLarge(InvalidArgument):
    """An HTTP request body above the gateway's `request_body_bytes_max` (raised by the HTTP gateway only)."""

    code = "REQUEST_TOO_LARGE"


# ---------------------------------------------------------------------- backups (raised in the client only)
class CorruptBackup(RaftbusError):
    """A backup that does not verify: a file changed, missing or swapped, an encrypted file that fails
    authentication, a malformed manifest, or a manifest path outside the backup."""

    code = "CORRUPT_BACKUP"


class BackupKeyMismatch(InvalidArgument):
    """The key file is not the key the backup was encrypted with, or a key is missing for an encrypted backup (or
    given for one that is not encrypted)."""

    code = "BACKUP_KEY_MISMATCH"


# ---------------------------------------------------------------------- membership and data movement
class UnknownBroker(RaftbusError):
    """No broker of that id is registered (or it is not a member of the group named)."""

    code = "UNKNOWN_BROKER"


class BrokerIdInUse(RaftbusError):
    """A join names a broker id that a broker still holds (a metadata member, connected, or joining) at another
    address; the old broker must be gone first."""

    code = "BROKER_ID_IN_USE"


class InvalidReplicas(InvalidArgument):
    """A replica list with duplicates or no replica at all (an unregistered broker in it is UNKNOWN_BROKER)."""

    code = "INVALID_REPLICAS"


class MembershipChangeInProgress(RaftbusError):
    """A group's previous membership change has not been applied yet: one change at a time (retry)."""

    code = "MEMBERSHIP_CHANGE_IN_PROGRESS"
    retriable = True


class ReassignmentInProgress(RaftbusError):
    """The partition is already being moved; wait for that reassignment to finish."""

    code = "REASSIGNMENT_IN_PROGRESS"


class KeyRequired(InvalidArgument):
    """A record without a key for a compacted topic (compaction keeps the latest record of each key)."""

    code = "KEY_REQUIRED"


class KeyTooLarge(InvalidArgument):
    """A key over `compacted_key_bytes_max` for a compacted topic (its key index stores every key)."""

    code = "KEY_TOO_LARGE"


class NotCompacted(InvalidArgument):
    """A key-value operation (get, compare-and-set) on a topic whose cleanup policy is not compact."""

    code = "NOT_COMPACTED"


class RevisionMismatch(RaftbusError):
    """A compare-and-set whose expected revision is not the key's latest: nothing was written."""

    code = "REVISION_MISMATCH"


class KeyNotFound(RaftbusError):
    """Client only: the HTTP gateway's read of a table key that has no value (404)."""

    code = "KEY_NOT_FOUND"


class IndexBuilding(RaftbusError):
    """The partition's key index is still being built (the topic was just altered to compact); retry shortly."""

    code = "INDEX_BUILDING"
    retriable = True


# ---------------------------------------------------------------------- the table


# One row per error: the gRPC status code that carries it.
GRPC_STATUS: dict[type[RaftbusError], grpc.StatusCode] = {
    InternalError: grpc.StatusCode.INTERNAL,
    InvalidArgument: grpc.StatusCode.INVALID_ARGUMENT,
    InvalidName: grpc.StatusCode.INVALID_ARGUMENT,
    RecordTooLarge: grpc.StatusCode.INVALID_ARGUMENT,
    BatchTooLarge: grpc.StatusCode.INVALID_ARGUMENT,
    EmptyBatch: grpc.StatusCode.INVALID_ARGUMENT,
    CorruptBatch: grpc.StatusCode.INVALID_ARGUMENT,
    InvalidReplicationFactor: grpc.StatusCode.INVALID_ARGUMENT,
    InvalidPartitions: grpc.StatusCode.INVALID_ARGUMENT,
    WrongTopicKind: grpc.StatusCode.FAILED_PRECONDITION,
    UnknownTopic: grpc.StatusCode.NOT_FOUND,
    UnknownPartition: grpc.StatusCode.NOT_FOUND,
    TopicExists: grpc.StatusCode.ALREADY_EXISTS,
    OffsetOutOfRange: grpc.StatusCode.OUT_OF_RANGE,
    OutOfOrderSequence: grpc.StatusCode.FAILED_PRECONDITION,
    UnknownProducerId: grpc.StatusCode.FAILED_PRECONDITION,
    NotLeader: grpc.StatusCode.FAILED_PRECONDITION,
    LeaderNotAvailable: grpc.StatusCode.UNAVAILABLE,
    RequestTimedOut: grpc.StatusCode.DEADLINE_EXCEEDED,
    Unavailable: grpc.StatusCode.UNAVAILABLE,
    Overloaded: grpc.StatusCode.RESOURCE_EXHAUSTED,
    BrokerUnreachable: grpc.StatusCode.UNAVAILABLE,
    TlsMismatch: grpc.StatusCode.UNAVAILABLE,
    AddressInUse: grpc.StatusCode.FAILED_PRECONDITION,
    DiskFull: grpc.StatusCode.RESOURCE_EXHAUSTED,
    Unauthenticated: grpc.StatusCode.UNAUTHENTICATED,
    PermissionDenied: grpc.StatusCode.PERMISSION_DENIED,
    # consumer groups
    UnknownGroup: grpc.StatusCode.NOT_FOUND,
    UnknownMember: grpc.StatusCode.NOT_FOUND,
    StaleGeneration: grpc.StatusCode.FAILED_PRECONDITION,
    PartitionNotAssigned: grpc.StatusCode.FAILED_PRECONDITION,
    MetadataBehind: grpc.StatusCode.UNAVAILABLE,
    OffsetRegression: grpc.StatusCode.FAILED_PRECONDITION,
    GroupNotEmpty: grpc.StatusCode.FAILED_PRECONDITION,
    GroupLimitReached: grpc.StatusCode.RESOURCE_EXHAUSTED,
    InvalidSessionTimeout: grpc.StatusCode.INVALID_ARGUMENT,
    InconsistentGroupProtocol: grpc.StatusCode.FAILED_PRECONDITION,
    RebalanceInProgress: grpc.StatusCode.FAILED_PRECONDITION,
    GroupSubscribedToTopic: grpc.StatusCode.FAILED_PRECONDITION,
    FencedInstanceId: grpc.StatusCode.FAILED_PRECONDITION,
    GroupStateTooLarge: grpc.StatusCode.RESOURCE_EXHAUSTED,
    LimitReached: grpc.StatusCode.RESOURCE_EXHAUSTED,
    # queue topics
    UnknownMessage: grpc.StatusCode.NOT_FOUND,
    LeaseLost: grpc.StatusCode.FAILED_PRECONDITION,
    MessageNotWaiting: grpc.StatusCode.FAILED_PRECONDITION,
    # compacted topics and tables
    KeyRequired: grpc.StatusCode.INVALID_ARGUMENT,
    KeyTooLarge: grpc.StatusCode.INVALID_ARGUMENT,
    NotCompacted: grpc.StatusCode.FAILED_PRECONDITION,
    RevisionMismatch: grpc.StatusCode.FAILED_PRECONDITION,
    IndexBuilding: grpc.StatusCode.UNAVAILABLE,
    KeyNotFound: grpc.StatusCode.NOT_FOUND,
    # membership and data movement
    UnknownBroker: grpc.StatusCode.NOT_FOUND,
    InvalidReplicas: grpc.StatusCode.INVALID_ARGUMENT,
    BrokerIdInUse: grpc.StatusCode.FAILED_PRECONDITION,
    MembershipChangeInProgress: grpc.StatusCode.UNAVAILABLE,
    ReassignmentInProgress: grpc.StatusCode.FAILED_PRECONDITION,
    # Spark (raised in the client only)
    SparkSetupError: grpc.StatusCode.FAILED_PRECONDITION,
    # HTTP gateway (raised in the client only)
    UnknownRoute: grpc.StatusCode.NOT_FOUND,
    HostNotAllowed: grpc.StatusCode.INVALID_ARGUMENT,
    OriginNotAllowed: grpc.StatusCode.PERMISSION_DENIED,
    JsonRequired: grpc.StatusCode.INVALID_ARGUMENT,
    RequestTooLarge: grpc.StatusCode.INVALID_ARGUMENT,
    # backups (raised in the client only)
    CorruptBackup: grpc.StatusCode.DATA_LOSS,
    BackupKeyMismatch: grpc.StatusCode.INVALID_ARGUMENT,
}

ERRORS_BY_CODE: dict[str, type[RaftbusError]] = {cls.code: cls for cls in GRPC_STATUS}


# One row per error: the Kafka protocol error code that carries it on the Kafka port (broker/kafka/), by number
# (Kafka's name beside it). Kafka's resource-specific codes (GROUP_ and CLUSTER_AUTHORIZATION_FAILED,
# NOT_CONTROLLER) are chosen by the Kafka handlers where the resource tells them apart.
KAFKA_ERROR: dict[type[RaftbusError], int] = {
    InternalError: -1,                # UNKNOWN_SERVER_ERROR
    InvalidArgument: 42,              # INVALID_REQUEST
    InvalidName: 17,                  # INVALID_TOPIC_EXCEPTION
    RecordTooLarge: 10,               # MESSAGE_TOO_LARGE
    BatchTooLarge: 10,                # MESSAGE_TOO_LARGE
    EmptyBatch: 87,                   # INVALID_RECORD
    CorruptBatch: 2,                  # CORRUPT_MESSAGE
    InvalidReplicationFactor: 38,     # INVALID_REPLICATION_FACTOR
    InvalidPartitions: 37,            # INVALID_PARTITIONS
    WrongTopicKind: 42,               # INVALID_REQUEST (the message names the topic's kind)
    UnknownTopic: 3,                  # UNKNOWN_TOPIC_OR_PARTITION
    UnknownPartition: 3,              # UNKNOWN_TOPIC_OR_PARTITION
    TopicExists: 36,                  # TOPIC_ALREADY_EXISTS
    OffsetOutOfRange: 1,              # OFFSET_OUT_OF_RANGE
    OutOfOrderSequence: 45,           # OUT_OF_ORDER_SEQUENCE_NUMBER
    UnknownProducerId: 59,            # UNKNOWN_PRODUCER_ID
    NotLeader: 6,                     # NOT_LEADER_OR_FOLLOWER
    LeaderNotAvailable: 5,            # LEADER_NOT_AVAILABLE
    RequestTimedOut: 7,               # REQUEST_TIMED_OUT
    Unavailable: 5,                   # LEADER_NOT_AVAILABLE (the broker is stopping: clients refresh metadata)
    Overloaded: 89,                   # THROTTLING_QUOTA_EXCEEDED
    DiskFull: 56,                     # KAFKA_STORAGE_ERROR
    Unauthenticated: 58,              # SASL_AUTHENTICATION_FAILED
    PermissionDenied: 29,             # TOPIC_AUTHORIZATION_FAILED
    # consumer groups
    UnknownGroup: 69,                 # GROUP_ID_NOT_FOUND
    UnknownMember: 25,                # UNKNOWN_MEMBER_ID
    StaleGeneration: 22,              # ILLEGAL_GENERATION
    PartitionNotAssigned: 27,         # REBALANCE_IN_PROGRESS
    MetadataBehind: 14,               # COORDINATOR_LOAD_IN_PROGRESS
    OffsetRegression: 42,             # INVALID_REQUEST
    GroupNotEmpty: 68,                # NON_EMPTY_GROUP
    GroupLimitReached: 81,            # GROUP_MAX_SIZE_REACHED
    InvalidSessionTimeout: 26,        # INVALID_SESSION_TIMEOUT
    InconsistentGroupProtocol: 23,    # INCONSISTENT_GROUP_PROTOCOL
    RebalanceInProgress: 27,          # REBALANCE_IN_PROGRESS
    GroupSubscribedToTopic: 86,       # GROUP_SUBSCRIBED_TO_TOPIC
    FencedInstanceId: 82,             # FENCED_INSTANCE_ID
    GroupStateTooLarge: -1,           # UNKNOWN_SERVER_ERROR (what Kafka answers when a group's record is too large)
    LimitReached: 44,                 # POLICY_VIOLATION
    # queue topics
    UnknownMessage: 42,               # INVALID_REQUEST
    LeaseLost: 42,                    # INVALID_REQUEST
    MessageNotWaiting: 42,            # INVALID_REQUEST
    # compacted topics and tables
    KeyRequired: 87,                  # INVALID_RECORD (Kafka: a compacted topic refuses a record without a key)
    KeyTooLarge: 87,                  # INVALID_RECORD
    NotCompacted: 42,                 # INVALID_REQUEST
    RevisionMismatch: 42,             # INVALID_REQUEST (never an answer of the Kafka port)
    IndexBuilding: 14,                # COORDINATOR_LOAD_IN_PROGRESS (retriable)
    KeyNotFound: -1,                  # UNKNOWN_SERVER_ERROR (raised in the HTTP gateway only)
    # membership and data movement
    UnknownBroker: 8,                 # BROKER_NOT_AVAILABLE
    InvalidReplicas: 39,              # INVALID_REPLICA_ASSIGNMENT
    BrokerIdInUse: 8,                 # BROKER_NOT_AVAILABLE
    MembershipChangeInProgress: 60,   # REASSIGNMENT_IN_PROGRESS
    ReassignmentInProgress: 60,       # REASSIGNMENT_IN_PROGRESS
    # raised in the client only (Spark, HTTP gateway, backups): never an answer of the Kafka port
    SparkSetupError: -1,              # UNKNOWN_SERVER_ERROR
    UnknownRoute: -1,                 # UNKNOWN_SERVER_ERROR
    HostNotAllowed: -1,               # UNKNOWN_SERVER_ERROR
    OriginNotAllowed: -1,             # UNKNOWN_SERVER_ERROR
    JsonRequired: -1,                 # UNKNOWN_SERVER_ERROR
    RequestTooLarge: -1,              # UNKNOWN_SERVER_ERROR
    CorruptBackup: -1,                # UNKNOWN_SERVER_ERROR
    BackupKeyMismatch: -1,            # UNKNOWN_SERVER_ERROR
    # raised in the client or the broker process only (connection and start-up failures)
    BrokerUnreachable: -1,            # UNKNOWN_SERVER_ERROR
    TlsMismatch: -1,                  # UNKNOWN_SERVER_ERROR
    AddressInUse: -1,                 # UNKNOWN_SERVER_ERROR
}


def all_error_classes() -> list[type[RaftbusError]]:
    """Every concrete error class defined in this module (the error-table test walks these)."""
    found, todo = [], [RaftbusError]
    while todo:
        cls = todo.pop()
        for sub in cls.__subclasses__():
            found.append(sub)
            todo.append(sub)
    return found


def error_from_proto(error) -> "RaftbusError":
    """The typed error of a wire `Error` message (in a stream's answer or a FetchMany partition's)."""
    return error_from_code(error.code, error.message, leader_id=error.leader_id or None,
                           leader_address=error.leader_address or None)


def error_from_code(code: str, message: str = "", **hints) -> RaftbusError:
    """Rebuild the typed error for a stable code; unknown codes become InternalError."""
    cls = ERRORS_BY_CODE.get(code, InternalError)
    return cls(message, **hints)


def status_for(error: RaftbusError) -> grpc.StatusCode:
    return GRPC_STATUS.get(type(error), grpc.StatusCode.INTERNAL)


def kafka_code_for(error: RaftbusError) -> int:
    """The Kafka protocol error code of a typed error (UNKNOWN_SERVER_ERROR, -1, for anything else)."""
    return KAFKA_ERROR.get(type(error), -1)


def trailing_metadata(error: RaftbusError) -> tuple[tuple[str, str], ...]:
    """The metadata pairs that carry `error` across gRPC."""
    pairs = [(CODE_KEY, error.code)]
    if error.leader_id is not None:
        pairs.append((LEADER_ID_KEY, str(error.leader_id)))
    if error.leader_address:
        pairs.append((LEADER_ADDRESS_KEY, error.leader_address))
    return tuple(pairs)


def error_from_rpc(exc: grpc.RpcError) -> RaftbusError:
    """Map a failed call back to its typed error (transport failures become Unavailable/RequestTimedOut)."""
    metadata = dict(exc.trailing_metadata() or ()) if hasattr(exc, "trailing_metadata") else {}
    code = metadata.get(CODE_KEY)
    details = exc.details() if hasattr(exc, "details") else str(exc)
    if code is None:
        status = exc.code() if hasattr(exc, "code") else None
        if status == grpc.StatusCode.DEADLINE_EXCEEDED:
            return RequestTimedOut(details or "deadline exceeded")
        if status in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED, grpc.StatusCode.UNKNOWN):
            return Unavailable(details or "broker unavailable")
        if status == grpc.StatusCode.RESOURCE_EXHAUSTED:
            return Overloaded(details or "resource exhausted")
        if status == grpc.StatusCode.INVALID_ARGUMENT:
            return InvalidArgument(details or "invalid argument")
        return InternalError(details or "internal error")
    leader_id = metadata.get(LEADER_ID_KEY)
    return error_from_code(
        code,
        details or code,
        leader_id=int(leader_id) if leader_id else None,
        leader_address=metadata.get(LEADER_ADDRESS_KEY),
    )
