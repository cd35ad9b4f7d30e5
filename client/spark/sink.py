"""The `raftbus` sink: df.write.format("raftbus") (batch) and writeStream.format("raftbus") (streaming).

The driver checks the options and columns when the write starts (InvalidArgument, UnknownTopic); each task
writes its Spark partition through one TaskWriter (sink_task) and answers with what it wrote. The
streaming sink writes every micro-batch exactly once: a task writes under a producer id derived from the
query id, micro-batch id and its partition id (sink_identity), so the batches of a replayed task are
recognised by the brokers (sink_sender) and nothing is appended twice. Design in docs/spark.md.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from raftbus.client.errors import InvalidArgument
from raftbus.client.router import Router
from raftbus.client.spark.sink_columns import SinkRow, batch_columns, check_schema, sink_rows
from raftbus.client.spark.sink_identity import batch_task_producer_id, new_write_id, stream_task_producer_id
from raftbus.client.spark.sink_options import SinkOptions, parse_sink_options
from raftbus.client.spark.sink_task import TaskWriter


@dataclass
class SinkCommit(WriterCommitMessage):
    """One task's answer: records appended, records the brokers already held (see WriteCounts), batches."""

    appended: int
    already_written: int
    batches: int


def _row_order(row: SinkRow) -> tuple:
    """A total order over rows (None first in every field), for sortWithinTask."""
    headers = tuple((name, value is not None, value or b"") for name, value in row.headers)
    return tuple((value is not None, value if value is not None else 0) for value in row._replace(headers=headers))


def _write_task(options: SinkOptions, producer_id: bytes, batches: Iterator) -> SinkCommit:
    from pyspark import TaskContext

    writer = TaskWriter(options, producer_id, TaskContext.get().partitionId())
    try:
        if options.sort_within_task:
            for row in sorted((row for batch in batches for row in sink_rows(batch)), key=_row_order):
                writer.write(row)
        else:
            for batch in batches:
                writer.write_columns(batch_columns(batch), batch.num_rows)
        counts = writer.finish()
    finally:
        writer.close()
    return SinkCommit(counts.appended, counts.already_written, counts.batches)


def checked_sink_options(options, schema: StructType) -> SinkOptions:
    """Parse the options, check the columns, and check that the `topic` option names a topic (driver)."""
    sink_options = parse_sink_options(options)
    check_schema(schema, sink_options.topic)
    if sink_options.topic is not None:
        with Router(sink_options.bootstrap, request_timeout_ms=sink_options.request_timeout_ms,
                    retries=sink_options.retries) as router:
            router.topic_kind(sink_options.topic)
    return sink_options


class RaftbusBatchWriter(DataSourceArrowWriter):
    """df.write: append the rows; a retried task is recognised by the brokers (its producer id repeats)."""

    def __init__(self, options: SinkOptions):
        self.options = options
        self.write_id = new_write_id()

    def write(self, iterator: Iterator) -> SinkCommit:
        return _write_task(self.options, batch_task_producer_id(self.write_id), iterator)

    def commit(self, messages: list) -> None:
        """Nothing to do: every task's records were acknowledged before the task answered."""

    def abort(self, messages: list) -> None:
        """Nothing to undo: records a failed write appended stay (as with Kafka's sink)."""


class RaftbusStreamWriter(DataSourceStreamArrowWriter):
    """writeStream: every micro-batch exactly once (see the module docstring)."""

    def __init__(self, options: SinkOptions):
        self.options = options

    def write(self, iterator: Iterator) -> SinkCommit:
        return _write_task(self.options, stream_task_producer_id(), iterator)

    def commit(self, messages: list, batchId: int) -> None:
        """Nothing to do: the records are acknowledged; Spark's commit log marks the batch done."""

    def abort(self, messages: list, batchId: int) -> None:
        """Nothing to undo: a replay of the batch writes only what its failed run did not."""


def batch_writer(options, schema: StructType, overwrite: bool) -> RaftbusBatchWriter:
    if overwrite:
        raise InvalidArgument("the raftbus sink appends to topics; use mode('append'), not overwrite")
    return RaftbusBatchWriter(checked_sink_options(options, schema))


def stream_writer(options, schema: StructType) -> RaftbusStreamWriter:
    return RaftbusStreamWriter(checked_sink_options(options, schema))
