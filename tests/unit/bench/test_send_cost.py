"""Goal: the send-cost tool sends, acknowledges and reads back every record it counts (so its figures are of the
work they name), and refuses counts below one."""
import json

import pytest

from raftbus.bench import send_cost


def test_every_record_is_sent_answered_and_read_back(capsys):
    assert send_cost.main(["--records", "3000", "--rounds", "2"]) == 0
    line = json.loads(capsys.readouterr().out)
    assert line["records_read"] == 6000 and line["offsets_sent"] == 6000 and line["offsets_contiguous"]
    assert 1 <= line["batches"] <= 6000
    assert line["send_cpu_us_per_record"] >= 0 and line["result_cpu_us_per_record"] >= 0


def test_a_record_read_back_twice_is_not_contiguous():
    assert send_cost._contiguous([(0, 0), (0, 1), (1, 0)], {0: 2, 1: 1})
    assert not send_cost._contiguous([(0, 0), (0, 0), (1, 0)], {0: 2, 1: 1})
    assert not send_cost._contiguous([(0, 1), (1, 0)], {0: 3, 1: 1})


@pytest.mark.parametrize("argv", [["--records", "0"], ["--rounds", "0"]])
def test_counts_below_one_are_usage_errors(argv):
    with pytest.raises(SystemExit) as exc:
        send_cost.main(argv)
    assert exc.value.code == 2
