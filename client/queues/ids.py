"""Queue message ids: unique per topic and stable for a message's life, carrying the partition that holds it.

id = partition << 40 | seq, where seq counts the partition's enqueued messages from 1. So `get`, `ack` and
`delete` by id go straight to the right partition, and ids stay below 2**63 for 8 million partitions.
"""
from __future__ import annotations

from raftbus.client.errors import InvalidArgument

SEQ_BITS = 40
SEQ_MASK = (1 << SEQ_BITS) - 1
PARTITIONS_MAX = 1 << 23


def message_id(partition: int, seq: int) -> int:
    return partition << SEQ_BITS | seq


def split_message_id(mid: int) -> tuple[int, int]:
    """(partition, seq) of a message id; InvalidArgument for a value that cannot be one."""
    if not isinstance(mid, int) or isinstance(mid, bool) or mid <= 0 or mid >> SEQ_BITS >= PARTITIONS_MAX \
            or not mid & SEQ_MASK:
        raise InvalidArgument(f"{mid!r} is not a queue message id")
    return mid >> SEQ_BITS, mid & SEQ_MASK


def partition_of(mid: int) -> int:
    return split_message_id(mid)[0]
