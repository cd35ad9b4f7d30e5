"""A queue message's history (origin_id, delivery_count, enqueued_ms, last_error) is the brokers' to write.

Brokers set it when they move a message to its dead-letter topic or redrive it back, and such a move may travel
over gRPC to the leader of the target partition. A client must not: a forged `origin_id` makes a real
dead-letter move look like a duplicate, and a huge `delivery_count` blocks every lease of the partition. So an
Enqueue carrying any history field must carry `history_mac`, a keyed BLAKE2b over the target and every
message's history and record under a key derived from `cluster_secret`, which only brokers hold.
"""
from __future__ import annotations

import hashlib
import hmac
import struct

from raftbus.client import errors

MAC_BYTES = 32
_PERSON = b"rb-queue-hist"
_ENTRY = struct.Struct(">QIqI")


def has_history(message) -> bool:
    return bool(message.origin_id or message.delivery_count or message.enqueued_ms or message.last_error)


class HistorySigner:
    def __init__(self, cluster_secret: str):
        self._key = hashlib.blake2b(cluster_secret.encode(), digest_size=32, person=_PERSON).digest()

    def sign(self, topic: str, partition: int, messages) -> bytes:
        mac = hashlib.blake2b(key=self._key, digest_size=MAC_BYTES)
        target = topic.encode()
        mac.update(struct.pack(">Ii", len(target), partition) + target)
        for m in messages:
            error = m.last_error.encode()
            mac.update(_ENTRY.pack(m.origin_id, m.delivery_count, m.enqueued_ms, len(error)) + error)
            mac.update(struct.pack(">I", len(m.record)) + m.record)
        return mac.digest()

    def check(self, topic: str, partition: int, messages, history_mac: bytes) -> None:
        """InvalidArgument unless messages without history come with no MAC needed, or the MAC is a broker's."""
        if not any(has_history(m) for m in messages):
            return
        if not hmac.compare_digest(self.sign(topic, partition, messages), bytes(history_mac)):
            raise errors.InvalidArgument("origin_id, delivery_count, enqueued_ms and last_error are set by brokers "
                                         "only (dead-letter moves and redrives); send messages without them")
