"""Leases over HTTP: the `lease` token of a leased message, and leasing from a whole queue topic.

A token `P-ID-N` names one lease: partition P, message id ID, delivery N (an ack of an older delivery fails with
LEASE_LOST). It is all the brokers need to settle the lease, so any gateway process can ack it.
"""
from __future__ import annotations

import itertools
import time
from dataclasses import dataclass

from raftbus.client import Message, Queues
from raftbus.client.errors import InvalidArgument, RaftbusError

from raftbus.gateway import settings


@dataclass(slots=True)
class LeaseRef:
    """What Queues needs to settle one lease (the fields of a leased Message it reads)."""

    topic: str
    partition: int
    message_id: int
    delivery_count: int
    lease_deadline_ms: int = 0


def lease_token(message: Message) -> str:
    return f"{message.partition}-{message.message_id}-{message.delivery_count}"


def parse_token(topic: str, token: str) -> LeaseRef:
    parts = token.split("-")
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        raise InvalidArgument(f"{token!r} is not a lease (partition-id-delivery, as a lease answer gives it)")
    partition, message_id, delivery_count = (int(p) for p in parts)
    return LeaseRef(topic, partition, message_id, delivery_count)


class TopicLeaser:
    """Leases up to `max` messages of a queue topic: one pass over its partitions without waiting (starting at a
    rotating partition, so none is always last), then, while nothing came and `wait_ms` lasts, a long poll on
    each partition in turn for at most LEASE_WAIT_SLICE_MS."""

    def __init__(self, queues: Queues):
        self.queues = queues
        self._turns = itertools.count()

    def lease(self, topic: str, partitions: list[int], max_messages: int, visibility_ms: int,
              wait_ms: int) -> list[Message]:
        start = next(self._turns) % len(partitions)
        order = partitions[start:] + partitions[:start]
        found = self._pass(topic, order, max_messages, visibility_ms, lambda: 0)
        deadline_s = time.monotonic() + wait_ms / 1000

        def slice_ms():
            return max(0, min(settings.LEASE_WAIT_SLICE_MS, int((deadline_s - time.monotonic()) * 1000)))

        while not found and slice_ms() > 0:
            found = self._pass(topic, order, max_messages, visibility_ms, slice_ms)
        return found

    def _pass(self, topic, order, max_messages, visibility_ms, wait_ms) -> list[Message]:
        found: list[Message] = []
        for partition in order:
            if len(found) >= max_messages:
                break
            waited = wait_ms()
            try:
                found += self.queues.lease(topic, partition, max_messages - len(found), visibility_ms, waited)
            except RaftbusError:
                if not found:
                    raise
                break  # hand out what is leased already rather than strand those leases until they expire
            if found and waited:
                break  # a long poll answered: hand these out now
        return found
