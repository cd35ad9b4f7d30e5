"""Goal: `raftbus bench scale --scale-partitions 3,300` runs only the partition rows asked for (no send or producer
rows), without it every row runs, and a malformed list is refused with a clear message."""
import argparse

import pytest

from raftbus.bench import scale
from raftbus.bench.runner import add_arguments
from raftbus.client import settings


def parse(*argv):
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(["scale", *argv])


@pytest.fixture
def rows(monkeypatch):
    """The rows measure_rows runs, as (kind, partitions, producers), with no cluster behind them."""
    ran = []

    def produce_row(runner, bootstrap, args, partitions, producers, topic, per_record=False, records=None):
        ran.append(("send" if per_record else "produce", partitions, producers, records))
        return {"records_per_s": 1, "producer_cpu_us_per_record": 1, "broker_cpu_us_per_record": 1}

    def consume_row(runner, bootstrap, args, partitions, topic):
        ran.append(("consume", partitions, None, None))
        return {"records_per_s": 1}

    monkeypatch.setattr(scale, "produce_row", produce_row)
    monkeypatch.setattr(scale, "consume_row", consume_row)
    monkeypatch.setattr(scale, "delete_topic", lambda bootstrap, topic: None)
    return ran


def test_only_the_partition_rows_asked_for_run(rows):
    result = {"rows": {}}
    scale.measure_rows("127.0.0.1:1", parse("--scale-partitions", "3,300"), None, result)
    assert rows == [("produce", 3, 2, None), ("consume", 3, None, None), ("produce", 300, 2, None),
                    ("consume", 300, None, None)]
    assert sorted(result["rows"]) == ["p3", "p300"]


def test_without_the_flag_every_row_runs(rows):
    """The producer rows write BENCH_SCALE_PRODUCER_RECORDS each, the others BENCH_SCALE_RECORDS."""
    scale.measure_rows("127.0.0.1:1", parse(), None, {"rows": {}})
    assert rows[0] == ("send", 3, 2, None)
    producer_rows = [(producers, records) for kind, p, producers, records in rows if records is not None]
    assert producer_rows == [(n, settings.BENCH_SCALE_PRODUCER_RECORDS) for n in settings.BENCH_SCALE_PRODUCERS]
    assert [p for kind, p, _, _ in rows if kind == "consume"] == list(settings.BENCH_SCALE_PARTITIONS)


@pytest.mark.parametrize("text", ["", "3,x", "0,300", "3,,300"])
def test_a_malformed_list_of_partition_counts_is_refused(text, capsys):
    with pytest.raises(SystemExit):
        parse("--scale-partitions", text)
    assert "--scale-partitions" in capsys.readouterr().err
