"""Goal: `python -m raftbus.bench.decode_cost` decodes the batch it encoded back to every record intact and prints
its CPU per record; bad arguments are refused."""
import json

import pytest

from raftbus.bench import decode_cost


def test_it_decodes_every_record_intact_and_reports_its_cost(capsys):
    assert decode_cost.main(["--records", "500", "--rounds", "2"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["records_intact"] is True and result["records"] == 500
    assert result["decode_cpu_ns_per_record"] > 0


@pytest.mark.parametrize("argv", [["--records", "0"], ["--rounds", "0"], ["--record-bytes", "-1"]])
def test_bad_arguments_are_refused(argv, capsys):
    with pytest.raises(SystemExit):
        decode_cost.main(argv)
    assert "must be" in capsys.readouterr().err
