"""The broker processes of `raftbus dev`: started, watched, and restarted when one exits.

A Raft cluster keeps serving while a minority of brokers is down, and the first thing a user tries is to kill
one: `raftbus dev` says which broker exited and why (the last line it wrote to its log in that run: a broker that
fails to start writes its reason as one line), and starts it again, on the same data directory and ports, after
`restart_delay_ms` (so a broker that fails at once is not restarted in a tight loop); with restarts off it only
says so, and the rest of the cluster keeps serving.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from typing import Callable

DEV_RESTART_DELAY_MS = 2000


class ReservedPorts:
    """`count` ports on `host` (loopback unless told) the kernel picked (bind to port 0), held until `close`.

    Each is bound with SO_REUSEPORT and never listens: while it is held, the kernel gives its port to no other
    bind to port 0 and to no outgoing connection, a bind without SO_REUSEPORT fails, and a broker started with
    `listen_reuse_port` binds it beside the reservation and serves on it. Held across a broker's restarts, a
    port stays that broker's, so its peers and clients find it at the same address; connections to it while the
    broker is down are refused, as with a port nobody holds.
    """

    def __init__(self, count: int, host: str = "127.0.0.1"):
        self._sockets: list[socket.socket] = []
        try:
            for _ in range(count):
                sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
                self._sockets.append(sock)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
                sock.bind((host, 0))
        except BaseException:
            self.close()
            raise
        self.host = host
        self.ports = [sock.getsockname()[1] for sock in self._sockets]

    def close(self) -> None:
        for sock in self._sockets:
            sock.close()
        self._sockets = []

    def __enter__(self) -> "ReservedPorts":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@dataclass
class Supervised:
    node_id: int
    argv: list[str]
    log_path: str
    proc: subprocess.Popen | None = None
    env: dict | None = None           # the process environment (None: this one's)
    restart_at: float | None = None  # monotonic time of the next start, while exited
    restarts: int = field(default=0)
    log_offset: int = 0  # the log's size when the current process started: what it wrote comes after


LAST_WORDS_BYTES_MAX = 64 * 1024  # of a broker's log, read for its last line


def last_words(log_path: str, offset: int = 0) -> str:
    """The last line a broker wrote to its log after `offset`: a JSON log record's message (and the last line of its
    exception), or the plain line; "" when it wrote nothing."""
    try:
        with open(log_path, "rb") as log_file:
            size = log_file.seek(0, os.SEEK_END)
            log_file.seek(max(offset, size - LAST_WORDS_BYTES_MAX))
            text = log_file.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return ""
    try:
        record = json.loads(lines[-1])
    except ValueError:
        return lines[-1]
    if not isinstance(record, dict) or "msg" not in record:
        return lines[-1]
    exception = str(record.get("exc") or "").strip().splitlines()
    return f"{record['msg']}: {exception[-1]}" if exception else str(record["msg"])


def exit_text(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"was killed by signal {-returncode}"
    return f"exited with {returncode}"


class StopFlag:
    """Set by a signal handler, waited on by the main thread: a plain attribute and short sleeps, no lock.
    `threading.Event` can deadlock there: its `set` takes the lock its `wait` holds while entering and leaving a
    wait, and a signal handler runs on the main thread, which may be at that point."""

    POLL_S = 0.1

    def __init__(self):
        self._set = False

    def set(self) -> None:
        self._set = True

    def is_set(self) -> bool:
        return self._set

    def wait(self, timeout_s: float | None = None) -> bool:
        """Until set, or `timeout_s` passed; whether it is set."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while not self._set:
            left = self.POLL_S if deadline is None else min(self.POLL_S, deadline - time.monotonic())
            if left <= 0:
                break
            time.sleep(left)
        return self._set


class BrokerSupervisor:
    def __init__(self, brokers: list[Supervised], *, restart: bool, restart_delay_ms: int,
                 say: Callable[[str], None] = print, clock=time.monotonic):
        self.brokers = brokers
        self.restart = restart
        self.restart_delay_s = restart_delay_ms / 1000
        self._say = say
        self._clock = clock

    def start_all(self) -> None:
        for broker in self.brokers:
            self._start(broker)

    def _start(self, broker: Supervised) -> None:
        with open(broker.log_path, "ab") as log_file:
            broker.log_offset = log_file.tell()
            broker.proc = subprocess.Popen(broker.argv, stdout=subprocess.DEVNULL, stderr=log_file, env=broker.env)
        broker.restart_at = None

    def exited(self) -> Supervised | None:
        """The first broker whose current process has exited, if any."""
        return next((b for b in self.brokers if b.proc is not None and b.proc.poll() is not None), None)

    def last_words(self, broker: Supervised) -> str:
        """How the broker's last process ended: its exit status and the last line it logged."""
        words = last_words(broker.log_path, broker.log_offset)
        status = exit_text(broker.proc.returncode) if broker.proc is not None else "not running"
        return f"{status}: {words}" if words else status

    @property
    def processes(self) -> list[subprocess.Popen]:
        return [b.proc for b in self.brokers if b.proc is not None]

    def check(self) -> None:
        """Notice brokers that exited (say so, schedule a restart) and start the ones whose delay has passed."""
        now = self._clock()
        for broker in self.brokers:
            proc = broker.proc
            if proc is not None and proc.poll() is not None and broker.restart_at is None:
                self._exited(broker, proc.returncode, now)
            elif broker.restart_at is not None and now >= broker.restart_at:
                broker.restarts += 1
                self._say(f"raftbus dev: restarting broker {broker.node_id} (restart {broker.restarts})")
                self._start(broker)

    def _exited(self, broker: Supervised, returncode: int, now: float) -> None:
        others = sum(1 for b in self.brokers if b is not broker and b.proc is not None and b.proc.poll() is None)
        words = last_words(broker.log_path, broker.log_offset)
        message = (f"raftbus dev: broker {broker.node_id} (pid {broker.proc.pid}) {exit_text(returncode)}"
                   f"{' (' + words + ')' if words else ''}; {others} of {len(self.brokers)} brokers still serving")
        if not self.restart:
            broker.proc = None
            self._say(message + " (restarts are off)")
            return
        broker.restart_at = now + self.restart_delay_s
        self._say(message + f"; restarting it in {self.restart_delay_s:g} s")

    def stop_all(self, signal_number: int, timeout_s: float = 10.0) -> None:
        running = [p for p in self.processes if p.poll() is None]
        for proc in running:
            proc.send_signal(signal_number)
        deadline = self._clock() + timeout_s
        for proc in running:
            try:
                proc.wait(max(0.1, deadline - self._clock()))
            except subprocess.TimeoutExpired:
                proc.kill()
