"""Goal: the gRPC floor tool times every way it names through a real echo server on loopback (each message
answered before the next), reports both processes' CPU, and refuses rates, durations and sizes that mean nothing."""
import json

import pytest

from raftbus.bench import grpc_floor


def test_every_way_round_trips_every_message(capsys):
    assert grpc_floor.main(["--rate", "500", "--seconds", "0.04", "--payload-bytes", "64"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["way"] for line in lines] == ["sync unary", "sync bidi stream", "aio unary", "aio bidi stream",
                                               "tcp, no gRPC"]
    for line in lines:
        assert line["messages"] == 20 and line["payload_bytes"] == 64
        assert 0 < line["p50_ms"] <= line["p99_ms"]
        assert line["client_cpu_us_per_message"] > 0 and line["server_cpu_us_per_message"] > 0


def test_the_echo_server_answers_what_it_was_sent():
    assert list(grpc_floor._echo_stream(iter([b"a", b"bc"]), None)) == [b"a", b"bc"]


def test_the_tcp_echo_answers_only_whole_frames():
    frame = grpc_floor.LENGTH.pack(3) + b"abc"
    assert grpc_floor._whole_frames(b"") == 0
    assert grpc_floor._whole_frames(frame[:5]) == 0
    assert grpc_floor._whole_frames(frame) == len(frame)
    assert grpc_floor._whole_frames(frame + frame[:6]) == len(frame)
    assert grpc_floor._whole_frames(frame + grpc_floor.LENGTH.pack(0)) == len(frame) + 4


@pytest.mark.parametrize("argv", [["--rate", "0"], ["--seconds", "0"], ["--payload-bytes", "-1"]])
def test_meaningless_arguments_are_usage_errors(argv):
    with pytest.raises(SystemExit) as exc:
        grpc_floor.main(argv)
    assert exc.value.code == 2
