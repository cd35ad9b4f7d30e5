"""Goal: the sink reads Arrow batches into rows with bytes where the broker wants bytes, and sortWithinTask
puts a task's rows in one order whatever order they arrived in."""
import random

import pyarrow as pa

from raftbus.client.spark.sink import _row_order
from raftbus.client.spark.sink_columns import SinkRow, sink_rows


def test_arrow_rows_become_bytes_and_header_tuples():
    header = pa.struct([("key", pa.string()), ("value", pa.binary())])
    batch = pa.RecordBatch.from_pydict({
        "VALUE": pa.array(["v", None], pa.string()), "key": pa.array([b"k", None], pa.binary()),
        "headers": pa.array([[{"key": "h", "value": b"x"}, {"key": "e", "value": None}], None], pa.list_(header)),
        "priority": pa.array([None, 3], pa.int32())})
    assert list(sink_rows(batch)) == [
        SinkRow(None, None, b"k", b"v", (("h", b"x"), ("e", None)), None, None, None, None),
        SinkRow(None, None, None, None, (), 3, None, None, None)]


def test_sort_within_task_gives_one_order_for_any_arrival_order():
    rows = [SinkRow("t", p, k, v, h, pr, None, None, None)
            for p in (None, 1) for k in (None, b"a", b"b") for v in (None, b"x")
            for h in ((), (("n", None),), (("n", b"1"),)) for pr in (None, 2)]
    expected = sorted(rows, key=_row_order)
    for seed in range(5):
        shuffled = rows[:]
        random.Random(seed).shuffle(shuffled)
        assert sorted(shuffled, key=_row_order) == expected
