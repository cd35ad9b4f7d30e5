"""Goal: the Kafka port's router answers every frame it can read with a well-formed response of the right shape:
exactly the served versions, UNSUPPORTED_VERSION for keys and versions it does not serve, INVALID_REQUEST for a
body that does not parse, UNKNOWN_SERVER_ERROR for a handler that fails; and the schema bridge builds any
version from plain values."""
import asyncio

from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.metadata.v12.request import MetadataRequest

from raftbus.broker.kafka import codes
from raftbus.broker.kafka.router import Api, Router
from raftbus.broker.kafka.schema import make, response_schema
from tests.kafka_wire import parse_response, request_frame


async def _metadata(request):
    return {"brokers": [{"node_id": 1, "host": "h", "port": 9}], "topics": [], "controller_id": 1}


async def _fails(request):
    raise RuntimeError("boom")


def _router() -> Router:
    router = Router([Api(3, "Metadata", 0, 12, _metadata), Api(19, "CreateTopics", 2, 7, _fails)])
    from raftbus.broker.kafka.apis import versions
    router.apis[18] = Api(18, "ApiVersions", 0, 4, versions.handler(router))
    return router


class _Session:
    client_id = None


def _answer(router, frame: bytes) -> bytes:
    return asyncio.run(router.answer(memoryview(frame[4:]), _Session()))[4:]


def test_api_versions_lists_exactly_the_served_keys():
    """Goal: ApiVersions answers with the router's keys and version ranges, nothing more."""
    router = _router()
    body = ApiVersionsRequest(client_software_name="t", client_software_version="1")
    cid, answer = parse_response(18, 3, _answer(router, request_frame(18, 3, 7, body)))
    assert cid == 7 and answer.error_code == codes.NONE
    assert [(k.api_key, k.min_version, k.max_version) for k in answer.api_keys] == [(3, 0, 12), (18, 0, 4), (19, 2, 7)]


def test_unknown_key_gets_api_versions_unsupported():
    """Goal: a key the router does not serve (known to Kafka or not) gets ApiVersions v0 with UNSUPPORTED_VERSION."""
    router = _router()
    for key in (11, 999):
        frame = request_frame(3, 1, 9)  # a header of some served request; its key is replaced below
        frame = frame[:4] + key.to_bytes(2, "big") + frame[6:]
        cid, answer = parse_response(18, 0, _answer(router, frame))
        assert cid == 9 and answer.error_code == codes.UNSUPPORTED_VERSION
        assert 3 in [k.api_key for k in answer.api_keys]


def test_version_out_of_range_gets_the_apis_own_shape():
    """Goal: Metadata v13 (beyond the served 12) is answered as a MetadataResponse v13 with UNSUPPORTED_VERSION."""
    from kio.schema.metadata.v13.request import MetadataRequest as V13

    body = V13(topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    cid, answer = parse_response(3, 13, _answer(_router(), request_frame(3, 13, 4, body)))
    assert cid == 4 and answer.error_code == codes.UNSUPPORTED_VERSION and answer.topics == ()


def test_truncated_body_gets_invalid_request_and_a_failing_handler_unknown_server_error():
    """Goal: a body cut short and a handler that raises are answered, in the API's shape, with typed codes."""
    router = _router()
    body = MetadataRequest(topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    whole = request_frame(3, 12, 5, body)
    cut = whole[:-3]
    cid, answer = parse_response(3, 12, _answer(router, cut))
    assert cid == 5 and answer.brokers == () and answer.topics == ()
    from kio.schema.create_topics.v7.request import CreateTopicsRequest

    create = make(CreateTopicsRequest, {"topics": [], "timeout": 1000, "validate_only": False})
    cid, answer = parse_response(19, 7, _answer(router, request_frame(19, 7, 6, create)))
    assert cid == 6 and answer.topics == ()


def test_make_fills_every_version_from_the_same_values():
    """Goal: one dict of plain values builds Metadata responses v0 to v12 (fields a version lacks are dropped)."""
    values = {"brokers": [{"node_id": 1, "host": "h", "port": 9}], "controller_id": 1, "cluster_id": "c",
              "topics": [{"name": "t", "error_code": 0, "partitions": [
                  {"partition_index": 0, "leader_id": 1, "error_code": 6, "replica_nodes": [1], "isr_nodes": [1]}]}]}
    for version in range(0, 13):
        entity = make(response_schema(3, version), values)
        assert entity.topics[0].partitions[0].error_code == 6
        assert entity.brokers[0].port == 9
