"""One SDK Reader (router and pooled channels) per Python process and cluster, shared by every task.

Spark reuses its Python workers across tasks and micro-batches, and pickles readers to send them to
executors, so the source keeps no channel in its own objects: it asks here, where channels live for the
life of the worker process and follow leader changes through the router.
"""
from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

from raftbus.client.admin import Admin
from raftbus.client.errors import UnknownPartition
from raftbus.client.reader import Reader
from raftbus.client.spark.options import SPARK_FETCH_WAIT_MS, SourceOptions

T = TypeVar("T")

_lock = threading.Lock()
_readers: dict[tuple, Reader] = {}


def shared_reader(options: SourceOptions) -> Reader:
    """The process's Reader for the options' cluster and limits, opened on first use."""
    key = (options.bootstrap, options.fetch_bytes_max, options.request_timeout_ms)
    with _lock:
        reader = _readers.get(key)
        if reader is None:
            reader = _readers[key] = Reader(options.bootstrap, fetch_bytes_max=options.fetch_bytes_max,
                                            fetch_wait_ms=SPARK_FETCH_WAIT_MS,
                                            request_timeout_ms=options.request_timeout_ms)
        return reader


def shared_admin(options: SourceOptions) -> Admin:
    """An Admin over the shared Reader's router (closing it is not needed and would close the router)."""
    reader = shared_reader(options)
    return Admin(router=reader.router, request_timeout_ms=options.request_timeout_ms)


def close_all() -> None:
    """Close every shared Reader (the source's stop(), and tests)."""
    with _lock:
        readers = list(_readers.values())
        _readers.clear()
    for reader in readers:
        reader.close()


def with_fresh_metadata(reader: Reader, call: Callable[[], T]) -> T:
    """Run `call`; on UnknownPartition (a partition added since the router last read metadata, e.g. by
    `topics alter`) refresh the router's map once and run it again."""
    try:
        return call()
    except UnknownPartition:
        reader.router.refresh()
        return call()
