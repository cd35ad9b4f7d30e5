"""Shared pieces of the property-based fuzz tests (Hypothesis) of the decoders that read bytes from the network or
from disk: the settings every fuzz test runs with, a strategy that mutates a valid input, and a check that one
decode stays within a memory bound proportional to its input and within a time bound."""
from __future__ import annotations

import time
import tracemalloc

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

FUZZ = settings(max_examples=200, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
PEAK_BYTES_BASE = 2 << 20
PEAK_BYTES_PER_INPUT_BYTE = 40
DECODE_SECONDS_MAX = 2.0

# Bytes that mean something to a length-prefixed or marshal decoder: huge and negative counts, container and
# reference type codes, code objects.
INTERESTING = [b"\xff\xff\xff\x7f", b"\xff\xff\xff\xff", b"\x00\x00\x00\x80", b"[", b"(", b"{", b"r\x00\x00\x00\x00",
               b"\xdb", b"c", b"l\xff\xff\xff\x0f", b"\x7f\xff\xff\xff\xff\xff\xff\xff", b"\x00", b"0"]


@st.composite
def mutated(draw, valid: bytes, interesting: list[bytes] = INTERESTING) -> bytes:
    """`valid` with 1 to 4 mutations: a flipped byte, a cut, an inserted or overwriting interesting value (of
    `interesting`: what means something to the decoder under test), a repeated run."""
    data = bytearray(valid)
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "cut", "insert", "repeat", "overwrite"]))
        at = draw(st.integers(0, len(data)))
        if kind == "flip" and at < len(data):
            data[at] ^= draw(st.integers(1, 255))
        elif kind == "cut":
            del data[at:at + draw(st.integers(1, 32))]
        elif kind == "insert":
            data[at:at] = draw(st.sampled_from(interesting))
        elif kind == "overwrite":
            value = draw(st.sampled_from(interesting))
            data[at:at + len(value)] = value
        else:
            data[at:at] = bytes(data[at:at + draw(st.integers(1, 64))]) * draw(st.integers(1, 20))
    return bytes(data)


def bounded(decode, data, refusals: tuple[type[BaseException], ...]):
    """decode(data), or the refusal (one of `refusals`) it raised; any other exception fails the test. The peak of
    what the decode allocated is at most PEAK_BYTES_BASE + PEAK_BYTES_PER_INPUT_BYTE per input byte, and it
    returns within DECODE_SECONDS_MAX."""
    size = len(data)
    tracemalloc.start()
    started = time.monotonic()
    try:
        try:
            result = decode(data)
        except refusals as exc:
            result = exc
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    elapsed = time.monotonic() - started
    assert peak <= PEAK_BYTES_BASE + PEAK_BYTES_PER_INPUT_BYTE * size, (peak, size)
    assert elapsed <= DECODE_SECONDS_MAX, elapsed
    return result
