"""A queue message's history (origin_id, delivery_count, enqueued_ms, last_error) is the brokers' to write.

Brokers set it when they move a message to its dead-letter topic or redrive it back, and such a move may travel
over gRPC to the leader of the target partition. A client must not: a forged `origin_id` makes a real
dead-letter move look like a duplicate, and a huge `delivery_count` blocks every lease of the partition. So an
Enqueue carrying any history field must carry `history_mac`, a keyed BLAKE2b over the target and every
message's history and record under the cluster's queue-history key (`ClusterKeys.queue_history`, derived from
`cluster_secret` under a label of its own), which only brokers hold. While a secret rotates, a MAC under the key of
`cluster_secret_accepted` is accepted too (a broker still on the other secret moved the message).
"""
from __future__ import annotations

import hashlib
import hmac
import struct

from raftbus.client import errors

MAC_BYTES = 32
_ENTRY = struct.Struct(">QIqI")


def has_history(message) -> bool:
    return bool(message.origin_id or message.delivery_count or message.enqueued_ms or message.last_error)


class HistorySigner:
    def __init__(self, key: bytes, *accepted: bytes):
        if len(key) < 32 or any(len(k) < 32 for k in accepted):
            raise ValueError("queue-history keys are 32 bytes")
        self._key = bytes(key)
        self._keys = (self._key, *(bytes(k) for k in accepted))

    def sign(self, topic: str, partition: int, messages, key: bytes | None = None) -> bytes:
        mac = hashlib.blake2b(key=key or self._key, digest_size=MAC_BYTES)
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
        presented = bytes(history_mac)
        if not any(hmac.compare_digest(self.sign(topic, partition, messages, key), presented) for key in self._keys):
            raise errors.InvalidArgument("origin_id, delivery_count, enqueued_ms and last_error are set by brokers "
                                         "only (dead-letter moves and redrives); send messages without them")
