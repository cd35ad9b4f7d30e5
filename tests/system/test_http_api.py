"""System tests of the HTTP gateway: a real `raftbus http` process in front of three real brokers, driven over
HTTP like any client would (records, consumer instances, queue topics, admin, errors, OpenAPI)."""
from __future__ import annotations

import base64
import contextlib
import select
import socket
from types import SimpleNamespace

import pytest

from raftbus.bench.http import bench_http
from raftbus.gateway.settings import REQUEST_BODY_BYTES_MAX

from tests.helpers import wait_until
from tests.system.conftest import running_cluster
from tests.system.http_gateway import Api, running_gateway

pytestmark = pytest.mark.system


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    root = tmp_path_factory.mktemp("http")
    with running_cluster(root) as cluster, \
            running_gateway(cluster.bootstrap, root / "gateway.log", "--anonymous", "http-tests") as gateway:
        api = Api(gateway.url)
        api.bootstrap = cluster.bootstrap
        api.log_path = root / "gateway.log"
        api.gateway_pid = gateway.proc.pid
        yield api


def create_topic(api: Api, name: str, **fields) -> dict:
    return api.ok("POST", "/v1/topics", {"name": name, "replication_factor": 3, **fields}, status=201)


def test_openapi_document_and_docs_describe_every_endpoint(api):
    """Goal: /openapi.json is an OpenAPI 3 document naming the endpoints, and /docs serves the interactive docs."""
    document = api.ok("GET", "/openapi.json")
    assert document["openapi"].startswith("3.")
    paths = document["paths"]
    for path, method in [("/v1/topics/{topic}/records", "post"),
                         ("/v1/topics/{topic}/partitions/{partition}/records", "get"),
                         ("/v1/consumers/{group}/instances", "post"),
                         ("/v1/consumers/{group}/instances/{instance_id}/subscription", "post"),
                         ("/v1/consumers/{group}/instances/{instance_id}/records", "get"),
                         ("/v1/consumers/{group}/instances/{instance_id}/offsets", "post"),
                         ("/v1/consumers/{group}/instances/{instance_id}", "delete"),
                         ("/v1/consumers/{group}/instances/{instance_id}/positions", "post"),
                         ("/v1/queues/{topic}/messages", "post"), ("/v1/queues/{topic}/leases", "post"),
                         ("/v1/queues/{topic}/acks", "post"), ("/v1/queues/{topic}/nacks", "post"),
                         ("/v1/queues/{topic}/extend", "post"), ("/v1/queues/{topic}/messages/{message_id}", "get"),
                         ("/v1/queues/{topic}/messages/{message_id}", "patch"),
                         ("/v1/queues/{topic}/messages/{message_id}", "delete"), ("/v1/queues/{topic}/messages", "get"),
                         ("/v1/queues/{topic}/stats", "get"), ("/v1/queues/{topic}/redrive", "post"),
                         ("/v1/topics", "get"), ("/v1/topics", "post"), ("/v1/topics/{topic}", "get"),
                         ("/v1/topics/{topic}", "patch"), ("/v1/topics/{topic}", "delete"), ("/v1/groups", "get"),
                         ("/v1/groups/{group}", "get"), ("/v1/cluster", "get")]:
        assert method in paths.get(path, {}), (path, method)
    assert "bearer" in str(document["components"]["securitySchemes"]).lower()
    assert "swagger-ui" in api.ok("GET", "/docs")


