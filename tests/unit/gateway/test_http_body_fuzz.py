"""Property-based fuzz tests of what the gateway decodes from a request body (Hypothesis): random and mutated
produce bodies through the real app, every request model on any JSON, and base64 fields through the codec give a
correct decode or a typed refusal, within bounded memory and time."""
from __future__ import annotations

import base64
import binascii
import json
import tracemalloc

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from raftbus.client import errors
from raftbus.gateway import codec, models

from tests.unit.gateway.asgi import request
from tests.unit.gateway.fake_cluster import RecordingClients, make_app

FUZZ = settings(max_examples=200, deadline=2_000, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
REFUSAL_CODES = {"INVALID_ARGUMENT", "EMPTY_BATCH", "REQUEST_TOO_LARGE"}
BODY_BYTES_MAX = 64 * 1024
# Peak Python allocations while one request is decoded: a fixed allowance plus a multiple of the body's size.
PEAK_BYTES_BASE = 4 << 20
PEAK_BYTES_PER_BODY_BYTE = 64

texts = st.text(max_size=40)
b64s = st.binary(max_size=40).map(lambda b: base64.b64encode(b).decode())
record = st.fixed_dictionaries({}, optional={
    "value": texts, "value_b64": b64s | texts, "key": texts, "key_b64": b64s | texts,
    "headers": st.dictionaries(texts, texts, max_size=3), "headers_b64": st.dictionaries(texts, b64s, max_size=3),
    "partition": st.integers(-2, 5) | st.none()})
valid_bodies = st.lists(record, min_size=0, max_size=6).map(lambda rs: json.dumps({"records": rs}).encode())


@st.composite
def mutated(draw, bodies=valid_bodies) -> bytes:
    """A valid body with bytes flipped, cut, inserted or repeated."""
    data = bytearray(draw(bodies))
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "cut", "insert", "repeat"]))
        at = draw(st.integers(0, len(data)))
        if kind == "flip" and at < len(data):
            data[at] ^= draw(st.integers(1, 255))
        elif kind == "cut":
            del data[at:at + draw(st.integers(1, 16))]
        elif kind == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif kind == "repeat":
            data[at:at] = bytes(data[at:at + draw(st.integers(1, 64))]) * draw(st.integers(1, 50))
    return bytes(data)


@pytest.fixture(scope="module")
def app():
    made, gateway = make_app(request_body_bytes_max=BODY_BYTES_MAX)
    yield made
    gateway.close()


def expected_bytes(rec: dict, field: str):
    """The bytes the gateway must send for `field` of a record, or InvalidArgument."""
    text, b64 = rec.get(field), rec.get(f"{field}_b64")
    if text is not None and b64 is not None:
        return errors.InvalidArgument("both")
    if b64 is not None:
        try:
            return base64.b64decode(b64, validate=True)
        except (binascii.Error, ValueError):
            return errors.InvalidArgument("base64")
    if text is None:
        return None
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate in a JSON string
        return errors.InvalidArgument("not unicode")


def check_produce(app, body: bytes) -> None:
    RecordingClients.sent_by_all.clear()
    tracemalloc.start()
    try:
        answer = request(app, "POST", "/v1/topics/t/records",
                         headers={"authorization": "Bearer good", "content-type": "application/json"}, body=body)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak <= PEAK_BYTES_BASE + PEAK_BYTES_PER_BODY_BYTE * len(body), peak
    sent = list(RecordingClients.sent_by_all)
    if answer.status != 200:
        assert answer.status in (400, 413) and answer.code in REFUSAL_CODES, (answer.status, answer.body)
        assert sent == []  # refused before anything was sent
        assert set(answer.json()["error"]) == {"code", "message", "retriable"}
        return
    records = json.loads(body)["records"]  # served: the body was a JSON object with records
    offsets = answer.json()["offsets"]
    assert len(offsets) == len(records)
    sent_iter = iter(sent)
    for rec, outcome in zip(records, offsets):
        value, key = expected_bytes(rec, "value"), expected_bytes(rec, "key")
        if "error" in outcome:  # an item refused after an earlier one was sent
            assert outcome["error"]["code"] == "INVALID_ARGUMENT"
            continue
        topic, got_value, got_key, got_headers, partition = next(sent_iter)
        assert (topic, got_value, got_key) == ("t", value, key)
        text_headers = [(n, v.encode()) for n, v in (rec.get("headers") or {}).items()]
        b64_headers = [(n, base64.b64decode(v, validate=True)) for n, v in (rec.get("headers_b64") or {}).items()]
        assert got_headers == text_headers + b64_headers
        assert partition == rec.get("partition") and (partition is None or partition >= 0)
    assert next(sent_iter, None) is None


