"""What the Kafka handlers use of the broker: the same services as the gRPC servicers, plus the listener's loop."""
from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Callable


@dataclass
class KafkaServices:
    context: object  # BrokerContext: metadata, replicas hosted here, leaders, settings, clock
    log: object  # LogService: produce, fetch, offsets
    admin: object  # AdminService: topics, cluster views
    listener: object  # KafkaListener: run_blocking, call_soon
    waits: "FetchWaits"
    settings: object = None  # broker/kafka/port.py's PortSettings
    # broker id -> "host:port" of its Kafka port, from the broker registry
    kafka_addresses: Callable[[], dict[int, str]] = dict
    cluster_id: str = "raftbus"
    # consumer groups (broker/groups/): the classic protocol's coordinator, the consumer protocol's service, the
    # controller's GroupService (registration, deletion), committed offsets on partition leaders, the settings
    coordinator: object = None
    consumer_groups: object = None
    group_service: object = None
    offsets: object = None  # OffsetForwarder
    group_settings: object = None  # GroupSettings
    offset_executor: object = None  # the threads that carry offset calls to partition leaders
    # () -> AccessPolicy of the applied tokens (SASL checks credentials with it)
    token_policy: Callable = None

    async def offset_call(self, fn, *args):
        """Run a blocking offset call (OffsetForwarder) on the offset threads and await it."""
        return await self.listener.loop.run_in_executor(self.offset_executor, fn, *args)


@dataclass
class FetchWaits:
    """Fetches waiting at the end of partitions' logs (min_bytes not reached), woken when any of their partitions
    applies a batch. The Raft loop calls `appended` after applying; the wake-up runs on the listener's loop."""

    call_soon: Callable = None  # the listener's thread-safe scheduler
    _waiting: dict = field(default_factory=dict)  # group id -> set of asyncio.Event (listener loop only)

    def appended(self, group_id: str) -> None:
        """Raft loop thread: cheap when nothing waits on the group."""
        if group_id in self._waiting:
            self.call_soon(self._wake, group_id)

    def _wake(self, group_id: str) -> None:
        for event in self._waiting.get(group_id, ()):
            event.set()

    async def wait(self, group_ids, timeout_s: float) -> None:
        """Until one of `group_ids` appends or `timeout_s` passes (listener loop)."""
        event = asyncio.Event()
        for group_id in group_ids:
            self._waiting.setdefault(group_id, set()).add(event)
        try:
            await asyncio.wait_for(event.wait(), timeout_s)
        except asyncio.TimeoutError:
            pass
        finally:
            for group_id in group_ids:
                events = self._waiting.get(group_id)
                if events is not None:
                    events.discard(event)
                    if not events:
                        del self._waiting[group_id]