def test_topic_lifecycle_and_cluster_status(api):
    """Goal: topics are created, listed, described, grown and deleted over HTTP; the cluster shows 3 brokers."""
    created = create_topic(api, "http-admin", partitions=2)
    assert [p["partition"] for p in created["partitions"]] == [0, 1]
    assert "http-admin" in [t["name"] for t in api.ok("GET", "/v1/topics")["topics"]]
    api.error("POST", "/v1/topics", {"name": "http-admin"}, status=409, code="TOPIC_EXISTS")
    grown = api.ok("PATCH", "/v1/topics/http-admin", {"partitions": 4})
    assert len(grown["partitions"]) == 4
    api.error("PATCH", "/v1/topics/http-admin", {"partitions": 1}, status=400, code="INVALID_PARTITIONS")
    api.error("PATCH", "/v1/topics/http-admin", {}, status=400, code="INVALID_ARGUMENT")
    altered = api.ok("PATCH", "/v1/topics/http-admin", {"retention_ms": 60_000})
    assert (altered["retention_ms"], len(altered["partitions"])) == (60_000, 4)
    api.error("PATCH", "/v1/topics/http-admin", {"max_deliveries": 3}, status=400, code="WRONG_TOPIC_KIND")
    assert len(api.ok("GET", "/v1/topics/http-admin")["partitions"]) == 4
    assert api.ok("DELETE", "/v1/topics/http-admin") == {"deleted": "http-admin"}
    api.error("GET", "/v1/topics/http-admin", status=404, code="UNKNOWN_TOPIC")
    status = api.ok("GET", "/v1/cluster")
    assert len([b for b in status["brokers"] if b["alive"]]) == 3
    assert {b["state"] for b in status["brokers"]} == {"active"}
    assert status["controller_id"] in {b["broker_id"] for b in status["brokers"]}


def test_produce_answers_offsets_in_request_order_and_fetch_returns_the_records(api):
    """Goal: produced records (text, binary, keys, headers) come back from a fetch byte for byte, in order."""
    create_topic(api, "http-records", partitions=2)
    binary = bytes(range(256))
    records = [{"value": "first", "key": "k1", "headers": {"trace": "t-1"}, "partition": 1},
               {"value_b64": base64.b64encode(binary).decode(), "partition": 1},
               {"value": "third", "key_b64": base64.b64encode(b"\xff\x00").decode(), "partition": 1},
               {"value": "elsewhere", "partition": 0}]
    offsets = api.ok("POST", "/v1/topics/http-records/records", {"records": records})["offsets"]
    assert offsets == [{"partition": 1, "offset": 0}, {"partition": 1, "offset": 1}, {"partition": 1, "offset": 2},
                       {"partition": 0, "offset": 0}]
    fetched = api.ok("GET", "/v1/topics/http-records/partitions/1/records?offset=0&max=10")
    assert [r["offset"] for r in fetched["records"]] == [0, 1, 2]
    first, second, third = fetched["records"]
    assert (first["value"], first["key"], first["headers"]) == ("first", "k1", {"trace": "t-1"})
    assert base64.b64decode(second["value_b64"]) == binary and "value" not in second
    assert base64.b64decode(third["key_b64"]) == b"\xff\x00"
    assert (fetched["next_offset"], fetched["high_watermark"]) == (3, 3)
    page = api.ok("GET", "/v1/topics/http-records/partitions/1/records?offset=1&max=1")
    assert ([r["offset"] for r in page["records"]], page["next_offset"]) == ([1], 2)
    tail = api.ok("GET", "/v1/topics/http-records/partitions/1/records?offset=latest&wait_ms=200")
    assert (tail["records"], tail["next_offset"]) == ([], 3)


