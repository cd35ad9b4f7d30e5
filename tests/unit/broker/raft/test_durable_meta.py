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
    journal.close()
    durable_meta.DeferredMetaSync.deactivate()


def test_a_vote_written_on_the_loop_waits_for_the_pass_sync(journal, tmp_path):
    deferred = durable_meta.DeferredMetaSync()
    deferred.activate()
    journal.set_term(7, "2")
    assert {f.path for f in deferred.pending} == {str(tmp_path / "raft.journal.meta")}
    deferred.sync_pending()
    assert deferred.pending == set() and deferred.syncs == 1
    assert AppendJournal(str(tmp_path / "raft.journal")).current_term == 7


def test_an_unchanged_vote_is_not_synced_again(journal):
    deferred = durable_meta.DeferredMetaSync()
    deferred.activate()
    journal.set_term(3, "1")
    deferred.sync_pending()
    journal.set_commit_index(5)  # the commit index is a hint: never a reason to sync
    assert deferred.pending == set()


class _RecordingHub:
    def __init__(self, loop, journal):
        self.loop, self.journal, self.events = loop, journal, []
        self.queued = False

    def poll(self, timeout_s):
        self.journal.set_term(9, "1")  # a vote granted while handling a message, its answer queued
        self.queued = True
        self.events.append(("pending", {f.path for f in self.loop.durable_meta.pending}))

    def has_pending(self):
        return self.queued

    def flush(self):
        self.queued = False
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
    # the answer leaves right after the poll that queued it (before groups tick), the vote synced first
    assert hub.events == [("pending", {meta}), ("flush", set(), 1), ("flush", set(), 1)]
    assert durable_meta.current() is None  # deferral ends with the pass


class _TickingGroup:
    group_id = "p0"

    def __init__(self, hub):
        self.hub = hub

    def tick(self):
        self.hub.events.append(("tick",))


def test_answers_queued_while_handling_messages_leave_before_the_groups_tick(journal):
    loop = RaftLoop()
    hub = _RecordingHub(loop, journal)
    loop.attach(hub)
    loop.groups["p0"] = loop.awake["p0"] = _TickingGroup(hub)
    loop.mark_dirty("p0")
    loop.run_once(wait=False)
    kinds = [event[0] for event in hub.events]
    assert kinds == ["pending", "flush", "tick", "flush"]


def test_a_pass_that_queued_nothing_while_polling_flushes_once(journal):
    loop = RaftLoop()
    hub = _RecordingHub(loop, journal)
    hub.poll = lambda timeout_s: hub.events.append(("polled",))
    loop.attach(hub)
    loop.groups["p0"] = loop.awake["p0"] = _TickingGroup(hub)
    loop.mark_dirty("p0")
    loop.run_once(wait=False)
    assert [event[0] for event in hub.events] == ["polled", "tick", "flush"]
