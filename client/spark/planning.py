"""Driver-side planning: which partitions the source reads now, their offsets, and the ranges of a batch.

Partitions are discovered afresh on every call (Admin.list_topics, never a cached map), so partitions added
with `topics alter` and topics newly matching subscribePattern are seen at the next trigger; they start at
earliest. Offsets come from each partition's leader (ListOffsets through the router).
"""
from __future__ import annotations

import logging
import re
from dataclasses import dataclass

from pyspark.sql.datasource import InputPartition

from raftbus.client.errors import InvalidArgument, OffsetOutOfRange, UnknownPartition, UnknownTopic, WrongTopicKind
from raftbus.client.spark.connections import shared_admin, shared_reader, with_fresh_metadata
from raftbus.client.spark.offsets import Offsets
from raftbus.client.spark.options import (
    EARLIEST_OFFSET,
    LATEST_OFFSET,
    Bound,
    SourceOptions,
    TopicPartition,
)

log = logging.getLogger("raftbus.client.spark")


class OffsetRange(InputPartition):
    """One Spark input partition: records from_offset <= offset < until_offset of one broker partition."""

    def __init__(self, topic: str, partition: int, from_offset: int, until_offset: int):
        super().__init__((topic, partition, from_offset, until_offset))
        self.topic = topic
        self.partition = partition
        self.from_offset = from_offset
        self.until_offset = until_offset

    def __len__(self) -> int:
        return self.until_offset - self.from_offset

    def __repr__(self) -> str:
        return f"OffsetRange({self.topic}/{self.partition} [{self.from_offset}, {self.until_offset}))"


@dataclass(frozen=True, slots=True)
class PartitionOffsets:
    """A partition's log start offset and high watermark, from its leader."""

    log_start_offset: int
    high_watermark: int


def report_data_loss(options: SourceOptions, message: str) -> None:
    """Kafka's failOnDataLoss: raise OffsetOutOfRange when true, else log a warning and go on."""
    if options.fail_on_data_loss:
        raise OffsetOutOfRange(f"{message} (failOnDataLoss=true; set failOnDataLoss=false to skip lost records)")
    log.warning("%s; skipping them because failOnDataLoss=false", message)


class Planner:
    """Discovers partitions and resolves positions for one source; holds no channel itself (see connections)."""

    def __init__(self, options: SourceOptions):
        self.options = options

    def partitions(self) -> list[TopicPartition]:
        """The partitions the source reads right now, in (topic, partition) order."""
        selection = self.options.selection
        topics = {t.name: t for t in shared_admin(self.options).list_topics()}
        if selection.pattern is not None:
            matcher = re.compile(selection.pattern)
            return sorted((name, p.partition) for name, t in topics.items()
                          if t.kind == "stream" and matcher.fullmatch(name) for p in t.partitions)
        wanted = selection.assigned or [(name, None) for name in selection.topics]
        found: list[TopicPartition] = []
        for name, partition in wanted:
            topic = topics.get(name)
            if topic is None:
                raise UnknownTopic(f"topic {name!r} does not exist")
            if topic.kind != "stream":
                raise WrongTopicKind(f"topic {name!r} is a {topic.kind} topic; the Spark source reads stream topics")
            numbers = [p.partition for p in topic.partitions]
            if partition is not None and partition not in numbers:
                raise UnknownPartition(f"topic {name!r} has no partition {partition} (it has {len(numbers)})")
            found.extend((name, p) for p in numbers if partition is None or p == partition)
        return sorted(set(found))

    def offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, PartitionOffsets]:
        reader = shared_reader(self.options)
        return {tp: PartitionOffsets(*with_fresh_metadata(reader, lambda tp=tp: reader.offsets(*tp))) for tp in tps}

    def start_of(self, tp: TopicPartition, bound: Bound, offsets: PartitionOffsets) -> int:
        """Where a read of `tp` starts: startingTimestamp if given, else the bound's position."""
        if self.options.starting_timestamp_ms is not None:
            reader = shared_reader(self.options)
            return with_fresh_metadata(
                reader, lambda: reader.offset_for_time(tp[0], tp[1], self.options.starting_timestamp_ms))
        position = bound.position(tp)
        if position == EARLIEST_OFFSET:
            return offsets.log_start_offset
        if position == LATEST_OFFSET:
            return offsets.high_watermark
        return position

    def starting_offsets(self, tps: list[TopicPartition]) -> Offsets:
        offsets = self.offsets(tps)
        return {tp: self.start_of(tp, self.options.starting, offsets[tp]) for tp in tps}

    def ending_offsets(self, tps: list[TopicPartition], offsets: dict[TopicPartition, PartitionOffsets]) -> Offsets:
        """Batch reads: endingOffsets resolved; an offset above the high watermark is an InvalidArgument."""
        ends = {}
        for tp in tps:
            position = self.options.ending.position(tp)
            high_watermark = offsets[tp].high_watermark
            if position > high_watermark:
                raise InvalidArgument(f"endingOffsets {tp[0]}/{tp[1]}: {position} is above the high watermark "
                                      f"{high_watermark}")
            ends[tp] = high_watermark if position == LATEST_OFFSET else position
        return ends

    def ranges(self, start: Offsets, end: Offsets) -> list[OffsetRange]:
        """One OffsetRange per partition with records between `start` and `end`.

        A partition missing from `start` is new: it starts at its log start. An end below the start means
        the partition's offsets went back (the topic was recreated): reported per failOnDataLoss.
        """
        new = [tp for tp in end if tp not in start]
        first = {tp: o.log_start_offset for tp, o in self.offsets(new).items()}
        ranges = []
        for tp, until in sorted(end.items()):
            begin = start.get(tp, first.get(tp, 0))
            if until < begin:
                report_data_loss(self.options, f"{tp[0]}/{tp[1]}: planned end offset {until} is below the start "
                                               f"{begin} (the partition's offsets went back)")
                continue
            if until > begin:
                ranges.append(OffsetRange(tp[0], tp[1], begin, until))
        return ranges