def test_bad_requests_get_the_error_tables_code_and_status(api):
    """Goal: every refusal is {"error": {code, message, retriable}} with the HTTP status of the error's gRPC status."""
    create_topic(api, "http-errors", partitions=1)
    api.error("POST", "/v1/topics/http-missing/records", {"records": [{"value": "x"}]},
              status=404, code="UNKNOWN_TOPIC")
    api.error("POST", "/v1/topics/http-errors/records", {"records": []}, status=400, code="EMPTY_BATCH")
    api.error("POST", "/v1/topics/http-errors/records", {"records": [{"value": "x", "value_b64": "eA=="}]},
              status=400, code="INVALID_ARGUMENT")
    api.error("POST", "/v1/topics/http-errors/records", {"records": [{"value_b64": "not base64!"}]},
              status=400, code="INVALID_ARGUMENT")
    api.error("POST", "/v1/topics/http-errors/records", raw=b"{not json", status=400, code="INVALID_ARGUMENT")
    api.error("POST", "/v1/topics/http-errors/records", {"records": [{"value": "x", "partition": 9}]},
              status=404, code="UNKNOWN_PARTITION")
    api.error("GET", "/v1/topics/http-errors/partitions/0/records?offset=abc", status=400, code="INVALID_ARGUMENT")
    api.error("GET", "/v1/topics/http-errors/partitions/0/records?offset=99", status=400, code="OFFSET_OUT_OF_RANGE")
    api.error("POST", "/v1/queues/http-errors/leases", {"max": 1}, status=400, code="WRONG_TOPIC_KIND")
    api.error("POST", "/v1/queues/http-errors/messages", {"messages": [{"value": "x"}]}, status=400,
              code="WRONG_TOPIC_KIND")
    create_topic(api, "http-errors-queue", partitions=1, kind="queue")
    api.error("POST", "/v1/topics/http-errors-queue/records", {"records": [{"value": "x"}]}, status=400,
              code="WRONG_TOPIC_KIND")
    api.error("POST", "/v1/queues/http-errors-queue/messages",
              {"messages": [{"value": "x", "delay_ms": 5, "deliver_at_ms": 5}]}, status=400, code="INVALID_ARGUMENT")
    api.error("POST", "/v1/queues/http-errors-queue/leases", {"max": 0}, status=400, code="INVALID_ARGUMENT")
    api.error("POST", "/v1/topics", {"name": "bad name!"}, status=400, code="INVALID_NAME")
    api.error("GET", "/v1/groups/http-no-such-group", status=404, code="UNKNOWN_GROUP")
    missing = api.error("GET", "/v1/no-such-path", status=404, code="UNKNOWN_ROUTE")
    assert "/v1/no-such-path" in missing["message"]
    api.error("DELETE", "/v1/topics/http-errors/records", status=405, code="UNKNOWN_ROUTE")


def test_a_wrong_bearer_token_on_a_cluster_without_auth_is_served_marked_and_warned_about_once(api):
    """Goal: on a cluster that checks no tokens, a token is forwarded and served, every such answer says it was not
    checked, and the gateway's log warns once, however many tokens come."""
    for i in range(3):
        status, body, headers = Api(api.base_url, {"Authorization": f"Bearer wrong-{i}"}).exchange("GET", "/v1/topics")
        assert status == 200 and "topics" in body and headers["X-Raftbus-Token-Checked"] == "false"
    status, _, headers = api.exchange("GET", "/v1/topics")  # an anonymous caller sent no token to mark
    assert status == 200 and headers.get("X-Raftbus-Token-Checked") is None
    warning = "does not check bearer tokens"
    wait_until(lambda: warning in api.log_path.read_text(), 10, what="the gateway's warning in its log")
    assert api.log_path.read_text().count(warning) == 1


def test_hosts_origins_and_cross_site_forms_are_refused(api):
    """Goal: a rebound DNS name (Host), another site's page (Origin) and what a cross-site form can send change
    nothing; JSON or the X-Raftbus-Request header get through."""
    api.error("GET", "/v1/topics", status=400, code="HOST_NOT_ALLOWED", headers={"Host": "attacker.example:8080"})
    api.error("GET", "/", status=400, code="HOST_NOT_ALLOWED", headers={"Host": "attacker.example"})
    api.error("POST", "/v1/topics", {"name": "http-csrf-origin"}, status=403, code="ORIGIN_NOT_ALLOWED",
              headers={"Origin": "http://attacker.example"})
    api.error("POST", "/v1/topics", raw=b"name=http-csrf-form", status=415, code="JSON_REQUIRED",
              headers={"Content-Type": "application/x-www-form-urlencoded"})
    api.error("POST", "/v1/topics", raw=b'{"name": "http-csrf-plain"}', status=415, code="JSON_REQUIRED",
              headers={"Content-Type": "text/plain"})
    api.error("DELETE", "/v1/topics/http-csrf-any", status=415, code="JSON_REQUIRED", headers={"Content-Type": None})
    names = [t["name"] for t in api.ok("GET", "/v1/topics")["topics"]]
    assert not [n for n in names if n.startswith("http-csrf")]
    create_topic(api, "http-csrf-json", partitions=1)
    status, _ = api.call("DELETE", "/v1/topics/http-csrf-json",
                         headers={"Content-Type": None, "X-Raftbus-Request": "1"})
    assert status == 200
    assert api.call("GET", "/v1/topics", headers={"Origin": api.base_url})[0] == 200  # the gateway's own pages


