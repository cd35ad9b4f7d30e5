"""The columns the raftbus sink takes (Kafka's sink columns plus the queue fields), checked on the driver.

    value            string or binary, required (null is a record without a value)
    key              string or binary
    topic            string; required unless the `topic` option is given (the option wins, as in Kafka)
    partition        int; without it a keyed record goes by murmur2 of its key, others stick to one
                     partition per produce batch
    headers          array<struct<key: string, value: binary or string>>
    priority         int (queue topics: lower first)
    group            string (queue topics: the fair-ordering group, also the routing key)
    delay_ms         long (queue topics: deliver no earlier than this many ms after the write)
    idempotency_key  string (queue topics: the broker drops a second message with the same key)

Any other column is refused: a misspelt `values` would otherwise be dropped without a word.
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    ByteType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructType,
)

from raftbus.client.errors import InvalidArgument

_BYTES = (StringType, BinaryType)
_INTS = (ByteType, ShortType, IntegerType, LongType)
COLUMN_TYPES = {
    "value": (_BYTES, "string or binary"),
    "key": (_BYTES, "string or binary"),
    "topic": ((StringType,), "string"),
    "partition": (_INTS, "int"),
    "priority": (_INTS, "int"),
    "group": ((StringType,), "string"),
    "delay_ms": (_INTS, "long"),
    "idempotency_key": ((StringType,), "string"),
}
QUEUE_COLUMNS = ("priority", "group", "delay_ms", "idempotency_key")


class SinkRow(NamedTuple):
    topic: str | None
    partition: int | None
    key: bytes | None
    value: bytes | None
    headers: tuple
    priority: int | None
    group: str | None
    delay_ms: int | None
    idempotency_key: str | None


def check_schema(schema: StructType, topic_option: str | None) -> None:
    """InvalidArgument for a missing value column, an unknown column or a column of the wrong type."""
    fields = {field.name.lower(): field for field in schema.fields}
    if "value" not in fields:
        raise InvalidArgument(f"the raftbus sink needs a value column (string or binary); the data has "
                              f"{sorted(fields)}")
    if topic_option is None and "topic" not in fields:
        raise InvalidArgument("give the raftbus sink a topic: the option topic or a topic column")
    for name, field in fields.items():
        if name == "headers":
            _check_headers(field.dataType)
            continue
        if name not in COLUMN_TYPES:
            raise InvalidArgument(f"the raftbus sink has no column {field.name!r}; its columns are value, key, "
                                  f"topic, partition, headers, {', '.join(QUEUE_COLUMNS)}")
        types, wanted = COLUMN_TYPES[name]
        if not isinstance(field.dataType, types):
            raise InvalidArgument(f"column {field.name} must be {wanted}, not {field.dataType.simpleString()}")


def _check_headers(data_type) -> None:
    element = data_type.elementType if isinstance(data_type, ArrayType) else None
    names = {f.name: f.dataType for f in element.fields} if isinstance(element, StructType) else {}
    if (set(names) != {"key", "value"} or not isinstance(names["key"], StringType)
            or not isinstance(names["value"], _BYTES)):
        raise InvalidArgument("column headers must be array<struct<key: string, value: binary>>, not "
                              f"{data_type.simpleString()}")


def _as_headers(pairs) -> tuple:
    if not pairs:
        return ()
    return tuple((pair["key"], pair["value"].encode() if isinstance(pair["value"], str) else pair["value"])
                 for pair in pairs)


def batch_columns(batch) -> dict[str, list]:
    """The columns of one pyarrow RecordBatch as lists by lower-case name; key and value as bytes (cast by
    Arrow, not per row), headers as tuples of (name, bytes) pairs; absent columns are absent."""
    import pyarrow as pa

    columns = {}
    for name, column in zip(batch.schema.names, batch.columns):
        name = name.lower()
        if name in ("key", "value") and pa.types.is_string(column.type):
            column = column.cast(pa.binary())
        values = column.to_pylist()
        columns[name] = [_as_headers(v) for v in values] if name == "headers" else values
    return columns


def sink_rows(batch) -> Iterator[SinkRow]:
    """The rows of one pyarrow RecordBatch, with bytes for key, value and header values."""
    return sink_rows_of(batch_columns(batch), batch.num_rows)


def sink_rows_of(columns: dict[str, list], rows: int) -> Iterator[SinkRow]:
    """The rows of batch_columns(batch)."""
    absent = [None] * rows
    headers = columns.get("headers") or [()] * rows
    yield from map(SinkRow._make, zip(*(headers if name == "headers" else columns.get(name, absent)
                                        for name in SinkRow._fields)))
