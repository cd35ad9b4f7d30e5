"""Goal: plain_marshal decodes exactly the plain values a Raft record or a snapshot footer holds, and refuses (typed,
before marshal builds anything) every input that would make marshal allocate more than its bytes justify, build a
cycle or a shared container, or build anything but plain data."""
from __future__ import annotations

import marshal
import struct
import tracemalloc

import pytest
from hypothesis import given
from hypothesis import strategies as st

from raftbus.broker.raft import hub, plain_marshal
from raftbus.broker.raft.plain_marshal import PlainDataError
from tests.fuzzing import FUZZ, bounded, mutated

scalars = (st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20)
           | st.binary(max_size=40))
plain = st.recursive(scalars, lambda inner: (st.lists(inner, max_size=5) | st.lists(inner, max_size=5).map(tuple)
                                             | st.dictionaries(st.text(max_size=8) | st.integers(), inner, max_size=4)),
                     max_leaves=30)
RAFT_MESSAGE = {"type": "append_entries", "term": 7, "commit_index": 41,
                "entries": [(b"\x01command bytes", 41, 7), (b"\x01more", 42, 7)], "prev": (40, 7), "lease": 3.5}


def peak_of(call) -> int:
    tracemalloc.start()
    try:
        try:
            call()
        except PlainDataError:
            pass
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@FUZZ
@given(plain)
def test_every_plain_value_round_trips(value):
    """Whatever plain value a broker encodes decodes to the same value, as marshal itself would decode it."""
    data = plain_marshal.dumps(value)
    assert plain_marshal.loads(data) == marshal.loads(data)


def test_a_record_announcing_more_items_than_it_has_bytes_is_refused_before_allocating():
    """A 10-byte record announcing a list of 200 million items (marshal alone allocates 1.6 GB for it) and a long
    integer announcing 2**30 digits are refused, with allocations of a few kilobytes."""
    huge_list = b")\x02z\x01x[" + struct.pack("<i", 200_000_000)
    huge_long = b"l" + struct.pack("<i", 1 << 30) + b"\x01\x00"
    for data in (huge_list, huge_long):
        with pytest.raises(PlainDataError):
            plain_marshal.loads(data)
        assert peak_of(lambda: plain_marshal.loads(data)) < 64 << 10


@pytest.mark.parametrize("data, why", [
    (marshal.dumps(compile("open('/tmp/ran', 'w')", "x", "exec")), "a code object"),
    (marshal.dumps({1, 2}), "a set"),
    (marshal.dumps(frozenset({1})), "a frozenset"),
    (marshal.dumps(1j), "a complex number"),
    (marshal.dumps(...), "Ellipsis"),
    (b"\xdb\x01\x00\x00\x00r\x00\x00\x00\x00", "a list holding itself (a reference to a container)"),
    (b"r\x00\x00\x00\x00", "a reference to nothing"),
    (b"[" + struct.pack("<i", -1), "a negative count"),
    (b"u" + struct.pack("<i", -5), "a negative length"),
    (b"u" + struct.pack("<i", 100) + b"abc", "a string cut short"),
    (plain_marshal.dumps([1]) + b"N", "bytes after the value"),
    (b"{N0", "a dict ended after a key"),
    (b"", "nothing"),
])
def test_non_plain_or_malformed_records_are_refused(data, why):
    """Each of these is refused with PlainDataError, never built."""
    with pytest.raises(PlainDataError):
        plain_marshal.loads(data)


def test_shared_containers_cannot_make_the_decode_exponential():
    """A version-4 value whose lists each hold the previous one twice (a few bytes per level, 2**depth items to
    walk) is refused; references to repeated scalars, which version 4 writes, are accepted."""
    shared: list = []
    for _ in range(40):
        shared = [shared, shared]
    data = marshal.dumps(shared, 4)
    assert len(data) < 1000
    with pytest.raises(PlainDataError):
        plain_marshal.loads(data)
    word = "repeated-" * 3
    footer_v4 = marshal.dumps({"a": [word, word, word], "b": (word,)}, 4)
    assert b"r" in footer_v4
    assert plain_marshal.loads(footer_v4) == {"a": [word] * 3, "b": (word,)}


def test_nesting_beyond_the_depth_bound_is_refused():
    """Containers nested deeper than DEPTH_MAX are refused; exactly DEPTH_MAX decode."""
    def nested(depth):
        value = 0
        for _ in range(depth):
            value = [value]
        return plain_marshal.dumps(value)

    assert plain_marshal.loads(nested(plain_marshal.DEPTH_MAX)) is not None
    with pytest.raises(PlainDataError):
        plain_marshal.loads(nested(plain_marshal.DEPTH_MAX + 1))


@FUZZ
@given(mutated(plain_marshal.dumps(RAFT_MESSAGE)))
def test_mutated_records_decode_correctly_or_are_refused_within_bounds(data):
    """A mutated Raft message decodes to exactly what marshal makes of the same bytes, or is refused, within
    memory proportional to its size and within the time bound."""
    result = bounded(plain_marshal.loads, data, (PlainDataError,))
    if not isinstance(result, PlainDataError):
        assert result == marshal.loads(data)


@FUZZ
@given(st.binary(max_size=200))
def test_random_bytes_decode_correctly_or_are_refused_within_bounds(data):
    """Random bytes decode to what marshal makes of them, or are refused, within the memory and time bounds."""
    result = bounded(plain_marshal.loads, data, (PlainDataError,))
    if not isinstance(result, PlainDataError):
        assert result == marshal.loads(data)


def frame_payload(*records) -> bytes:
    return b"".join(struct.pack(">I", len(r)) + r for r in records)


@FUZZ
@given(mutated(frame_payload(plain_marshal.dumps(("p0.0", RAFT_MESSAGE)), plain_marshal.dumps(("~hub", ("frame-tags",
                                                                                                    "aes-256-gcm"))))))
def test_mutated_frame_payloads_give_records_or_a_protocol_error(payload):
    """A Raft frame payload (length-prefixed records) with mutations gives (channel, message) records or
    ProtocolError, within the memory and time bounds: nothing else escapes the hub's decoder."""
    result = bounded(hub.decode_records, payload, (hub.ProtocolError,))
    if not isinstance(result, hub.ProtocolError):
        assert all(type(channel) is str for channel, _ in result)