def gateway_peak_rss_bytes(pid: int) -> int:
    status = dict(line.split(":", 1) for line in open(f"/proc/{pid}/status").read().splitlines() if ":" in line)
    return int(status["VmHWM"].split()[0]) * 1024


def stream_body(address: str, head: bytes, chunk: bytes, chunks_max: int) -> tuple[bytes, int, bool]:
    """Send `head`, then `chunk` up to chunks_max times until the gateway answers; (its answer, bytes sent, whether
    the gateway then closed the connection within 10 s rather than read on)."""
    host, _, port = address.rpartition(":")
    sent = 0
    with socket.create_connection((host, int(port)), timeout=60) as conn:
        conn.sendall(head)
        for _ in range(chunks_max):
            if select.select([conn], [], [], 0)[0]:
                break
            try:
                conn.sendall(chunk)
            except OSError:  # the gateway answered and closed
                break
            sent += len(chunk)
        conn.settimeout(10)
        answer = b""
        try:
            while data := conn.recv(65536):
                answer += data
        except ConnectionResetError:
            pass
        except TimeoutError:
            return answer, sent, False
    return answer, sent, True


def test_a_200_mb_body_is_refused_without_being_read_into_memory(api):
    """Goal: a 200 MiB body is 413 REQUEST_TOO_LARGE, from its Content-Length before any of it is read, and when
    streamed without one as soon as it passes request_body_bytes_max; the gateway's peak memory barely moves."""
    create_topic(api, "http-big", partitions=1)
    before = gateway_peak_rss_bytes(api.gateway_pid)
    address = api.base_url.removeprefix("http://")
    size = 200 << 20
    request_line = f"POST /v1/topics/http-big/records HTTP/1.1\r\nHost: {address}\r\n" \
                   "Content-Type: application/json\r\n"
    declared, sent, closed = stream_body(address, f"{request_line}Content-Length: {size}\r\n\r\n".encode(),
                                         b" " * (1 << 20), 200)
    assert declared.startswith(b"HTTP/1.1 413") and b'"REQUEST_TOO_LARGE"' in declared, declared[:300]
    assert closed  # the gateway does not go on reading (and discarding) the 200 MiB
    chunk = b"100000\r\n" + b" " * (1 << 20) + b"\r\n"  # chunked encoding: 1 MiB per chunk, no Content-Length
    streamed, sent, closed = stream_body(address, f"{request_line}Transfer-Encoding: chunked\r\n\r\n".encode(),
                                         chunk, 200)
    assert streamed.startswith(b"HTTP/1.1 413") and b'"REQUEST_TOO_LARGE"' in streamed, streamed[:300]
    assert closed and sent < size
    grown = gateway_peak_rss_bytes(api.gateway_pid) - before
    assert grown < REQUEST_BODY_BYTES_MAX * 3, grown
    high_watermark = api.ok("GET", "/v1/topics/http-big")["partitions"][0]["high_watermark"]
    assert high_watermark == 0


