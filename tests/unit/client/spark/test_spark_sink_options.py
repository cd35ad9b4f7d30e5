"""Goal: the Spark sink takes the producer's settings as options and refuses bad ones with a typed error."""
import pytest

from raftbus.client import settings
from raftbus.client.errors import InvalidArgument
from raftbus.client.spark.sink_options import parse_sink_options


def test_defaults_are_the_producers():
    opts = parse_sink_options({"bootstrap": "h:1"})
    assert opts.topic is None and opts.batch_bytes_max == settings.BATCH_BYTES_MAX
    assert opts.buffer_bytes_max == settings.BUFFER_BYTES_MAX and opts.retries == settings.RETRIES
    assert opts.delivery_timeout_ms == settings.DELIVERY_TIMEOUT_MS
    assert opts.idempotency_keys is True and opts.sort_within_task is False


def test_names_are_case_insensitive():
    opts = parse_sink_options({"kafka.bootstrap.servers": "h:1", "TOPIC": " t ", "BatchBytesMax": "2048",
                               "retries": "0", "sortwithintask": "TRUE", "idempotencyKeys": "false"})
    assert (opts.bootstrap, opts.topic, opts.batch_bytes_max, opts.retries) == ("h:1", "t", 2048, 0)
    assert opts.sort_within_task is True and opts.idempotency_keys is False


@pytest.mark.parametrize("options, message", [
    ({"batchBytesMax": "0"}, "batchBytesMax must be an integer >= 1"),
    ({"batchBytesMax": "4096", "bufferBytesMax": "1024"}, "bufferBytesMax must be an integer >= 4096"),
    ({"retries": "-1"}, "retries must be an integer >= 0"),
    ({"deliveryTimeoutMs": "soon"}, "deliveryTimeoutMs must be an integer"),
    ({"sortWithinTask": "yes"}, "sortWithinTask must be true or false"),
])
def test_bad_options_are_refused(options, message):
    with pytest.raises(InvalidArgument, match=message):
        parse_sink_options({"bootstrap": "h:1", **options})
