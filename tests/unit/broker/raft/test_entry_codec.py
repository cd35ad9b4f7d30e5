"""The codec pysyncobj uses instead of pickle: log entries round-trip, everything else is refused both ways."""
from __future__ import annotations

import os
import pickle

import pytest

from raftbus.broker.raft import entry_codec


class RunsCommand:
    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def test_a_log_entry_round_trips():
    """(command bytes, index, term) comes back as it went, including an empty command and large numbers."""
    for entry in [(b"P\x00payload", 7, 3), (b"", 1, 0), (os.urandom(70_000), 2**40, 2**33)]:
        assert entry_codec.loads(entry_codec.dumps(entry)) == entry


def test_pickles_and_malformed_bytes_are_refused_without_running_code(tmp_path):
    """A pickle of os.system, a truncated header and an unknown tag raise EntryCodecError; nothing runs."""
    marker = tmp_path / "ran"
    for data in [pickle.dumps(RunsCommand(marker)), pickle.dumps((b"x", 1, 1)), b"E\x00\x01", b"", b"Z" + b"\0" * 16,
                 "text"]:
        with pytest.raises(entry_codec.EntryCodecError):
            entry_codec.loads(data)
    assert not marker.exists()


@pytest.mark.parametrize("value", [
    (0, (b"command",)),                       # a replicated call
    ["add", "2", object()],                   # a membership change
    3,                                        # a code version
    (b"x", "1", 2),                           # an entry with a non-int index
])
def test_values_raftbus_never_writes_are_refused(value):
    """Replicated calls, membership and version entries are never encoded: raftbus writes none of them."""
    with pytest.raises(entry_codec.EntryCodecError):
        entry_codec.dumps(value)


def test_pysyncobj_uses_the_codec_instead_of_pickle():
    """Importing raftbus's Raft group installs the codec where pysyncobj would pickle."""
    import pysyncobj.syncobj as raft_syncobj

    import raftbus.broker.raft.group  # noqa: F401 - installs the codec

    assert raft_syncobj.pickle is entry_codec