def test_consumer_instance_joins_polls_commits_and_leaves(api):
    """Goal: a consumer instance reads every record once, its commit shows as zero lag, and deleting it leaves."""
    create_topic(api, "http-group-topic", partitions=2)
    values = [f"r{i}" for i in range(20)]
    api.ok("POST", "/v1/topics/http-group-topic/records", {"records": [{"value": v} for v in values]})
    base = api.ok("POST", "/v1/consumers/http-billing/instances",
                  {"name": "worker-1", "auto_offset_reset": "earliest"})["base_uri"]
    assert base == "/v1/consumers/http-billing/instances/worker-1"
    api.error("POST", "/v1/consumers/http-billing/instances", {"name": "worker-1"}, status=400,
              code="INVALID_ARGUMENT")
    api.ok("POST", f"{base}/subscription", {"topics": ["http-group-topic"]})
    seen = []

    def read_all():
        seen.extend(r["value"] for r in api.ok("GET", f"{base}/records?timeout_ms=500")["records"])
        return len(seen) >= len(values)

    wait_until(read_all, 60, 0, what="all records through the consumer instance")
    assert sorted(seen) == sorted(values)
    owned = api.ok("GET", f"{base}/assignments")["partitions"]
    assert {(p["topic"], p["partition"]) for p in owned} == {("http-group-topic", 0), ("http-group-topic", 1)}
    committed = api.ok("POST", f"{base}/offsets")["offsets"]
    assert sum(o["offset"] for o in committed) == len(values)
    api.ok("POST", f"{base}/positions/beginning", status=204)
    again = []
    wait_until(lambda: again.extend(r["value"] for r in api.ok("GET", f"{base}/records?timeout_ms=500")["records"])
               or len(again) >= len(values), 60, 0, what="every record again after seeking to the beginning")
    assert sorted(again) == sorted(values)
    api.ok("POST", f"{base}/positions", {"offsets": [{"topic": "http-group-topic", "partition": 0, "offset": 0}]},
           status=204)
    replayed = api.ok("GET", f"{base}/records?timeout_ms=5000")["records"]
    assert replayed and {r["partition"] for r in replayed} == {0} and replayed[0]["offset"] == 0
    api.error("POST", f"{base}/positions", {"offsets": [{"topic": "http-group-topic", "partition": 7, "offset": 0}]},
              status=400, code="PARTITION_NOT_ASSIGNED")
    api.ok("POST", f"{base}/positions/end", status=204)
    assert api.ok("GET", f"{base}/records?timeout_ms=300")["records"] == []
    api.ok("POST", f"{base}/offsets")
    group = api.ok("GET", "/v1/groups/http-billing")
    assert group["lag_records"] == 0 and len(group["members"]) == 1
    assert "http-billing" in [g["name"] for g in api.ok("GET", "/v1/groups")["groups"]]
    api.ok("DELETE", base)
    api.error("GET", f"{base}/records", status=404, code="UNKNOWN_MEMBER")
    wait_until(lambda: api.ok("GET", "/v1/groups/http-billing")["members"] == [], 30, 0.2, what="member gone")


def enqueue(api: Api, topic: str, messages: list[dict]) -> list[dict]:
    answers = api.ok("POST", f"/v1/queues/{topic}/messages", {"messages": messages})["messages"]
    assert all("error" not in a for a in answers), answers
    return answers


def test_queue_messages_are_leased_in_priority_order_and_settled(api):
    """Goal: lease hands out messages in delivery order; ack removes, nack returns, extend moves the deadline."""
    create_topic(api, "http-jobs", partitions=1, kind="queue", ordering="priority")
    ids = [a["id"] for a in enqueue(api, "http-jobs", [{"value": f"p{p}", "priority": p} for p in (5, 1, 3, 2, 4)])]
    leased = api.ok("POST", "/v1/queues/http-jobs/leases", {"max": 5, "visibility_ms": 60_000})["messages"]
    assert [m["value"] for m in leased] == ["p1", "p2", "p3", "p4", "p5"]
    assert {m["id"] for m in leased} == set(ids) and all(m["delivery_count"] == 1 for m in leased)
    by_value = {m["value"]: m for m in leased}
    acks = api.ok("POST", "/v1/queues/http-jobs/acks", {"leases": [by_value["p1"]["lease"], by_value["p2"]["lease"]]})
    assert acks == {"results": [{}, {}]}
    again = api.ok("POST", "/v1/queues/http-jobs/acks", {"leases": [by_value["p1"]["lease"]]})["results"]
    assert again[0]["error"]["code"] in ("LEASE_LOST", "UNKNOWN_MESSAGE")
    extended = api.ok("POST", "/v1/queues/http-jobs/extend",
                      {"leases": [by_value["p3"]["lease"]], "visibility_ms": 120_000})["results"][0]
    assert extended["lease_deadline_ms"] > by_value["p3"]["lease_deadline_ms"]
    assert api.ok("POST", "/v1/queues/http-jobs/nacks", {"leases": [by_value["p4"]["lease"]], "delay_ms": 0}) == \
        {"results": [{}]}
    stats = api.ok("GET", "/v1/queues/http-jobs/stats")
    assert (stats["ready"], stats["in_flight"]) == (1, 2)
    redelivered = api.ok("POST", "/v1/queues/http-jobs/leases", {"max": 5, "wait_ms": 2_000})["messages"]
    assert [(m["value"], m["delivery_count"]) for m in redelivered] == [("p4", 2)]
    api.error("POST", "/v1/queues/http-jobs/acks", {"leases": ["nonsense"]}, status=400, code="INVALID_ARGUMENT")


