"""Goal: the queue apply-cost tool drains exactly what it enqueued through real leases and acks (so its figures
are of the work they name), leaves a backlog stored when asked to, and stops after the enqueues when asked to."""
import json

import pytest

from raftbus.bench import queue_apply_cost


@pytest.mark.parametrize("layout", [[], ["--rows"]])
def test_every_enqueued_message_is_leased_and_acked_in_batches(capsys, layout):
    assert queue_apply_cost.main(["--messages", "2500", "--batch", "1000", *layout]) == 0
    line = json.loads(capsys.readouterr().out)
    assert line["runs"] == (not layout) and line["drained"] and line["acked"] == 2500 and line["left"] == [0, 0, 0, 0]
    assert line["enqueue_cpu_us_per_message"] >= 0 and line["answer_cpu_us_per_message"] >= 0
    assert line["lease_cpu_us_per_message"] >= 0 and line["ack_cpu_us_per_message"] >= 0
    # the acked leases' in-flight index entries were still there, and ticks past their deadline removed them
    assert line["expiry_ticks"] >= 1 and line["expiry_cpu_us_per_message"] >= 0


@pytest.mark.parametrize("layout", [[], ["--rows"]])
def test_a_backlog_stays_ready_while_the_measured_messages_are_drained(capsys, layout):
    assert queue_apply_cost.main(["--messages", "1500", "--batch", "400", "--backlog", "700", *layout]) == 0
    line = json.loads(capsys.readouterr().out)
    assert line["acked"] == 1500 and line["backlog"] == 700
    assert line["left"] == [700, 0, 0, 0]  # ready, delayed, in flight, dead: the backlog alone, none of it leased
    assert line["expiry_ticks"] >= 1


def test_fill_only_leases_nothing(capsys):
    assert queue_apply_cost.main(["--messages", "10", "--fill-only"]) == 0
    assert json.loads(capsys.readouterr().out) == {"messages": 10, "batch": 1000, "runs": True, "backlog": 0,
                                                   "drained": False}


def test_counts_below_one_are_usage_errors():
    for bad in (["--batch", "0"], ["--backlog", "-1"]):
        with pytest.raises(SystemExit) as exc:
            queue_apply_cost.main(bad)
        assert exc.value.code == 2
