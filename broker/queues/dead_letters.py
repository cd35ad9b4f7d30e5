"""Moving messages between a queue topic and its dead-letter topic `<topic>.dlq`, in both directions.

A state machine cannot write another group, so a message that used up its deliveries is first marked dead
in its own partition (replicated). The leader of that partition then copies it into the dead-letter partition
(`partition % dlq partitions`) with its history and an idempotency key derived from its id, and only once that
enqueue is committed removes it from the source. A crash between the two steps repeats the copy, which the key
turns into a no-op: at-least-once move, exactly-once effect (within the dead-letter topic's idempotency window).
Redrive is the same protocol the other way: ready messages of a dead-letter partition are enqueued back into the
source partition they came from (their delivery count starts again), then deleted from the dead-letter topic.
"""
from __future__ import annotations

import logging
from collections.abc import Callable

from raftbus.client import errors
from raftbus.client.queues.ids import message_id, split_message_id

from raftbus.broker.queues import commands as queue_commands
from raftbus.broker.queues.state.records import DEAD, READY
from raftbus.broker.context import BrokerContext
from raftbus.broker.queues.model import NewMessage
from raftbus.broker.queues.service import QueueService
from raftbus.broker.queues.settings import QueueSettings

log = logging.getLogger(__name__)

# (topic, partition, messages) -> [(message_id, duplicate)], committed on that partition's leader.
Forward = Callable[[str, int, list[NewMessage]], list[tuple[int, bool]]]


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace")


class DeadLetters:
    def __init__(self, context: BrokerContext, settings: QueueSettings, queues: QueueService, forward: Forward):
        self.context = context
        self.queues = queues
        self.forward = forward
        self.settings = settings

    # ------------------------------------------------------------------ source -> dead-letter topic
    def move_once(self) -> int:
        """Move one batch of dead messages out of every partition led here; returns how many moved."""
        moved = 0
        topics = {t.topic_id: t for t in self.context.metadata_sm.topics().values()}
        for replica in list(self.context.partitions.values()):
            topic = topics.get(replica.topic_id)
            if topic is None or topic.queue is None or not topic.queue.dead_letter_topic:
                continue
            if not replica.group.caught_up_as_leader or not replica.state_machine.counts()[3]:
                continue
            try:
                moved += self._move_partition(replica, topic)
            except errors.RaftbusError as exc:
                log.warning("dead-letter move will be retried", extra={"group": replica.group_id,
                                                                        "error": exc.code, "detail": exc.message})
        return moved

    def _move_partition(self, replica, topic) -> int:
        dead = replica.state_machine.peek(DEAD, self.settings.queue_dead_letter_batch_max)
        if not dead:
            return 0
        dlq = self.context.topic(topic.queue.dead_letter_topic)
        messages = [NewMessage(record=m.record, priority=m.priority, group=_text(m.group),
                               idempotency_key=_text(m.idempotency_key),
                               origin_id=message_id(replica.partition, seq), delivery_count=m.delivery_count,
                               enqueued_ms=m.enqueued_ms, last_error=_text(m.last_error)) for seq, m in dead]
        self.forward(dlq.name, replica.partition % len(dlq.partitions), messages)
        command = queue_commands.encode_dead_remove(self.queues.stamp(replica), self.queues.policy(topic.name),
                                        [s for s, _ in dead])
        return self.queues.submit(replica, command)

    # ------------------------------------------------------------------ dead-letter topic -> source
    def redrive(self, topic: str, partition: int, max_messages: int) -> int:
        """Move up to max_messages ready messages of `<topic>.dlq` partition `partition` back into `topic`."""
        source = self.context.topic(topic)
        if source.queue is None or not source.queue.dead_letter_topic:
            raise errors.WrongTopicKind(f"topic {topic!r} has no dead-letter topic to redrive from")
        batch_max = self.settings.queue_redrive_batch_max
        if not 1 <= max_messages <= batch_max:
            raise errors.InvalidArgument(f"max_messages must be between 1 and queue_redrive_batch_max={batch_max}")
        dlq_name = source.queue.dead_letter_topic
        replica = self.queues.replica(dlq_name, partition)
        ready = replica.state_machine.peek(READY, max_messages)
        targets: dict[int, list[NewMessage]] = {}
        for seq, m in ready:
            targets.setdefault(self._home(m.origin_id, partition, len(source.partitions)), []).append(NewMessage(
                record=m.record, priority=m.priority, group=_text(m.group), idempotency_key=_text(m.idempotency_key),
                origin_id=message_id(partition, seq), enqueued_ms=m.enqueued_ms, last_error=_text(m.last_error)))
        for target, messages in sorted(targets.items()):
            self.forward(topic, target, messages)
        if not ready:
            return 0
        command = queue_commands.encode_delete(self.queues.stamp(replica), self.queues.policy(dlq_name),
                                   [seq for seq, _ in ready])
        return sum(1 for answer in self.queues.submit(replica, command) if answer is None)

    @staticmethod
    def _home(origin_id: int, dlq_partition: int, partitions: int) -> int:
        """The source partition a dead letter came from (or, for one enqueued directly, the same number)."""
        if origin_id:
            origin_partition, _ = split_message_id(origin_id)
            if origin_partition < partitions:
                return origin_partition
        return dlq_partition % partitions
