"""Helpers of the Spark tier: topics, producing numbered records, and checking what Spark read."""
from __future__ import annotations

from raftbus.client import Admin, Producer, Reader
from tests.helpers import wait_until

QUERY_TIMEOUT_S = 120


def create_topic(cluster, name: str, partitions: int, **settings) -> None:
    with Admin(cluster.bootstrap) as admin:
        admin.create_topic(name, partitions=partitions, replication_factor=3, **settings)


def produce(cluster, topic: str, counts: dict[int, int], first: int = 0, headers: bool = False) -> list[bytes]:
    """Send counts[p] records to each partition p, valued "<topic>-<n>" with n counting from `first`."""
    values = []
    with Producer(cluster.bootstrap, linger_ms=2) as producer:
        futures = []
        n = first
        for partition, count in sorted(counts.items()):
            for _ in range(count):
                value = f"{topic}-{n}".encode()
                extra = [("n", str(n).encode()), ("empty", None)] if headers and n % 2 else None
                futures.append(producer.send(topic, value, key=str(n).encode(), partition=partition, headers=extra))
                values.append(value)
                n += 1
        producer.flush()
        for future in futures:
            future.result()
    return values


def stored_records(cluster, topic: str) -> list:
    """Every record of the topic as the SDK reads it, in (partition, offset) order."""
    with Reader(cluster.bootstrap) as reader:
        records = list(reader.iter_topic(topic, from_beginning=True, stop_at_end=True))
    return sorted(records, key=lambda r: (r.partition, r.offset))


def assert_exactly_once(rows, records) -> None:
    """Spark rows (partition, offset, value) are exactly the stored records: none missing, none twice."""
    seen = sorted((r["partition"], r["offset"], bytes(r["value"])) for r in rows)
    assert len(seen) == len(set(seen)), "a record was read twice"
    assert seen == [(r.partition, r.offset, r.value) for r in records]


def stream(spark, cluster, topic: str, **options):
    """spark.readStream over `topic` from earliest, with extra options by keyword."""
    reader = (spark.readStream.format("raftbus").option("bootstrap", cluster.bootstrap)
              .option("subscribe", topic).option("startingOffsets", "earliest"))
    for name, value in options.items():
        reader = reader.option(name, str(value))
    return reader.load()


class BatchLog:
    """A foreachBatch sink that keeps each micro-batch's rows (partition, offset, value) by batch id."""

    def __init__(self):
        self.batches: list[tuple[int, list]] = []

    def __call__(self, df, batch_id: int) -> None:
        rows = sorted(df.select("partition", "offset", "value").collect())
        self.batches.append((batch_id, rows))

    @property
    def rows(self) -> list:
        return [row for _, rows in self.batches for row in rows]


def wait_for_query(query, predicate, what: str) -> None:
    """wait_until `predicate` holds while the streaming query runs; fail at once if the query died."""
    def done():
        return "query ended" if query.exception() is not None or not query.isActive else predicate()
    wait_until(done, QUERY_TIMEOUT_S, 0.3, what=what)
    assert query.exception() is None, query.exception()
    assert query.isActive, f"the query ended before {what}"
