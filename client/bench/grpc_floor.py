"""What gRPC Python alone costs per message at a fixed rate: the floor under any raftbus light-load figure.

`python -m raftbus.bench.grpc_floor [--rate N] [--seconds S] [--payload-bytes B]` starts an echo server in
a child process (gRPC Python's synchronous server with a thread pool, as the broker runs it) on 127.0.0.1 and,
from this process, sends B-byte messages at N per second for S seconds each way: a bidi stream with the
synchronous API (a request iterator fed from a queue, as the Producer's produce stream does), the same with
grpc.aio (as AsyncProducer does), and unary calls with each API. Each message is answered by the server as it
arrives and waited for before the next is due. One JSON line per way: p50 / p99 round trip in ms, and this
process's and the server's CPU time per message (every thread). The broker does nothing here: no Raft, no storage, no SDK.

For comparison, the last way ("tcp, no gRPC") sends the same messages as length-prefixed frames over a plain TCP
connection to the same server process, where one thread answers them from a `selectors` loop (the way the
broker's Raft transport reads and writes its peers' frames), and this process writes each frame and reads its
answer on the calling thread: what a round trip costs Python without gRPC, with no encryption either.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import queue
import selectors
import socket
import struct
import sys
import threading
import time

import grpc

from raftbus.bench.runner import paced, paced_async, percentile

METHOD_STREAM, METHOD_UNARY = "/raftbus.bench.Echo/Stream", "/raftbus.bench.Echo/Unary"
SERVER_WORKERS = 8
LENGTH = struct.Struct(">I")  # a frame of the TCP way: its length, then the message
TCP_READ_BYTES = 1 << 16


def _same(data: bytes) -> bytes:
    return data


def _echo_stream(requests, context):
    yield from requests


class _EchoHandler(grpc.GenericRpcHandler):
    def service(self, details):
        if details.method == METHOD_STREAM:
            return grpc.stream_stream_rpc_method_handler(_echo_stream, _same, _same)
        if details.method == METHOD_UNARY:
            return grpc.unary_unary_rpc_method_handler(lambda request, context: request, _same, _same)
        return None


def _whole_frames(data: bytes) -> int:
    """How many leading bytes of `data` are whole length-prefixed frames."""
    end = 0
    while end + LENGTH.size <= len(data):
        (size,) = LENGTH.unpack_from(data, end)
        if end + LENGTH.size + size > len(data):
            break
        end += LENGTH.size + size
    return end


def _tcp_echo(listener: socket.socket) -> None:
    """The TCP way's server (a thread of the echo server process): one selectors loop that accepts connections
    and writes back each whole frame as it arrives."""
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    unread: dict[socket.socket, bytes] = {}
    while True:
        for key, _ in selector.select():
            sock = key.fileobj
            if sock is listener:
                conn, _ = listener.accept()
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                selector.register(conn, selectors.EVENT_READ)
                unread[conn] = b""
                continue
            data = sock.recv(TCP_READ_BYTES)
            if not data:
                selector.unregister(sock)
                sock.close()
                del unread[sock]
                continue
            data = unread[sock] + data
            end = _whole_frames(data)
            if end:
                sock.sendall(data[:end])
            unread[sock] = data[end:]


def serve(answers, asks) -> None:
    """The echo server (child process): puts its gRPC port then its TCP port on `answers`, then answers each
    "cpu" on `asks` with its CPU time so far (every thread) until "stop"."""
    from concurrent import futures

    server = grpc.server(futures.ThreadPoolExecutor(SERVER_WORKERS))
    server.add_generic_rpc_handlers((_EchoHandler(),))
    answers.put(server.add_insecure_port("127.0.0.1:0"))
    server.start()
    listener = socket.create_server(("127.0.0.1", 0))
    answers.put(listener.getsockname()[1])
    threading.Thread(target=_tcp_echo, args=(listener,), name="tcp-echo", daemon=True).start()
    while asks.get() == "cpu":
        answers.put(time.process_time())
    server.stop(None)


class _Server:
    def __init__(self, answers, asks):
        self._answers, self._asks = answers, asks

    def cpu_s(self) -> float:
        self._asks.put("cpu")
        return self._answers.get(timeout=30)


def _check(answer: bytes, payload: bytes) -> None:
    if answer != payload:
        raise RuntimeError(f"the echo server answered {len(answer)} bytes that differ from the {len(payload)} sent")


def _timed(count: int, rate: int, round_trip) -> list[float]:
    """Run `round_trip()` `count` times at `rate` per second; the ms each took."""
    latencies = []
    for _ in paced(count, rate):
        sent = time.perf_counter()
        round_trip()
        latencies.append((time.perf_counter() - sent) * 1000)
    return latencies


async def _timed_async(count: int, rate: int, round_trip) -> list[float]:
    """`_timed` of a coroutine function."""
    latencies = []
    async for _ in paced_async(count, rate):
        sent = time.perf_counter()
        await round_trip()
        latencies.append((time.perf_counter() - sent) * 1000)
    return latencies


class _Cpu:
    """CPU seconds of this process and of the server from `start` to `stop`."""

    def __init__(self, server: _Server):
        self._server = server

    def start(self) -> None:
        self._client, self._served = time.process_time(), self._server.cpu_s()

    def stop(self) -> tuple[float, float]:
        return time.process_time() - self._client, self._server.cpu_s() - self._served


def _figures(way: str, latencies_ms: list[float], cpu: tuple[float, float], rate: int, payload: int) -> dict:
    client_s, server_s = cpu
    return {"bench": "grpc_floor", "way": way, "rate_per_s": rate, "payload_bytes": payload,
            "messages": len(latencies_ms), "p50_ms": round(percentile(latencies_ms, 0.50), 3),
            "p99_ms": round(percentile(latencies_ms, 0.99), 3),
            "client_cpu_us_per_message": round(client_s * 1e6 / len(latencies_ms), 1),
            "server_cpu_us_per_message": round(server_s * 1e6 / len(latencies_ms), 1)}


def sync_ways(address: str, count: int, rate: int, payload: bytes, cpu: _Cpu) -> list[dict]:
    with grpc.insecure_channel(address) as channel:
        unary = channel.unary_unary(METHOD_UNARY, _same, _same)
        unary(payload)  # connected before timing
        cpu.start()
        latencies = _timed(count, rate, lambda: _check(unary(payload), payload))
        unary_figures = _figures("sync unary", latencies, cpu.stop(), rate, len(payload))

        requests: queue.Queue = queue.Queue()
        answers = channel.stream_stream(METHOD_STREAM, _same, _same)(iter(requests.get, None))
        requests.put(payload)
        next(answers)

        def echo() -> None:
            requests.put(payload)
            _check(next(answers), payload)

        cpu.start()
        latencies = _timed(count, rate, echo)
        stream_figures = _figures("sync bidi stream", latencies, cpu.stop(), rate, len(payload))
        requests.put(None)
    return [unary_figures, stream_figures]


async def aio_ways(address: str, count: int, rate: int, payload: bytes, cpu: _Cpu) -> list[dict]:
    async with grpc.aio.insecure_channel(address) as channel:
        unary = channel.unary_unary(METHOD_UNARY, _same, _same)
        await unary(payload)

        async def call_unary() -> None:
            _check(await unary(payload), payload)

        cpu.start()
        latencies = await _timed_async(count, rate, call_unary)
        unary_figures = _figures("aio unary", latencies, cpu.stop(), rate, len(payload))

        call = channel.stream_stream(METHOD_STREAM, _same, _same)()
        await call.write(payload)
        await call.read()

        async def echo() -> None:
            await call.write(payload)
            _check(await call.read(), payload)

        cpu.start()
        latencies = await _timed_async(count, rate, echo)
        stream_figures = _figures("aio bidi stream", latencies, cpu.stop(), rate, len(payload))
        await call.done_writing()
    return [unary_figures, stream_figures]


def _read_frame(sock: socket.socket) -> bytes:
    """One length-prefixed frame's message from a blocking socket."""
    data = b""
    while len(data) < LENGTH.size or len(data) < LENGTH.size + LENGTH.unpack_from(data)[0]:
        chunk = sock.recv(TCP_READ_BYTES)
        if not chunk:
            raise RuntimeError("the echo server closed the TCP connection")
        data += chunk
    return data[LENGTH.size:]


