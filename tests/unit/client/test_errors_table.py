"""Goal: every raftbus error has one gRPC status row and a unique code, and survives a trip through gRPC."""
import grpc
import pytest

from raftbus.client import errors
from raftbus.client.errors import (
    CODE_KEY,
    GRPC_STATUS,
    KAFKA_ERROR,
    NotLeader,
    all_error_classes,
    error_from_code,
    error_from_rpc,
    status_for,
    trailing_metadata,
)


class FakeRpcError(grpc.RpcError):
    def __init__(self, status, details="", metadata=()):
        self._status, self._details, self._metadata = status, details, metadata

    def code(self):
        return self._status

    def details(self):
        return self._details

    def trailing_metadata(self):
        return self._metadata


def test_every_error_class_has_a_status_row():
    missing = [cls.__name__ for cls in all_error_classes() if cls not in GRPC_STATUS]
    assert missing == []


def test_every_error_class_has_a_kafka_row():
    """Goal: every typed error has one Kafka error code on the Kafka port, a real one of Kafka's."""
    missing = [cls.__name__ for cls in all_error_classes() if cls not in KAFKA_ERROR]
    assert missing == []
    from kio.schema.errors import ErrorCode

    assert {code for code in KAFKA_ERROR.values()} <= {int(c) for c in ErrorCode}
    assert errors.kafka_code_for(errors.NotLeader("x")) == 6
    assert errors.kafka_code_for(errors.WrongTopicKind("x")) == 42  # queue topics: INVALID_REQUEST


def test_codes_are_unique():
    codes = [cls.code for cls in all_error_classes()]
    assert len(codes) == len(set(codes))


@pytest.mark.parametrize("cls", all_error_classes(), ids=lambda c: c.__name__)
def test_code_rebuilds_the_same_class(cls):
    rebuilt = error_from_code(cls.code, "boom")
    assert type(rebuilt) is cls and rebuilt.message == "boom"


@pytest.mark.parametrize("cls", all_error_classes(), ids=lambda c: c.__name__)
def test_rpc_error_with_trailing_metadata_maps_back(cls):
    err = cls("why", leader_id=2, leader_address="h:2")
    fake = FakeRpcError(status_for(err), "why", trailing_metadata(err))
    back = error_from_rpc(fake)
    assert type(back) is cls
    assert (back.message, back.leader_id, back.leader_address) == ("why", 2, "h:2")


def test_not_leader_without_hint_has_no_hint():
    back = error_from_rpc(FakeRpcError(grpc.StatusCode.FAILED_PRECONDITION, "x", ((CODE_KEY, "NOT_LEADER"),)))
    assert isinstance(back, NotLeader) and back.leader_id is None and back.leader_address is None


@pytest.mark.parametrize("status,cls", [
    (grpc.StatusCode.UNAVAILABLE, errors.Unavailable),
    (grpc.StatusCode.DEADLINE_EXCEEDED, errors.RequestTimedOut),
    (grpc.StatusCode.RESOURCE_EXHAUSTED, errors.Overloaded),
    (grpc.StatusCode.INTERNAL, errors.InternalError),
])
def test_transport_failures_without_code_map_by_status(status, cls):
    assert type(error_from_rpc(FakeRpcError(status, "x"))) is cls


def test_unknown_code_becomes_internal():
    assert type(error_from_code("NO_SUCH_CODE")) is errors.InternalError