def test_queue_message_inspection_priority_change_delete_and_redrive(api):
    """Goal: get, peek, change priority and delete work by message id; a dead-lettered message is redriven."""
    create_topic(api, "http-tasks", partitions=1, kind="queue", ordering="priority", max_deliveries=1)
    first, second, later = enqueue(api, "http-tasks", [{"value": "a", "priority": 5}, {"value": "b", "priority": 6},
                                                       {"value": "c", "delay_ms": 600_000}])
    assert api.ok("GET", f"/v1/queues/http-tasks/messages/{first['id']}")["state"] == "ready"
    assert [m["value"] for m in api.ok("GET", "/v1/queues/http-tasks/messages?state=delayed")["messages"]] == ["c"]
    changed = api.ok("PATCH", f"/v1/queues/http-tasks/messages/{second['id']}", {"priority": 0})
    assert changed["priority"] == 0
    assert [m["value"] for m in api.ok("GET", "/v1/queues/http-tasks/messages?state=ready")["messages"]] == ["b", "a"]
    api.ok("DELETE", f"/v1/queues/http-tasks/messages/{later['id']}")
    api.error("GET", f"/v1/queues/http-tasks/messages/{later['id']}", status=404, code="UNKNOWN_MESSAGE")
    leased = api.ok("POST", "/v1/queues/http-tasks/leases", {"max": 1})["messages"]
    assert [m["value"] for m in leased] == ["b"]
    api.ok("POST", "/v1/queues/http-tasks/nacks", {"leases": [leased[0]["lease"]], "reason": "broken"})
    wait_until(lambda: api.ok("GET", "/v1/queues/http-tasks/stats")["dead_lettered"] == 1, 30, 0.2,
               what="message dead-lettered after max_deliveries=1")
    assert api.ok("POST", "/v1/queues/http-tasks/redrive", {}) == {"moved": 1}
    values = [m["value"] for m in api.ok("GET", "/v1/queues/http-tasks/messages?state=ready")["messages"]]
    assert sorted(values) == ["a", "b"]


def test_bench_http_produces_and_acks_everything_through_its_own_gateway(api):
    """Goal: `raftbus bench http` sends every record and acks every message through a gateway process it starts."""
    args = SimpleNamespace(records=250, messages=150, record_bytes=20, partitions=2, replication_factor=3,
                           http_light_requests=40)
    result = bench_http(api.bootstrap, args, lambda message: None)
    assert (result["records"], result["requests"], result["queue_messages"]) == (250, 3, 150)
    high_watermarks = [p["high_watermark"] for p in api.ok("GET", f"/v1/topics/{result['topic']}")["partitions"]]
    assert sum(high_watermarks) == 250 + 40  # plus the single-record requests timed first
    stats = api.ok("GET", f"/v1/queues/{result['queue_topic']}/stats")
    assert (stats["ready"], stats["in_flight"], stats["partitions"][0]["enqueued_total"] +
            stats["partitions"][1]["enqueued_total"]) == (0, 0, 150)


def test_two_instances_of_a_group_share_the_partitions(api):
    """Goal: instances of one group are members like SDK consumers: together they own every partition, once."""
    create_topic(api, "http-shared", partitions=4)
    bases = [api.ok("POST", "/v1/consumers/http-shared-group/instances", {"name": f"w{i}"})["base_uri"]
             for i in range(2)]
    for base in bases:
        api.ok("POST", f"{base}/subscription", {"topics": ["http-shared"]})

    def split_between_both():
        owned = []
        for base in bases:
            api.ok("GET", f"{base}/records?timeout_ms=200")  # polls run the member's rebalances
            owned.append({p["partition"] for p in api.ok("GET", f"{base}/assignments")["partitions"]})
        return all(owned) and not owned[0] & owned[1] and owned[0] | owned[1] == {0, 1, 2, 3} and owned

    wait_until(split_between_both, 60, 0, what="both instances owning a share of the partitions")
    for base in bases:
        api.ok("DELETE", base)


