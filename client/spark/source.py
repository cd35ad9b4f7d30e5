"""The `raftbus` data source: batch reads (spark.read) and Structured Streaming (spark.readStream).

Both plan one Spark input partition per broker partition with records in the range, and read it on an
executor from the partition's leader (see fetching). Streaming offsets are Kafka-shaped JSON checkpointed
by Spark: a restarted query resumes at the end of its last committed batch, and a batch that was planned
but not committed is re-read over exactly the same offsets (Spark keeps them in its offset log).

Admission control (Spark >= 4.2): maxOffsetsPerTrigger is the default read limit, split across partitions
in proportion to lag (offsets.split_budget); Trigger.AvailableNow reads up to the offsets found when the
query started (prepareForTriggerAvailableNow), in as many rate-limited batches as it takes, then stops.
"""
from __future__ import annotations

from collections.abc import Iterator

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from raftbus.client.spark import offsets as source_offsets
from raftbus.client.spark.columns import spark_schema
from raftbus.client.spark.connections import close_all, shared_reader
from raftbus.client.spark.fetching import read_range
from raftbus.client.spark.offsets import Offsets
from raftbus.client.spark.options import SourceOptions, include_headers, parse_options
from raftbus.client.spark.planning import OffsetRange, Planner, report_data_loss
from raftbus.client.spark.sink import RaftbusBatchWriter, RaftbusStreamWriter, batch_writer, stream_writer

NAME = "raftbus"


def _read(options: SourceOptions, partition: InputPartition) -> Iterator:
    if not isinstance(partition, OffsetRange):  # Spark's placeholder when a batch read plans no range
        return iter(())
    return read_range(partition, options, shared_reader(options))


class RaftbusBatchReader(DataSourceReader):
    """spark.read: from startingOffsets (default earliest) to endingOffsets (default latest), planned once."""

    def __init__(self, options: SourceOptions):
        self.options = options

    def partitions(self) -> list[OffsetRange]:
        planner = Planner(self.options)
        tps = planner.partitions()
        offsets = planner.offsets(tps)
        start = {tp: planner.start_of(tp, self.options.starting, offsets[tp]) for tp in tps}
        end = planner.ending_offsets(tps, offsets)
        return planner.ranges(start, end)

    def read(self, partition: InputPartition) -> Iterator:
        return _read(self.options, partition)


class RaftbusStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """spark.readStream: micro-batches between Kafka-shaped offsets; see the module docstring."""

    def __init__(self, options: SourceOptions):
        self.options = options
        self.available_now_target: Offsets | None = None

    def initialOffset(self) -> dict:
        planner = Planner(self.options)
        return source_offsets.to_json(planner.starting_offsets(planner.partitions()))

    def getDefaultReadLimit(self) -> ReadLimit:
        budget = self.options.max_offsets_per_trigger
        return ReadAllAvailable() if budget is None else ReadMaxRows(budget)

    def prepareForTriggerAvailableNow(self) -> None:
        self.available_now_target = self._latest()

    def reportLatestOffset(self) -> dict | None:
        return source_offsets.to_json(self._latest())

    def _latest(self) -> Offsets:
        """The high watermark of every partition the source reads now."""
        planner = Planner(self.options)
        return {tp: o.high_watermark for tp, o in planner.offsets(planner.partitions()).items()}

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        """Where the next micro-batch ends: every partition's high watermark, capped by the availableNow
        target and rate-limited by a ReadMaxRows limit; partitions not in `start` are new (from earliest)."""
        begin = source_offsets.from_json(start)
        planner = Planner(self.options)
        tps = planner.partitions()
        offsets = planner.offsets(tps)
        self._report_vanished(begin, tps)
        ends = self._capped({tp: o.high_watermark for tp, o in offsets.items()})
        firsts = {tp: begin.get(tp, offsets[tp].log_start_offset) for tp in ends}
        self._report_went_back(firsts, ends)
        if isinstance(limit, ReadMaxRows):
            ends = source_offsets.limit_ends(firsts, ends, limit.max_rows)
        return source_offsets.to_json(ends)

    def _capped(self, ends: Offsets) -> Offsets:
        """Under Trigger.AvailableNow: no further than the target, and no partition that came after it."""
        target = self.available_now_target
        if target is None:
            return ends
        return {tp: min(end, target[tp]) for tp, end in ends.items() if tp in target}

    def _report_went_back(self, firsts: Offsets, ends: Offsets) -> None:
        for tp, first in firsts.items():
            if ends[tp] < first:
                report_data_loss(self.options, f"{tp[0]}/{tp[1]}: the high watermark {ends[tp]} is below the "
                                               f"start offset {first} (the partition's offsets went back)")

    def _report_vanished(self, begin: Offsets, tps: list) -> None:
        current = set(tps)
        for tp in sorted(set(begin) - current):
            report_data_loss(self.options, f"{tp[0]}/{tp[1]} no longer exists; its records after offset "
                                           f"{begin[tp]} cannot be read")

    def partitions(self, start: dict, end: dict) -> list[OffsetRange]:
        return Planner(self.options).ranges(source_offsets.from_json(start), source_offsets.from_json(end))

    def read(self, partition: InputPartition) -> Iterator:
        return _read(self.options, partition)

    def commit(self, end: dict) -> None:
        """Nothing to do: Spark's checkpoint holds the offsets, the broker keeps records by retention."""

    def stop(self) -> None:
        close_all()


class RaftbusDataSource(DataSource):
    """`spark.read/readStream` and `df.write/writeStream` `.format("raftbus")` once registered
    (raftbus.client.spark.register); the sink is in sink.py."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        return spark_schema(include_headers(self.options))

    def reader(self, schema: StructType) -> RaftbusBatchReader:
        return RaftbusBatchReader(parse_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> RaftbusStreamReader:
        return RaftbusStreamReader(parse_options(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> RaftbusBatchWriter:
        return batch_writer(self.options, schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> RaftbusStreamWriter:
        return stream_writer(self.options, schema)
