"""Goal: every gRPC method of every raftbus service (and health) has exactly one row in the method table, and each
check names a field its request really has."""
import pytest
from google.protobuf import descriptor_pool

from raftbus.broker.security.methods import AUTHENTICATED, METHOD_CHECKS, PUBLIC, operation_name
from raftbus.client.wire import (  # noqa: F401 (registers them)
    groups_pb2, integrity_pb2, membership_pb2, queues_pb2, raftbus_pb2, security_pb2)

SERVICES = ["raftbus.v1.Log", "raftbus.v1.Admin", "raftbus.v1.Groups", "raftbus.v1.Queue", "raftbus.v1.Security",
            "raftbus.v1.Membership", "raftbus.v1.Integrity"]


def service_methods():
    pool = descriptor_pool.Default()
    for name in SERVICES:
        for method in pool.FindServiceByName(name).methods:
            yield f"/{name}/{method.name}", method


def test_every_method_has_a_row_and_no_row_is_stale():
    methods = {path for path, _ in service_methods()}
    health = {"/grpc.health.v1.Health/Check", "/grpc.health.v1.Health/Watch"}
    assert set(METHOD_CHECKS) == methods | health
    assert all(METHOD_CHECKS[path] is PUBLIC for path in health)
    assert all(METHOD_CHECKS[path] is not PUBLIC for path in methods)


@pytest.mark.parametrize("path, method", list(service_methods()), ids=lambda v: v if isinstance(v, str) else "")
def test_checks_name_fields_of_the_request(path, method):
    for check in METHOD_CHECKS[path] or ():
        if check.resource_type == "cluster":
            assert check.field == ""
            continue
        assert check.field.rstrip("*?") in method.input_type.fields_by_name, (path, check)


def test_data_calls_need_an_acl_and_metadata_reads_only_a_principal():
    assert METHOD_CHECKS["/raftbus.v1.Admin/GetMetadata"] == AUTHENTICATED
    assert METHOD_CHECKS["/raftbus.v1.Log/ProduceStream"][0].operation == "produce"
    assert {c.resource_type for c in METHOD_CHECKS["/raftbus.v1.Groups/JoinGroup"]} == {"group", "topic"}
    assert operation_name("/raftbus.v1.Log/Produce") == "Log/Produce"


def test_a_check_reads_single_repeated_and_optional_fields():
    join = METHOD_CHECKS["/raftbus.v1.Groups/JoinGroup"]
    from raftbus.client.wire import groups_pb2 as gpb
    request = gpb.JoinGroupRequest(group="g", topics=["a", "b"])
    assert [c.resources(request) for c in join] == [["g"], ["a", "b"]]
    fetch = METHOD_CHECKS["/raftbus.v1.Log/Fetch"]
    assert [c.resources(raftbus_pb2.FetchRequest(topic="t")) for c in fetch] == [["t"], []]
    assert [c.resources(raftbus_pb2.FetchRequest(topic="t", group="g")) for c in fetch] == [["t"], ["g"]]
