"""Goal: the Spark source checks Kafka-named options once and refuses bad ones with a clear typed error."""
import pytest

from raftbus.client.errors import InvalidArgument
from raftbus.client.spark.options import (
    EARLIEST,
    EARLIEST_OFFSET,
    LATEST,
    LATEST_OFFSET,
    SPARK_FETCH_BYTES_MAX,
    include_headers,
    parse_options,
)

BASE = {"bootstrap": "127.0.0.1:1", "subscribe": "a, b,a"}


def test_defaults_follow_kafka():
    stream = parse_options(BASE, streaming=True)
    batch = parse_options(BASE, streaming=False)
    assert stream.selection.topics == ("a", "b")
    assert stream.starting.default == LATEST and batch.starting.default == EARLIEST
    assert batch.ending.default == LATEST
    assert stream.fail_on_data_loss is True and stream.include_headers is False and stream.use_arrow is True
    assert stream.max_offsets_per_trigger is None and stream.starting_timestamp_ms is None
    assert stream.fetch_bytes_max == SPARK_FETCH_BYTES_MAX


def test_option_names_are_case_insensitive_and_json_positions_parse():
    opts = parse_options({"BOOTSTRAP": "h:1", "SubscribePattern": "ord.*", "STARTINGOFFSETS": '{"t": {"0": 5, "2": -2}}',
                          "maxOffsetsPerTrigger": "10", "failondataloss": "FALSE", "includeHeaders": "true"},
                         streaming=True)
    assert opts.selection.pattern == "ord.*"
    assert opts.starting.position(("t", 0)) == 5
    assert opts.starting.position(("t", 2)) == EARLIEST_OFFSET
    assert opts.starting.position(("t", 1)) == EARLIEST_OFFSET  # left out: earliest, like a new partition
    assert (opts.max_offsets_per_trigger, opts.fail_on_data_loss, opts.include_headers) == (10, False, True)


def test_assign_and_ending_offsets_for_batch_reads():
    opts = parse_options({"bootstrap": "h:1", "assign": '{"t": [2, 0], "u": [1]}',
                          "endingOffsets": '{"t": {"0": 9, "2": -1}}'}, streaming=False)
    assert opts.selection.assigned == (("t", 0), ("t", 2), ("u", 1))
    assert opts.ending.position(("t", 0)) == 9
    assert opts.ending.position(("t", 2)) == LATEST_OFFSET
    assert opts.ending.position(("u", 1)) == LATEST_OFFSET


def test_include_headers_alone_for_the_schema():
    assert include_headers({"includeHeaders": "true"}) is True
    assert include_headers({}) is False


@pytest.mark.parametrize("options, streaming", [
    ({"bootstrap": "h:1"}, True),
    ({"bootstrap": "h:1", "subscribe": "a", "assign": '{"a": [0]}'}, True),
    ({"bootstrap": "h:1", "subscribePattern": "("}, True),
    ({"bootstrap": "h:1", "assign": '{"a": 0}'}, True),
    ({"bootstrap": "h:1", "assign": "not json"}, True),
    ({**BASE, "endingOffsets": "latest"}, True),
    ({**BASE, "startingOffsets": "latest"}, False),
    ({**BASE, "startingOffsets": '{"a": {"0": -1}}'}, False),
    ({**BASE, "endingOffsets": "earliest"}, False),
    ({**BASE, "endingOffsets": '{"a": {"0": -2}}'}, False),
    ({**BASE, "startingOffsets": '{"a": {"zero": 1}}'}, True),
    ({**BASE, "maxOffsetsPerTrigger": "0"}, True),
    ({**BASE, "startingTimestamp": "-5"}, True),
    ({**BASE, "failOnDataLoss": "maybe"}, True),
    ({**BASE, "fetchBytesMax": "lots"}, True),
    ({**BASE, "bootstrap": " , "}, True),
])
def test_bad_options_are_refused(options, streaming):
    with pytest.raises(InvalidArgument):
        parse_options(options, streaming=streaming)
