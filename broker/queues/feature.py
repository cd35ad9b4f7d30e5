"""Queue topics as a part of the broker: the Queues service and servicer; partition leaders tick their queues
(expired leases, due delayed messages) and a thread moves dead messages to their dead-letter topics."""
from __future__ import annotations

import logging
import threading

from raftbus.broker.context import BrokerContext
from raftbus.broker.queues.dead_letters import DeadLetters
from raftbus.broker.queues.forwarder import QueueForwarder
from raftbus.broker.queues.service import QueueService
from raftbus.broker.queues.servicer import queue_servicers
from raftbus.broker.queues.settings import QueueSettings

log = logging.getLogger(__name__)


class QueuesFeature:
    def __init__(self, context: BrokerContext, settings: QueueSettings, log_settings, *, history_keys: list[bytes],
                 client_address: str, peer_credentials: dict | None = None):
        self.context = context
        self.settings = settings
        self.service = QueueService(context, settings, log_settings, history_keys)
        self.forwarder = QueueForwarder(context, self.service, timeout_ms=settings.queue_forward_timeout_ms,
                                        client_address=client_address, credentials=peer_credentials)
        self.dead_letters = DeadLetters(context, settings, self.service, self.forwarder)
        self._hosted: tuple | None = None  # (the metadata's topics, the queue replicas hosted here)

    def register(self, registry) -> None:
        registry.serve(queue_servicers(self.service, self.dead_letters))
        registry.every("queue tick", self.settings.queue_tick_interval_ms, self.tick)
        registry.thread("raftbus-dead-letters", self.move_dead_letters)
        registry.on_close(self.forwarder.close)

    # ------------------------------------------------------------------ the queue tick (loop thread)
    def tick(self) -> None:
        """Queue partitions led here with due work (expired leases, due delayed messages) get a tick command."""
        for replica, topic in self.hosted_replicas():
            if replica.group.caught_up_as_leader:  # its clock anchors at the latest time applied (TermClock)
                try:
                    self.service.tick_if_due(replica, topic)
                except Exception:
                    log.exception("queue tick failed", extra={"group": replica.group_id})

    def hosted_replicas(self) -> list:
        """(replica, topic) of every queue partition hosted here, worked out again only when the topics or the
        hosted queue replicas change (stream partitions cost the queue tick nothing)."""
        topics = self.context.metadata_sm.topics()
        if self._hosted is None or self._hosted[0] is not topics:
            by_id = {t.topic_id: t for t in topics.values() if t.kind == "queue"}
            hosted = [(r, by_id[r.topic_id]) for r in self.context.partitions.values() if r.topic_id in by_id]
            self._hosted = (topics, hosted)
        return self._hosted[1]

    def replica_added(self, replica, topic) -> None:
        if topic.kind == "queue":  # a stream replica leaves the queue tick's list as it was
            self._hosted = None

    def replica_dropped(self, replica) -> None:
        self._hosted = None
        self.service.forget(replica.group_id)

    # ------------------------------------------------------------------ dead letters (a thread of their own)
    def move_dead_letters(self, stopping: threading.Event) -> None:
        """Copy dead-lettered messages of the queue partitions led here to their dead-letter topics."""
        interval_s = self.settings.queue_dead_letter_interval_ms / 1000
        while not stopping.wait(interval_s):
            try:
                self.dead_letters.move_once()
            except Exception:
                log.exception("dead-letter move failed")
