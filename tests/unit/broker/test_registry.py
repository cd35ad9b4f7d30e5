"""Goal: what the parts of a broker register reaches the Raft loop and the broker's threads as registered: tasks in
order under their names and intervals, listeners, threads that end when the broker stops, and every closer run."""
from __future__ import annotations

import logging
import threading

import pytest

from raftbus.broker.registry import Registry
from tests.helpers import wait_until


class Loop:
    """The part of a RaftLoop the registry installs onto."""

    def __init__(self):
        self.periodic = []
        self.applied_listeners = ["already there"]
        self.leadership_listeners = []

    def every(self, interval_ms, fn):
        self.periodic.append((interval_ms, fn))


def test_tasks_and_listeners_are_installed_in_the_order_registered():
    registry, ran = Registry(), []
    registry.every("retention", 5000, lambda: ran.append("retention"))
    registry.every("starting replicas", 0, lambda: ran.append("starting"))
    registry.on_applied(print)
    registry.on_leadership(repr)
    loop = Loop()
    registry.install(loop)
    assert [(interval, fn.__name__) for interval, fn in loop.periodic] == [(5000, "retention"),
                                                                            (0, "starting replicas")]
    for _, fn in loop.periodic:
        fn()
    assert ran == ["retention", "starting"]
    assert loop.applied_listeners == ["already there", print] and loop.leadership_listeners == [repr]


def test_a_negative_interval_is_refused():
    with pytest.raises(ValueError, match="interval_ms"):
        Registry().every("bad", -1, lambda: None)


def test_threads_run_until_the_broker_stops_under_their_names():
    registry, seen = Registry(), []

    def mover(stopping):
        seen.append(threading.current_thread().name)
        stopping.wait()

    registry.thread("raftbus-dead-letters", mover)
    stopping = threading.Event()
    registry.start_threads(stopping, "3")
    wait_until(lambda: seen == ["raftbus-dead-letters-3"], 5, what="the thread to start")
    stopping.set()
    registry.join_threads(5.0)
    assert not any(t.name == "raftbus-dead-letters-3" for t in threading.enumerate())


def test_every_closer_runs_even_when_one_fails(caplog):
    registry, closed = Registry(), []

    def broken():
        raise OSError("gone")

    registry.on_close(broken)
    registry.on_close(lambda: closed.append("forwarder"))
    with caplog.at_level(logging.ERROR, logger="raftbus.broker.registry"):
        registry.close()
    assert closed == ["forwarder"] and "closing" in caplog.text


def test_servicers_and_interceptors_keep_the_order_registered():
    registry = Registry()
    registry.intercept(["metrics"])
    registry.intercept(["auth"])
    registry.serve([("add_log", "log")])
    registry.serve([("add_admin", "admin")])
    assert registry.interceptors == ["metrics", "auth"]
    assert registry.servicers == [("add_log", "log"), ("add_admin", "admin")]


def test_starters_run_before_the_threads_start():
    registry, order = Registry(), []
    registry.on_start(lambda: order.append("port"))
    registry.thread("raftbus-mover", lambda stopping: order.append("thread"))
    stopping = threading.Event()
    registry.start(stopping, "1")
    stopping.set()
    registry.join_threads(5.0)
    assert order == ["port", "thread"]
