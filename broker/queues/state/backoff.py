"""Retry delays of queue messages: exponential backoff with jitter that every replica computes alike.

The jitter comes from a hash of (seq, delivery_count), never from a random generator, so a nack or an expired
lease puts the message back at the same time on every replica. "Equal jitter": half the exponential delay is
kept, the other half is spread, so retries of many messages failing together do not arrive together.
"""
from __future__ import annotations

_MASK = 2**64 - 1


def mix64(value: int) -> int:
    """splitmix64's finalizer: a well-spread 64-bit hash of a 64-bit integer."""
    value = (value + 0x9E3779B97F4A7C15) & _MASK
    value = ((value ^ (value >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    value = ((value ^ (value >> 27)) * 0x94D049BB133111EB) & _MASK
    return value ^ (value >> 31)


def retry_delay_ms(seq: int, delivery_count: int, base_ms: int, max_ms: int) -> int:
    """Delay before delivery number delivery_count + 1: in [ceiling/2, ceiling], ceiling = min(max, base·2^(n-1))."""
    if base_ms <= 0 or delivery_count < 1:
        return 0
    ceiling = min(max_ms, base_ms << min(delivery_count - 1, 62))
    half = ceiling // 2
    return half + mix64((seq << 16) ^ delivery_count) % (ceiling - half + 1)
