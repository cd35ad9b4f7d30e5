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


def _as_bytes(value) -> bytes | None:
    return value.encode() if isinstance(value, str) else value


def _as_headers(pairs) -> tuple:
    if not pairs:
        return ()
    return tuple((pair["key"], _as_bytes(pair["value"])) for pair in pairs)


def sink_rows(batch) -> Iterator[SinkRow]:
    """The rows of one pyarrow RecordBatch, with bytes for key, value and header values."""
    names = {name.lower(): i for i, name in enumerate(batch.schema.names)}
    size = batch.num_rows

    def column(name: str, convert=None) -> list:
        if name not in names:
            return [None] * size
        values = batch.column(names[name]).to_pylist()
        return [convert(v) for v in values] if convert is not None else values

    yield from map(SinkRow._make, zip(
        column("topic"), column("partition"), column("key", _as_bytes), column("value", _as_bytes),
        column("headers", _as_headers), column("priority"), column("group"), column("delay_ms"),
        column("idempotency_key")))
