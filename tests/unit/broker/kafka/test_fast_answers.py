"""Goal: the struct-written Produce and Fetch answers are byte for byte what kio writes, at every served version,
and step aside (None) for answers that need tagged fields."""
import pytest

from raftbus.broker.kafka.fast_answers import encode_fetch, encode_produce
from raftbus.broker.kafka.schema import encode_response, make, response_schema

PRODUCE = {"responses": [
    {"name": "orders", "partition_responses": [
        {"index": 0, "error_code": 0, "base_offset": 42, "log_append_time": -1, "log_start_offset": 3},
        {"index": 2, "error_code": 45, "base_offset": -1, "log_append_time": 1_700_000_000_000,
         "log_start_offset": -1, "error_message": "out of order"}]},
    {"name": "é-topic", "partition_responses": [{"index": 1, "error_code": 0, "base_offset": 7}]}],
    "node_endpoints": []}
FETCH = {"error_code": 0, "session_id": 9, "node_endpoints": [], "responses": [
    {"topic": "orders", "partitions": [
        {"partition_index": 0, "error_code": 0, "high_watermark": 100, "last_stable_offset": 100,
         "log_start_offset": 0, "aborted_transactions": [], "preferred_read_replica": -1, "records": b"x" * 300},
        {"partition_index": 1, "error_code": 1, "high_watermark": 5, "records": b""},
        {"partition_index": 2, "error_code": 6, "high_watermark": -1}]}]}


@pytest.mark.parametrize("version", range(3, 12))
def test_produce_answers_match_kio(version):
    """Goal: every Produce version the port serves is written exactly as kio writes it."""
    schema = response_schema(0, version)
    assert encode_produce(version, 77, PRODUCE) == encode_response(schema, 77, make(schema, PRODUCE))


@pytest.mark.parametrize("version", range(4, 13))
def test_fetch_answers_match_kio(version):
    """Goal: every Fetch version the port serves is written exactly as kio writes it."""
    schema = response_schema(1, version)
    assert encode_fetch(version, 78, FETCH) == encode_response(schema, 78, make(schema, FETCH))


def test_answers_with_a_leader_hint_fall_back_to_kio():
    """Goal: a NOT_LEADER answer carrying current_leader (tagged fields) is left to kio."""
    hinted = {"responses": [{"name": "t", "partition_responses": [
        {"index": 0, "error_code": 6, "current_leader": {"leader_id": 2, "leader_epoch": -1}}]}],
        "node_endpoints": [{"node_id": 2, "host": "h", "port": 1}]}
    assert encode_produce(10, 1, hinted) is None
    fetch = {"responses": [{"topic": "t", "partitions": [{"partition_index": 0, "error_code": 6,
                                                          "current_leader": {"leader_id": 2}}]}]}
    assert encode_fetch(12, 1, fetch) is None
