"""Goal: a term or vote written on the Raft loop is on disk, and made durable, before anything the loop sends in the
same pass."""
import pytest

from raftbus.broker.raft import durable_meta
from raftbus.broker.raft.journal import AppendJournal
from raftbus.broker.raft.loop import RaftLoop


@pytest.fixture
def journal(tmp_path):
    journal = AppendJournal(str(tmp_path / "raft.journal"))
    yield journal
    journal._destroy()
    durable_meta.DeferredMetaSync.deactivate()


def test_a_vote_written_on_the_loop_waits_for_the_pass_sync(journal, tmp_path):
    deferred = durable_meta.DeferredMetaSync()
    deferred.activate()
    journal.setCurrentTerm(7, "2")
    assert {f.path for f in deferred.pending} == {str(tmp_path / "raft.journal.meta")}
    deferred.sync_pending()
    assert deferred.pending == set() and deferred.syncs == 1
    assert AppendJournal(str(tmp_path / "raft.journal")).getCurrentTerm() == 7


def test_an_unchanged_vote_is_not_synced_again(journal):
    deferred = durable_meta.DeferredMetaSync()
    deferred.activate()
    journal.setCurrentTerm(3, "1")
    deferred.sync_pending()
    journal.setRaftCommitIndex(5)  # the commit index is a hint: never a reason to sync
    assert deferred.pending == set()


class _RecordingHub:
    def __init__(self, loop, journal):
        self.loop, self.journal, self.events = loop, journal, []

    def poll(self, timeout_s):
        self.journal.setCurrentTerm(9, "1")  # a vote granted while handling a message
        self.events.append(("pending", {f.path for f in self.loop.durable_meta.pending}))

    def flush(self):
        self.events.append(("flush", {f.path for f in self.loop.durable_meta.pending}, self.loop.durable_meta.syncs))

    def connected_peers(self):
        return set()

    def wakeup(self):
        pass


def test_the_loop_syncs_the_pass_votes_before_it_flushes_messages(journal, tmp_path):
    loop = RaftLoop()
    hub = _RecordingHub(loop, journal)
    loop.attach(hub)
    loop.run_once(wait=False)
    meta = str(tmp_path / "raft.journal.meta")
    assert hub.events == [("pending", {meta}), ("flush", set(), 1)]
    assert durable_meta.current() is None  # deferral ends with the pass
