"""Goal: every bad input on the Kafka port gets an error answer or a closed connection, never a crash, a stuck
loop or a stored batch: an oversized frame, a lying length prefix, a truncated request, an unknown API key, a
bad CRC, a batch that does not decompress, a decompression bomb, one connection too many; and a connection's
pipelined requests are answered in order, however many are in flight."""
from __future__ import annotations

import socket
import struct
import time

import pytest
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.metadata.v12.request import MetadataRequest
from kio.schema.produce.v9.request import ProduceRequest

from raftbus.broker.kafka.schema import make
from raftbus.client import kafka_batch as K
from tests.kafka.conftest import create_topic, kafka_cluster
from tests.kafka_wire import parse_response, read_frame, request_frame

pytestmark = pytest.mark.kafka
LIMITS = {"RAFTBUS_KAFKA_REQUEST_BYTES_MAX": "1048576", "RAFTBUS_KAFKA_REQUEST_READ_TIMEOUT_MS": "1000",
          "RAFTBUS_KAFKA_CONNECTIONS_MAX": "6", "RAFTBUS_KAFKA_IN_FLIGHT_PER_CONNECTION_MAX": "4",
          "RAFTBUS_BATCH_DECOMPRESSED_BYTES_MAX": "1048576"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with kafka_cluster(tmp_path_factory.mktemp("kafka-bad"), env=LIMITS) as running:
        create_topic(running, "target", partitions=1)
        yield running


def _leader_socket(cluster) -> socket.socket:
    """A connection to the broker that leads target/0."""
    with _connect(cluster, 1) as sock:
        sock.sendall(request_frame(3, 12, 1, make(MetadataRequest, {"topics": [{"name": "target"}]})))
        _, meta = parse_response(3, 12, read_frame(sock))
    leader = meta.topics[0].partitions[0].leader_id
    return _connect(cluster, leader)


def _connect(cluster, node_id: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", cluster.kafka_ports[node_id - 1]), timeout=10)


def _still_serves(cluster, node_id: int = 1) -> None:
    with _connect(cluster, node_id) as sock:
        sock.sendall(request_frame(18, 3, 77, ApiVersionsRequest(client_software_name="t",
                                                                 client_software_version="1")))
        cid, answer = parse_response(18, 3, read_frame(sock))
    assert cid == 77 and answer.error_code == 0


def _closed(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except ConnectionError:
        return True


def _produce(sock, batch: bytes, correlation_id: int = 5):
    body = make(ProduceRequest, {"acks": -1, "timeout": 5000, "topic_data": [
        {"name": "target", "partition_data": [{"index": 0, "records": batch}]}]})
    sock.sendall(request_frame(0, 9, correlation_id, body))
    cid, answer = parse_response(0, 9, read_frame(sock))
    assert cid == correlation_id
    return answer.responses[0].partition_responses[0]


def _high_watermark(sock) -> int:
    from kio.schema.list_offsets.v6.request import ListOffsetsRequest

    body = make(ListOffsetsRequest, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": "target", "partitions": [{"partition_index": 0, "timestamp": -1}]}]})
    sock.sendall(request_frame(2, 6, 9, body))
    _, answer = parse_response(2, 6, read_frame(sock))
    return answer.topics[0].partitions[0].offset


def test_oversized_and_negative_frames_close_the_connection(cluster):
    """Goal: a size prefix above kafka_request_bytes_max, or negative, closes the connection at once."""
    for size in (2 * 1024 * 1024, -5):
        with _connect(cluster, 1) as sock:
            sock.sendall(struct.pack(">i", size) + b"\x00" * 16)
            assert _closed(sock)
    _still_serves(cluster)


def test_a_lying_length_prefix_is_closed_after_the_read_timeout(cluster):
    """Goal: a frame that announces more bytes than ever arrive is dropped after kafka_request_read_timeout_ms."""
    with _connect(cluster, 1) as sock:
        sock.sendall(struct.pack(">i", 1000) + b"\x00\x12\x00\x03" + b"\x00" * 6)
        started = time.monotonic()
        assert _closed(sock)
        assert time.monotonic() - started < 8
    _still_serves(cluster)


def test_truncated_request_and_unknown_api_key_are_answered(cluster):
    """Goal: a request whose body stops short gets INVALID_REQUEST in its own shape; an unknown API key gets
    ApiVersions' UNSUPPORTED_VERSION; the connection goes on serving."""
    with _connect(cluster, 1) as sock:
        whole = request_frame(3, 12, 11, make(MetadataRequest, {"topics": [{"name": "target"}]}))
        body = whole[4:-6]
        sock.sendall(struct.pack(">i", len(body)) + body)
        cid, answer = parse_response(3, 12, read_frame(sock))
        assert cid == 11 and answer.topics == ()
        unknown = request_frame(18, 0, 12)
        unknown = unknown[:4] + struct.pack(">h", 4242) + unknown[6:]
        sock.sendall(unknown)
        cid, answer = parse_response(18, 0, read_frame(sock))
        assert cid == 12 and answer.error_code == 35 and {k.api_key for k in answer.api_keys} >= {0, 1, 3, 18}
        sock.sendall(request_frame(18, 3, 13, ApiVersionsRequest(client_software_name="t",
                                                                 client_software_version="1")))
        assert parse_response(18, 3, read_frame(sock))[0] == 13
    with _connect(cluster, 1) as sock:  # a frame too short for a header closes the connection
        sock.sendall(struct.pack(">i", 3) + b"\x00\x01\x02")
        assert _closed(sock)


@pytest.mark.parametrize("case", ["bad crc", "does not decompress", "decompression bomb", "count lies",
                                  "not a batch"])
def test_bad_batches_get_corrupt_message_and_are_not_stored(cluster, case):
    """Goal: a batch with a bad CRC, compressed bytes that do not decompress, records inflating past
    batch_decompressed_bytes_max, a record count that lies or bytes that are no batch is answered
    CORRUPT_MESSAGE and nothing is appended."""
    good = K.encode_batch([(1, b"k", b"v", ())])
    batches = {
        "bad crc": good[:-1] + bytes([good[-1] ^ 1]),
        "does not decompress": K.seal(0, K.ZSTD, 1, 1, 1, b"\x28\xb5\x2f\xfd garbage"),
        "decompression bomb": K.seal(0, K.GZIP, 40, 1, 1, K.compress(K.GZIP, b"".join(
            K.encode_record(i, 0, None, b"\x00" * 60_000) for i in range(40)))),
        "count lies": K.seal(0, K.NONE, 3, 1, 1, K.encode_record(0, 0, None, b"v")),
        "not a batch": b"\x00" * 70,
    }
    with _leader_socket(cluster) as sock:
        before = _high_watermark(sock)
        answer = _produce(sock, batches[case])
        assert answer.error_code == 2, answer
        assert _high_watermark(sock) == before
        assert _produce(sock, good, 6).error_code == 0  # the connection goes on
        assert _high_watermark(sock) == before + 1


def test_pipelined_requests_are_answered_in_order_beyond_the_in_flight_bound(cluster):
    """Goal: 40 requests written at once (10 x kafka_in_flight_per_connection_max) are all answered, in order."""
    with _leader_socket(cluster) as sock:
        frames = b"".join(request_frame(3, 12, 1000 + i, make(MetadataRequest, {"topics": [{"name": "target"}]}))
                          if i % 2 else _produce_frame(1000 + i) for i in range(40))
        sock.sendall(frames)
        order = []
        for i in range(40):
            frame = read_frame(sock)
            order.append(struct.unpack_from(">i", frame)[0])
        assert order == [1000 + i for i in range(40)]


def _produce_frame(correlation_id: int) -> bytes:
    body = make(ProduceRequest, {"acks": -1, "timeout": 5000, "topic_data": [{"name": "target", "partition_data": [
        {"index": 0, "records": K.encode_batch([(1, None, b"p%d" % correlation_id, ())])}]}]})
    return request_frame(0, 9, correlation_id, body)


def test_one_connection_beyond_the_bound_is_closed(cluster):
    """Goal: connections beyond kafka_connections_max (6 here) are closed at once while that many are open, and
    once they close a new one is served. (Other clients of this module may still hold a few of the six.)"""
    held, refused = [], False
    try:
        for _ in range(12):
            sock = _connect(cluster, 2)
            try:
                sock.sendall(request_frame(18, 3, 1, ApiVersionsRequest(client_software_name="t",
                                                                        client_software_version="1")))
                read_frame(sock)
                held.append(sock)
            except ConnectionError:
                sock.close()
                refused = True
                break
        assert refused and 1 <= len(held) <= 6, (refused, len(held))
    finally:
        for sock in held:
            sock.close()
    from tests.helpers import wait_until
    wait_until(lambda: _still_serves(cluster, 2) is None, 10, what="a connection served again")


def test_a_fetch_refused_for_a_partition_answers_empty_records_not_null(cluster):
    """Goal: a Fetch (v12, flexible) of a partition this broker cannot serve (one past the topic's count) answers
    its error with an empty record set, as Kafka's brokers do: librdkafka refuses a null one ("invalid
    MessageSetSize -1") and fetches again at once, forever, without handling the error."""
    from kio.schema.fetch.v12.request import FetchRequest

    body = make(FetchRequest, {"replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20,
                               "isolation_level": 0, "session_id": 0, "session_epoch": -1,
                               "topics": [{"topic": "target", "partitions": [
                                   {"partition": 7, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}]})
    with _connect(cluster, 1) as sock:
        sock.sendall(request_frame(1, 12, 5, body))
        _, answer = parse_response(1, 12, read_frame(sock))
    partition = answer.responses[0].partitions[0]
    assert partition.error_code != 0
    assert partition.records == b""
