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


def test_each_file_of_a_pass_is_synced_and_the_directories_of_new_ones(tmp_path, monkeypatch):
    for i in range(3):
        (tmp_path / f"g{i}").mkdir()
    journals = [AppendJournal(str(tmp_path / f"g{i}" / "raft.journal")) for i in range(3)]
    journals[0].set_term(1, "1")  # on disk before the pass: its directory entry is durable already
    synced, dirs = [], []
    real_fdatasync = durable_meta.os.fdatasync
    monkeypatch.setattr(durable_meta.os, "fdatasync", lambda fd: (synced.append(fd), real_fdatasync(fd)))
    monkeypatch.setattr(durable_meta, "fsync_path", lambda path: dirs.append(path))
    deferred = durable_meta.DeferredMetaSync()
    deferred.activate()
    try:
        for term, journal in enumerate(journals, start=2):
            journal.set_term(term, "2")
        assert synced == [] and dirs == []  # nothing until the pass sends
        deferred.sync_pending()
    finally:
        deferred.deactivate()
        deferred.close()
    assert sorted(synced) == sorted(j._meta_storer._slots._fd for j in journals)
    assert sorted(dirs) == [str(tmp_path / "g1"), str(tmp_path / "g2")]
    for term, journal in enumerate(journals, start=2):
        assert AppendJournal(journal._path).current_term == term
        journal.close()


def test_a_vote_that_cannot_be_made_durable_ends_the_process_before_the_pass_sends(journal, monkeypatch):
    def failing(fd):
        raise OSError(5, "Input/output error")

    class Exited(Exception):
        pass

    def exit_(code):
        raise Exited(code)

    monkeypatch.setattr(durable_meta.os, "fdatasync", failing)
    monkeypatch.setattr(durable_meta.os, "_exit", exit_)
    deferred = durable_meta.DeferredMetaSync()
    deferred.activate()
    journal.set_term(4, "3")
    with pytest.raises(Exited):
        deferred.sync_pending()


def test_a_replica_deleted_in_the_pass_that_wrote_its_vote_leaves_the_pass_sync_alone(tmp_path, monkeypatch):
    """Goal: a replica moved off this broker is deleted in the same loop pass in which its group wrote a new term
    (it stood for election once no longer in the configuration): the pass's sync makes the other groups' writes
    durable and does not end the process over the deleted file."""
    from raftbus.broker.replicas import ReplicaFiles

    exits = []
    monkeypatch.setattr(durable_meta.os, "_exit", lambda code: exits.append(code))
    partitions = tmp_path / "partitions"
    (partitions / "p1.0" / "raft").mkdir(parents=True)
    (partitions / "p1.1" / "raft").mkdir(parents=True)
    leaving = AppendJournal(str(partitions / "p1.0" / "raft" / "raft.journal"))
    staying = AppendJournal(str(partitions / "p1.1" / "raft" / "raft.journal"))
    deferred = durable_meta.DeferredMetaSync()
    deferred.activate()
    try:
        leaving.set_term(4, "1")
        staying.set_term(6, "2")
        leaving.close()
        files = ReplicaFiles(partitions, node_id=1, hub=None, loop=None, raft_settings=None, storage_settings=None,
                             open_stores=None, open_journals=None, disk=None, election_timeout_max_ms=0,
                             on_store_damaged=lambda group_id: None)
        files.delete("p1.0")
        deferred.sync_pending()
    finally:
        durable_meta.DeferredMetaSync.deactivate()
        staying.close()
    assert exits == [] and deferred.syncs == 1
    assert not (partitions / "p1.0").exists()
    assert AppendJournal(str(partitions / "p1.1" / "raft" / "raft.journal")).current_term == 6


def test_forget_under_drops_only_the_writes_inside_the_directory(tmp_path):
    deferred = durable_meta.DeferredMetaSync()
    (tmp_path / "a").mkdir()
    inside, beside = AppendJournal(str(tmp_path / "a" / "raft.journal")), AppendJournal(str(tmp_path / "ab.journal"))
    deferred.activate()
    try:
        inside.set_term(1, "1")
        beside.set_term(1, "1")
        deferred.forget_under(str(tmp_path / "a"))
        assert {f.path for f in deferred.pending} == {str(tmp_path / "ab.journal.meta")}
    finally:
        durable_meta.DeferredMetaSync.deactivate()
        inside.close()
        beside.close()
