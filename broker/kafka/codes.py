"""Kafka protocol error codes the Kafka port answers with, and the typed error → code mapping.

The mapping of every raftbus error is one table, `KAFKA_ERROR` in client/errors.py beside the gRPC one; this
module adds the codes a handler picks itself (a version it does not serve, a request that does not parse, an
authorization failure on a group or on the cluster, an admin call that reached a broker that is not the
controller).
"""
from __future__ import annotations

from raftbus.client import errors

UNKNOWN_SERVER_ERROR = -1
NONE = 0
OFFSET_OUT_OF_RANGE = 1
CORRUPT_MESSAGE = 2
UNKNOWN_TOPIC_OR_PARTITION = 3
LEADER_NOT_AVAILABLE = 5
NOT_LEADER_OR_FOLLOWER = 6
REQUEST_TIMED_OUT = 7
MESSAGE_TOO_LARGE = 10
INVALID_TOPIC_EXCEPTION = 17
TOPIC_AUTHORIZATION_FAILED = 29
GROUP_AUTHORIZATION_FAILED = 30
CLUSTER_AUTHORIZATION_FAILED = 31
UNSUPPORTED_VERSION = 35
TOPIC_ALREADY_EXISTS = 36
INVALID_PARTITIONS = 37
INVALID_REPLICATION_FACTOR = 38
INVALID_REQUIRED_ACKS = 21
NOT_CONTROLLER = 41
INVALID_REQUEST = 42
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
DUPLICATE_SEQUENCE_NUMBER = 46
INVALID_CONFIG = 40
UNKNOWN_PRODUCER_ID = 59
INVALID_RECORD = 87
UNKNOWN_TOPIC_ID = 100
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
INVALID_TXN_STATE = 48
# consumer groups
OFFSET_METADATA_TOO_LARGE = 12
COORDINATOR_LOAD_IN_PROGRESS = 14
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
ILLEGAL_GENERATION = 22
INCONSISTENT_GROUP_PROTOCOL = 23
INVALID_GROUP_ID = 24
UNKNOWN_MEMBER_ID = 25
INVALID_SESSION_TIMEOUT = 26
REBALANCE_IN_PROGRESS = 27
NON_EMPTY_GROUP = 68
GROUP_ID_NOT_FOUND = 69
MEMBER_ID_REQUIRED = 79
GROUP_MAX_SIZE_REACHED = 81
FENCED_INSTANCE_ID = 82
GROUP_SUBSCRIBED_TO_TOPIC = 86
FENCED_MEMBER_EPOCH = 110
UNRELEASED_INSTANCE_ID = 111
UNSUPPORTED_ASSIGNOR = 112
STALE_MEMBER_EPOCH = 113
# authentication
UNSUPPORTED_SASL_MECHANISM = 33
ILLEGAL_SASL_STATE = 34
SASL_AUTHENTICATION_FAILED = 58

RETRIABLE = {CORRUPT_MESSAGE, UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER,
             REQUEST_TIMED_OUT, NOT_CONTROLLER}


def code_of(error: BaseException) -> int:
    """The Kafka error code of a raised error: its row in client/errors.py's KAFKA_ERROR, UNKNOWN_SERVER_ERROR for
    anything untyped."""
    if isinstance(error, errors.RaftbusError):
        return errors.kafka_code_for(error)
    return UNKNOWN_SERVER_ERROR


def group_code_of(error: BaseException, *, consumer_protocol: bool = False) -> int:
    """The Kafka error code of an error raised by a group call: where the answer is about the coordinator
    (NOT_COORDINATOR while another broker leads the metadata group, COORDINATOR_NOT_AVAILABLE during an
    election or a commit that did not make it in time), a group id (INVALID_GROUP_ID) or, for Kafka's consumer
    protocol, a member epoch (FENCED_MEMBER_EPOCH); else its row in KAFKA_ERROR."""
    if isinstance(error, errors.NotLeader) and error.leader_id is not None:
        return NOT_COORDINATOR
    if isinstance(error, errors.NotLeader | errors.LeaderNotAvailable | errors.Unavailable |
                  errors.RequestTimedOut):
        return COORDINATOR_NOT_AVAILABLE
    if isinstance(error, errors.InvalidName):
        return INVALID_GROUP_ID
    if isinstance(error, errors.PermissionDenied):
        return GROUP_AUTHORIZATION_FAILED
    if consumer_protocol and isinstance(error, errors.StaleGeneration):
        return FENCED_MEMBER_EPOCH
    return code_of(error)


def message_of(error: BaseException) -> str:
    if isinstance(error, errors.RaftbusError):
        return error.message
    return "internal error"