@FUZZ
@given(body=valid_bodies)
def test_valid_produce_bodies_send_exactly_their_records(app, body):
    """Goal: a valid produce body sends exactly its records (values, keys, headers, partitions) or names each bad
    one."""
    check_produce(app, body)


@FUZZ
@given(body=mutated())
@example(body=b'{"records": [{"value": "\\ud800"}]}')
@example(body=b'{"records": [{"value": "x", "key": "\\udc00"}]}')
@example(body=b'{"records": [{"value": "x", "headers": {"h": "\\ud800"}}]}')
def test_mutated_produce_bodies_are_sent_as_decoded_or_refused(app, body):
    """Goal: a mutated body is refused with a typed 4xx (nothing sent) or sent exactly as it decodes."""
    check_produce(app, body)


@FUZZ
@given(body=st.binary(max_size=512) | st.text(max_size=200).map(str.encode))
def test_random_bytes_are_refused_with_a_typed_error(app, body):
    """Goal: random bytes as a body are a typed 4xx, never a 500."""
    check_produce(app, body)


@settings(FUZZ, max_examples=20)
@given(depth=st.integers(1, 30_000), inside=st.booleans())
def test_deeply_nested_json_is_refused(app, depth, inside):
    """Deep nesting (a recursion bomb for a recursive parser) is a typed refusal, at the top or inside records."""
    nested = b"[" * depth + b"]" * depth
    check_produce(app, b'{"records": [' + nested + b"]}" if inside else nested)


@FUZZ
@given(data=st.binary(max_size=300))
def test_base64_fields_round_trip(data):
    """Goal: any bytes sent as base64 arrive as themselves."""
    assert codec.incoming(None, base64.b64encode(data).decode(), "value") == data


@FUZZ
@given(text=st.text(max_size=300))
def test_any_text_as_base64_decodes_or_is_invalid_argument(text):
    """Goal: any text given as base64 decodes to the bytes it encodes or is INVALID_ARGUMENT."""
    try:
        decoded = codec.incoming(None, text, "value")
    except errors.InvalidArgument:
        return
    assert base64.b64encode(decoded).decode() == text


REQUEST_MODELS = sorted((cls for cls in vars(models).values()
                         if isinstance(cls, type) and issubclass(cls, BaseModel) and cls.__module__ == models.__name__),
                        key=lambda cls: cls.__name__)
json_values = st.recursive(st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=False) |
                           st.text(max_size=20),
                           lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner,
                                                                                        max_size=4),
                           max_leaves=30)


@pytest.mark.parametrize("model", REQUEST_MODELS, ids=lambda cls: cls.__name__)
@settings(FUZZ, max_examples=60)
@given(value=json_values | st.dictionaries(st.sampled_from(["records", "messages", "leases", "max", "name", "topics",
                                                             "offsets", "partitions", "value", "value_b64", "priority",
                                                             "visibility_ms", "wait_ms", "partition", "delay_ms"]),
                                           json_values, max_size=5))
def test_every_request_model_validates_or_refuses_any_json(model, value):
    """Goal: every request body model either refuses a JSON value (INVALID_ARGUMENT at the gateway) or accepts a
    value that survives its own round trip."""
    try:
        parsed = model.model_validate_json(json.dumps(value))
    except ValidationError:
        return
    assert model.model_validate_json(parsed.model_dump_json()) == parsed
