"""Goal: a channel the router opened to a broker that went away takes calls again soon after the broker is back:
within RECONNECT_BACKOFF_MAX_MS (plus gRPC's jitter) of its return, however long it was away. gRPC's own
defaults (1 s growing 1.6x to 120 s) left such a channel failing every call for seconds after the broker was
back, which is what made a client find a newly elected leader late when that broker had been restarted earlier.
A real gRPC server on loopback, stopped and started again on the same port (held by the test meanwhile: gRPC
Python binds with SO_REUSEPORT, see tests/ports.py)."""
from __future__ import annotations

import time
from concurrent import futures

import grpc

from raftbus.client import settings
from raftbus.bench import grpc_floor
from raftbus.client.router import grpc_connect
from tests.ports import reserve_ports

AWAY_S = 6.0  # gRPC's default backoff would be past 2.5 s between dials by then
JITTER = 1.2  # gRPC spreads each backoff by +-20 %
ANSWER_SLACK_S = 0.8


def echo_server(port: int) -> grpc.Server:
    server = grpc.server(futures.ThreadPoolExecutor(2))
    server.add_generic_rpc_handlers((grpc_floor._EchoHandler(),))
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    return server


def test_a_channel_to_a_broker_that_comes_back_takes_calls_within_the_reconnect_backoff():
    reserved = reserve_ports(1)
    (port,) = reserved.ports
    server = echo_server(port)
    connection = grpc_connect(f"127.0.0.1:{port}")
    call = connection.channel.unary_unary(grpc_floor.METHOD_UNARY, grpc_floor._same, grpc_floor._same)
    try:
        assert call(b"up", timeout=5) == b"up"
        server.stop(None)
        away_until = time.monotonic() + AWAY_S
        failed = 0
        while time.monotonic() < away_until:  # a client keeps trying while the broker is away
            try:
                call(b"away", timeout=1)
            except grpc.RpcError as exc:
                assert exc.code() == grpc.StatusCode.UNAVAILABLE
                failed += 1
            time.sleep(0.25)
        assert failed > 0
        server = echo_server(port)
        back_s = time.monotonic()
        bound_s = settings.RECONNECT_BACKOFF_MAX_MS / 1000 * JITTER + ANSWER_SLACK_S
        while True:
            try:
                assert call(b"back", timeout=1) == b"back"
                break
            except grpc.RpcError:
                assert time.monotonic() - back_s < bound_s, "the channel still fails calls past its reconnect backoff"
                time.sleep(0.05)
    finally:
        connection.close()
        server.stop(None)
        reserved.close()
