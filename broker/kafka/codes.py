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
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
INVALID_TXN_STATE = 48

RETRIABLE = {CORRUPT_MESSAGE, UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER,
             REQUEST_TIMED_OUT, NOT_CONTROLLER}


def code_of(error: BaseException) -> int:
    """The Kafka error code of a raised error: its row in client/errors.py's KAFKA_ERROR, UNKNOWN_SERVER_ERROR for
    anything untyped."""
    if isinstance(error, errors.RaftbusError):
        return errors.kafka_code_for(error)
    return UNKNOWN_SERVER_ERROR


def message_of(error: BaseException) -> str:
    if isinstance(error, errors.RaftbusError):
        return error.message
    return "internal error"