def tcp_way(port: int, count: int, rate: int, payload: bytes, cpu: _Cpu) -> dict:
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        frame = LENGTH.pack(len(payload)) + payload

        def echo() -> None:
            sock.sendall(frame)
            _check(_read_frame(sock), payload)

        echo()  # connected and answered before timing
        cpu.start()
        latencies = _timed(count, rate, echo)
        return _figures("tcp, no gRPC", latencies, cpu.stop(), rate, len(payload))


def run(rate: int, seconds: float, payload_bytes: int) -> list[dict]:
    context = multiprocessing.get_context("spawn")
    answers, asks = context.Queue(), context.Queue()
    server = context.Process(target=serve, args=(answers, asks), daemon=True)
    server.start()
    try:
        address = f"127.0.0.1:{answers.get(timeout=30)}"
        tcp_port = answers.get(timeout=30)
        cpu = _Cpu(_Server(answers, asks))
        count = max(1, int(rate * seconds))
        payload = bytes(payload_bytes)
        return (sync_ways(address, count, rate, payload, cpu)
                + asyncio.run(aio_ways(address, count, rate, payload, cpu))
                + [tcp_way(tcp_port, count, rate, payload, cpu)])
    finally:
        asks.put("stop")
        server.join(10)
        if server.is_alive():
            server.kill()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m raftbus.bench.grpc_floor",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=int, default=1_000, help="messages per second, each way")
    parser.add_argument("--seconds", type=float, default=5.0, help="seconds of messages, each way")
    parser.add_argument("--payload-bytes", type=int, default=100, help="bytes per message")
    args = parser.parse_args(argv)
    if args.rate < 1 or args.seconds <= 0 or args.payload_bytes < 0:
        parser.error("--rate must be >= 1, --seconds > 0 and --payload-bytes >= 0")
    for line in run(args.rate, args.seconds, args.payload_bytes):
        print(json.dumps(line), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