def test_tables_over_http(api):
    """Goal: a table is created, written (plain and compare-and-set), read, listed, deleted from, its history read
    and its watch polled over HTTP; a key without a value is 404 KEY_NOT_FOUND, a stale CAS
    REVISION_MISMATCH, key reads of a plain topic NOT_COMPACTED; the topic shows its cleanup policy."""
    created = api.ok("POST", "/v1/tables", {"name": "prefs", "partitions": 2}, status=201)
    assert created["compaction"]["cleanup_policy"] == "compact"
    assert "prefs" in [t["name"] for t in api.ok("GET", "/v1/tables")["tables"]]
    first = api.ok("PUT", "/v1/tables/prefs/keys/theme", {"value": "dark"})["revision"]
    api.ok("PUT", "/v1/tables/prefs/keys/lang", {"value_b64": base64.b64encode(b"\xffen").decode()})
    entry = api.ok("GET", "/v1/tables/prefs/keys/theme")
    assert (entry["value"], entry["revision"], entry["deleted"]) == ("dark", first, False)
    assert api.ok("GET", "/v1/tables/prefs/keys/lang")["value_b64"] == base64.b64encode(b"\xffen").decode()
    status, answer = api.call("PUT", "/v1/tables/prefs/keys/theme", {"value": "x", "expected_revision": first + 100})
    assert answer["error"]["code"] == "REVISION_MISMATCH" and status >= 400
    second = api.ok("PUT", "/v1/tables/prefs/keys/theme", {"value": "light", "expected_revision": first})["revision"]
    watch = api.ok("GET", "/v1/tables/prefs/watch?prefix=th")
    assert [(e["key"], e["value"]) for e in watch["events"]] == [("theme", "light")]
    assert api.ok("GET", "/v1/tables/prefs/keys")["keys"] == ["lang", "theme"]
    assert [e["value"] for e in api.ok("GET", "/v1/tables/prefs/keys/theme/history")["entries"]] == ["dark", "light"]
    api.ok("DELETE", f"/v1/tables/prefs/keys/theme?expected_revision={second}")
    api.error("GET", "/v1/tables/prefs/keys/theme", status=404, code="KEY_NOT_FOUND")
    changes = api.ok("GET", f"/v1/tables/prefs/watch?prefix=th&after={watch['position']}&wait_ms=5000")
    assert [(e["key"], e["deleted"]) for e in changes["events"]] == [("theme", True)]
    quiet = api.ok("GET", f"/v1/tables/prefs/watch?prefix=th&after={changes['position']}&wait_ms=200")
    assert quiet["events"] == [] and quiet["position"] == changes["position"]
    create_topic(api, "plainlog", partitions=1)
    status, answer = api.call("GET", "/v1/tables/plainlog/keys/a")
    assert answer["error"]["code"] == "NOT_COMPACTED"
    altered = api.ok("PATCH", "/v1/topics/plainlog", {"cleanup_policy": "compact,delete"})
    assert altered["compaction"]["cleanup_policy"] == "compact,delete"


def test_bad_table_requests_get_typed_errors_over_http(api):
    """Goal: a put without a value, a key over compacted_key_bytes_max, a malformed watch position and a bad cleanup
    policy get typed errors with their HTTP status, and write nothing."""
    api.ok("POST", "/v1/tables", {"name": "strict", "partitions": 1}, status=201)
    api.error("PUT", "/v1/tables/strict/keys/k", {}, status=400, code="INVALID_ARGUMENT")
    api.error("PUT", "/v1/tables/strict/keys/" + "k" * 501, {"value": "v"}, status=400, code="KEY_TOO_LARGE")
    api.error("GET", "/v1/tables/strict/watch?after=zero", status=400, code="INVALID_ARGUMENT")
    api.error("GET", "/v1/tables/strict/watch?after=0:1,1:1", status=400, code="INVALID_ARGUMENT")
    api.error("POST", "/v1/topics", {"name": "shredded", "cleanup_policy": "shred"}, status=400,
              code="INVALID_ARGUMENT")
    assert api.ok("GET", "/v1/tables/strict/keys")["keys"] == []
    assert api.ok("GET", "/v1/topics/strict")["partitions"][0]["high_watermark"] == 0
