"""One Raft group (pysyncobj) per replicated state machine, driven by the broker's loop.

What this module adds on top of pysyncobj 0.3.17 (see docs/replication.md):
- `GroupTransport` plugs the group into the broker's one multiplexed, authenticated transport (`RaftHub`);
- the state machine is reached through ONE kind of entry, a REGULAR entry whose payload is the command's own bytes
  (no pickle: see `entry_codec`), with the Raft index passed in;
- two message fixes that keep acknowledged entries safe under pipelined load (`_guard_append_entries`,
  `_guard_next_index`);
- snapshots that copy the LMDB store off the loop thread (`SnapshotWriter`), handed to pysyncobj through its
  serializer/deserializer hooks only once complete;
- crash-stop (`RaftGroup.stop`): a group whose store, fsync or snapshot fails stops applying, voting and
  acknowledging instead of skipping an entry the other replicas applied; one stopped for lack of space reopens
  in place (`RaftGroup.reopen`); a leader on a full disk refuses writes with DISK_FULL.
"""
from __future__ import annotations

import functools
import logging
import os
import random
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

import pysyncobj.syncobj as raft_syncobj
from pysyncobj import SyncObj, SyncObjConf
from pysyncobj.config import FAIL_REASON
from pysyncobj.monotonic import monotonic as raft_monotonic
from pysyncobj.node import Node
from pysyncobj.transport import Transport

from raftbus.client import errors

from raftbus.broker.raft import entry_codec, reconfigure, snapshot_footer, transfer
from raftbus.broker.raft import configuration
from raftbus.broker.raft.throttle import CatchUpThrottle, snapshot_bytes
from raftbus.broker.raft.journal import JournalCorrupt, create_journal
from raftbus.broker.raft.latency import LatencyHistogram
from raftbus.broker.storage.base import is_disk_full

log = logging.getLogger(__name__)

_REGULAR_COMMAND = 0  # pysyncobj's _COMMAND_TYPE.REGULAR
_NO_OP_COMMAND = 1
_ROLES = {0: "follower", 1: "candidate", 2: "leader"}  # pysyncobj's _RAFT_STATE
_FOLLOWER, _LEADER = 0, 2


@dataclass(frozen=True)
class RaftSettings:
    """Timers and bounds of every Raft group (see config/defaults.toml for units and defaults)."""

    election_timeout_min_ms: int = 600
    election_timeout_max_ms: int = 1200
    # A follower whose connection to its leader's broker closes stands for election this long after, at random
    # between min and max, unless the leader is heard from again first (see RaftGroup.on_peer_lost).
    leader_lost_election_min_ms: int = 400
    leader_lost_election_max_ms: int = 600
    heartbeat_interval_ms: int = 150
    leader_fallback_timeout_ms: int = 3000
    command_bytes_max: int = 4 * 1024 * 1024
    commands_queue_max: int = 100_000
    log_compaction_bytes: int = 64 * 1024 * 1024
    log_compaction_entries: int = 20_000
    log_bytes_max: int = 256 * 1024 * 1024
    log_entries_max: int = 200_000
    snapshot_copy_ratio_max: int = 4
    isr_lag_time_ms: int = 10_000
    # Flow control of what a leader sends each peer (see transfer.py).
    snapshot_chunk_bytes: int = 1024 * 1024
    snapshot_chunks_in_flight_max: int = 8
    snapshot_ack_timeout_ms: int = 5000
    catch_up_bytes_in_flight_max: int = 8 * 1024 * 1024
    bulk_send_buffer_bytes_max: int = 64 * 1024 * 1024

    def syncobj_conf(self, data_dir: Path, serializer, deserializer, on_state_changed) -> SyncObjConf:
        return SyncObjConf(
            autoTick=False,
            appendEntriesUseBatch=False,
            # Larger than any command: pysyncobj's chunked path for bigger entries is broken.
            appendEntriesBatchSizeBytes=self.command_bytes_max + 64 * 1024,
            raftMinTimeout=self.election_timeout_min_ms / 1000,
            raftMaxTimeout=self.election_timeout_max_ms / 1000,
            appendEntriesPeriod=self.heartbeat_interval_ms / 1000,
            connectionTimeout=self.election_timeout_max_ms / 1000,
            leaderFallbackTimeout=self.leader_fallback_timeout_ms / 1000,
            commandsQueueSize=self.commands_queue_max,
            commandsWaitLeader=False,
            journalFile=str(data_dir / "raft.journal"),
            fullDumpFile=str(data_dir / "raft.snapshot"),
            serializer=serializer,
            deserializer=deserializer,
            # Compaction is driven by RaftGroup.maybe_compact (by bytes), never by pysyncobj's own timers.
            logCompactionMinEntries=2**62,
            logCompactionMinTime=2**40,
            onStateChanged=on_state_changed,
            pollerType="select",
        )


def error_for_fail_reason(reason: int, leader_id: int | None) -> errors.RaftbusError:
    if reason == FAIL_REASON.QUEUE_FULL:
        return errors.Overloaded("the group's command queue is full (raft_commands_queue_max)")
    if reason == FAIL_REASON.MISSING_LEADER:
        return errors.LeaderNotAvailable("no leader is elected right now")
    if reason in (FAIL_REASON.NOT_LEADER, FAIL_REASON.LEADER_CHANGED, FAIL_REASON.DISCARDED):
        return errors.NotLeader("leadership changed before the command committed", leader_id=leader_id)
    if reason == FAIL_REASON.UNKNOWN_OUTCOME:
        return errors.RequestTimedOut("the command's outcome is unknown; retry idempotently")
    return errors.InternalError(f"raft refused the command (reason {reason})")


def _install_pysyncobj_fixes() -> None:
    """Make pysyncobj use raftbus's journal (`AppendJournal`, durable term and vote) and, where it would pickle or
    unpickle (chunked transmissions, replicated calls, membership and version entries), raftbus's entry codec,
    which carries plain bytes and integers only: nothing a peer sends is ever unpickled."""
    raft_syncobj.createJournal = create_journal
    raft_syncobj.pickle = entry_codec


_install_pysyncobj_fixes()


def compaction_due(settings: RaftSettings, log_bytes: int, entries: int, store_bytes) -> bool:
    """Whether a group should snapshot now, after `log_bytes` in `entries` applied since its last snapshot.

    A snapshot copies the whole store, so it waits until that log is at least 1/snapshot_copy_ratio_max of the
    store (`store_bytes()`, asked only then): each written byte is copied at most that many times however large
    the partition grows. The log held in memory is bounded regardless (log_bytes_max, log_entries_max).
    """
    if log_bytes >= settings.log_bytes_max or entries >= settings.log_entries_max:
        return True
    if log_bytes < settings.log_compaction_bytes and entries < settings.log_compaction_entries:
        return False
    return store_bytes() <= settings.snapshot_copy_ratio_max * log_bytes


class GroupStopped(Exception):
    """Raised out of pysyncobj's apply loop when the group had to stop: pysyncobj then does not count the entry
    as applied, and the group never ticks again in this process."""


class GroupTransport(Transport):
    """pysyncobj's view of the broker's shared transport: one channel of the hub."""

    def __init__(self, hub, channel: str, peer_ids):
        super().__init__(None, None, None)
        self._hub = hub
        self.channel = channel
        self.nodes = {peer_id: Node(str(peer_id)) for peer_id in peer_ids}
        self.raft: SyncObj | None = None
        self.stopped = False  # a stopped group neither receives nor answers: to its peers it is down
        self.voters: frozenset | None = None  # votes from or to anyone else are dropped (configuration.py)
        self.votes_here = True  # whether this replica is a voter: a learner neither grants nor asks for votes
        self.learners: frozenset = frozenset()
        self.throttle: CatchUpThrottle | None = None  # bounds what is sent to learners
        self.throttled: set = set()  # learners held back until the next tick (see `resume_throttled`)

    def send(self, node, message):
        if self.stopped:
            return False
        if self.throttle is not None and int(node.id) in self.learners and not self._within_throttle(node, message):
            return False
        if message.get("type") == "next_node_idx":
            # Lets the leader tell a reply of this term from a stale one of an earlier term.
            message["term_tag"] = self.raft.raftCurrentTerm
        try:
            return self._hub.send(int(node.id), self.channel, message)
        except ValueError:
            log.error("%s: message to %s exceeds the frame limit; dropped", self.channel, node.id)
            return False

    def _within_throttle(self, node, message) -> bool:
        """Whether a message to a learner may leave, cut to what the catch-up budget allows: the entries beyond it
        are dropped from the message, and the learner gets nothing more this tick (pysyncobj's send loop stops at a
        node it believes disconnected); the rest is sent from the same index at a later tick."""
        if message.get("type") != "append_entries":
            return True
        pieces = snapshot_bytes(message)
        if pieces:
            self.throttle.charge(pieces)
            return True
        entries = message.get("entries") or ()
        granted = self.throttle.grant([len(entry[0]) for entry in entries]) if entries else 0
        if granted == len(entries):
            return True
        self.raft._SyncObj__raftNextIndex[node] = entries[granted][1]
        self.raft._SyncObj__connectedNodes.discard(node)
        self.throttled.add(node)
        message["entries"] = entries[:granted]  # sent by the caller when not empty
        return granted > 0

    def resume_throttled(self, connected) -> None:
        for node in self.throttled:
            if int(node.id) in connected and int(node.id) in self.nodes:
                self.raft._SyncObj__connectedNodes.add(node)
        self.throttled.clear()

    def peer_connected(self, peer_id: int) -> None:
        node = self.nodes.get(peer_id)
        if node is not None:
            self._onNodeConnected(node)

    def peer_disconnected(self, peer_id: int) -> None:
        node = self.nodes.get(peer_id)
        if node is not None:
            self._onNodeDisconnected(node)

    def deliver(self, peer_id: int, message) -> None:
        node = self.nodes.get(peer_id)
        if node is None or not isinstance(message, dict) or self.stopped:
            return
        kind = message.get("type")
        if kind in ("request_vote", "response_vote") and self.voters is not None and \
                (peer_id not in self.voters or not self.votes_here):
            # Only voters elect: a learner's (or a removed replica's) request must not disrupt the voters' terms,
            # and pysyncobj counts every response_vote it receives, so a learner's vote would make a false majority.
            return
        try:
            if kind == "append_entries":
                _guard_append_entries(self.raft, message)
                self._onMessageReceived(node, message)
            elif kind == "next_node_idx":
                _guard_next_index(self.raft, node, message, self._onMessageReceived)
                self.raft.replication.on_reply(node)
            elif kind in transfer.MESSAGE_TYPES:
                self.raft.replication.receive(node, message)
            else:
                self._onMessageReceived(node, message)
        except entry_codec.EntryCodecError as exc:
            log.warning("%s: refused a message from node %s: %s", self.channel, peer_id, exc)

    def receive(self, peer_id: int, message, on_fault) -> None:
        """`deliver`, with a fault of the group's own disk (a journal write that failed) handed to `on_fault`
        instead of the hub: the message is then not acknowledged, and the leader sends it again."""
        try:
            self.deliver(peer_id, message)
        except (OSError, GroupStopped) as exc:
            on_fault(exc)


def _guard_append_entries(raft: SyncObj, message: dict) -> None:
    """Keep a follower from dropping entries it already holds when nothing conflicts.

    pysyncobj truncates everything after `prevLogIdx` whenever the follower's log is longer, even when the
    entries match. Under pipelining the leader re-sends from an older index, so a follower could drop entries
    the leader already counted as replicated (acknowledged) — and lose them if the leader then dies. Raft only
    truncates on a term conflict, so: entries the follower already holds with the same term are removed from
    the message and `prevLogIdx` moves past them. A follower reply built on the rewritten message is truthful:
    it only claims entries it holds that carry the leader's term, and all such entries came from this leader.
    """
    prev_idx = message.get("prevLogIdx")
    if prev_idx is None or "transmission" in message or message.get("serialized") is not None:
        return
    journal = raft._SyncObj__raftLog
    first_idx = journal[0][1]
    last_idx = journal[-1][1]
    if last_idx <= prev_idx or prev_idx < first_idx:
        return
    if journal[prev_idx - first_idx][2] != message["prevLogTerm"]:
        return
    entries = message.get("entries") or []
    term = message["term"]
    overlap = [e for e in entries if e[1] <= last_idx]
    for entry in overlap:
        if journal[entry[1] - first_idx][2] != entry[2]:
            return  # a real conflict: let pysyncobj truncate and replace
    new_entries = entries[len(overlap):]
    if new_entries or journal[last_idx - first_idx][2] == term:
        # Everything up to last_idx is verified (by the overlap, or because entries of the leader's own
        # term can only have come from this leader after a consistency check).
        message["prevLogIdx"] = last_idx
        message["prevLogTerm"] = journal[last_idx - first_idx][2]
        message["entries"] = new_entries
        return
    # The follower's extra entries are of an older term and cannot be claimed; claim only what the message
    # proved. pysyncobj then drops that unverified suffix, which the leader re-sends.
    covered = entries[-1][1] if entries else prev_idx
    message["prevLogIdx"] = covered
    message["prevLogTerm"] = journal[covered - first_idx][2]
    message["entries"] = []


def _guard_next_index(raft: SyncObj, node: Node, message: dict, deliver) -> None:
    """Drop replies from an earlier term and keep pipelined replies from moving `nextIndex` backwards.

    pysyncobj sets nextIndex from every successful reply, so the reply to entry n arriving after n+1 and n+2
    were sent makes the leader re-send them (and the follower truncate them). Raft's optimistic nextIndex only
    moves back on a rejection.
    """
    if message.get("term_tag", raft.raftCurrentTerm) != raft.raftCurrentTerm:
        return
    next_index = raft._SyncObj__raftNextIndex
    before = next_index.get(node)
    deliver(node, message)
    after = next_index.get(node)
    if message.get("success") and not message.get("reset") and before is not None and after is not None:
        if after < before:
            next_index[node] = before


class _NoSockets:
    """pysyncobj's poller for a group whose transport is the broker's hub: there are no sockets of its own, so
    every tick's poll is nothing. (The stock select poller made one syscall per group per tick: a third of an
    idle broker's loop with 100 partitions.)"""

    def poll(self, timeout) -> None:
        pass

    def subscribe(self, descr, callback, eventMask) -> None:
        raise RuntimeError("raftbus groups have no sockets of their own")

    def unsubscribe(self, descr) -> None:
        pass


class _LoopNotifier:
    """pysyncobj wakes its own tick thread through a pipe on every submitted command (one write syscall each, and
    the pipe is drained only by the poller raftbus does not use); the broker's loop is woken by `RaftGroup.submit`
    (`RaftLoop.mark_dirty`) instead, so this notifier does nothing."""

    def notify(self) -> None:
        pass


@functools.cache
def _replicated_methods(cls) -> list[str]:
    """The names pysyncobj's scans of `dir(self)` keep: callables marked @replicated (a property of the class)."""
    return [name for name in dir(cls) if callable(getattr(cls, name, None))
            and getattr(getattr(cls, name), "replicated", False)]


class _Raft(SyncObj):
    """pysyncobj with raftbus's entries: REGULAR entries carry a command's bytes, applied by the owner."""

    def __init__(self, owner: "RaftGroup", self_node, other_nodes, conf, transport):
        self._owner = owner
        self._appending = self._append_pending = False
        self.replication = transfer.Replication(self, owner.group_id, owner.settings, owner._hub, owner._self_id,
                                                owner.data_dir)
        super().__init__(self_node, other_nodes, conf=conf, transport=transport)
        self.replication.attach()
        self._poller = _NoSockets()
        pipe = getattr(self, "_SyncObj__pipeNotifier", None)
        if pipe is not None:
            for fd in (pipe._PipeNotifier__pipeR, pipe._PipeNotifier__pipeW):
                os.close(fd)
            self._SyncObj__pipeNotifier = _LoopNotifier()

    def __dir__(self):
        """Only the @replicated methods, which `_Raft` has none of: pysyncobj lists `dir(self)` twice while it
        constructs a group and calls getattr on each of ~100 attributes to find them. Opening 500 replicas in one
        process (LMDB store, journal, group) took 3.9–4.6 ms of CPU each with this and 4.5–5.1 ms without, four
        alternated runs each on the 2-core development machine."""
        return _replicated_methods(type(self))

    def submit(self, command: bytes, callback) -> None:
        self._applyCommand(command, callback, _REGULAR_COMMAND)

    def _SyncObj__sendAppendEntries(self):
        """pysyncobj's, with flow control per group and peer (transfer.py); while the commands queued since the
        last tick are being appended, one send after the last of them."""
        if self._appending:
            self._append_pending = True
            return
        self.replication.send_append_entries()

    def _checkCommandsToApply(self):
        """pysyncobj's, which sends every follower an append after each command it takes from the queue: n
        commands submitted between two ticks went out as n messages per follower. They go out as one now (as far
        as flow control lets one message carry them). Most ticks find the queue empty: those return at once
        (pysyncobj's takes the queue's lock and raises and catches Empty to find that out)."""
        if not self._SyncObj__commandsQueue._FastQueue__queue:
            return
        self._appending = True
        try:
            SyncObj._checkCommandsToApply(self)
        finally:
            self._appending = False
        if self._append_pending:
            self._append_pending = False
            self.replication.send_append_entries()

    def _SyncObj__applyLogEntries(self) -> bool:
        """pysyncobj's; whether the leader should send its followers the new commit index at once.

        pysyncobj (with `appendEntriesUseBatch` off) sends every follower an append after every apply, only to
        carry the new commit index: at light load that is one more message and one more answer per follower per
        command, half of what a partition's Raft traffic costs. Only the leader's commit decides an
        acknowledgement, so a group with `eager_commit_notify` off lets its followers learn the commit index
        from the next append or heartbeat (`raft_heartbeat_interval_ms` at most when nothing else comes). The
        metadata group stays eager: every broker answers metadata reads from its own replica."""
        applied = SyncObj._SyncObj__applyLogEntries(self)
        return applied and self._owner.eager_commit_notify

    def destroy(self):
        self.replication.close()
        super().destroy()

    def _SyncObj__doApplyCommand(self, entry: bytes):
        """Apply one committed entry (replaces pysyncobj's, which unpickles it). Every replica decides the same
        from the same bytes: a REGULAR entry goes to the state machine, anything else is a no-op (raftbus groups
        write no membership or version entries; a peer that forges one changes nothing)."""
        kind = entry[0] if entry else None
        if kind == _REGULAR_COMMAND:
            return self._owner._apply_committed(entry[1:])
        if kind == configuration.ENTRY_TYPE:
            return self._owner._apply_membership(entry)
        if kind != _NO_OP_COMMAND:
            log.warning("%s: ignored a committed entry of type %s", self._owner.group_id, kind)
        return None


class SnapshotWriter:
    """Copies a pinned store view to `snapshot.ready` on a thread of its own."""

    def __init__(self, data_dir: Path):
        self.partial = data_dir / "snapshot.partial"
        self.ready = data_dir / "snapshot.ready"
        self._thread: threading.Thread | None = None
        self.ready_index: int | None = None
        self.failed = False
        for stale in (self.partial, self.ready):
            stale.unlink(missing_ok=True)

    @property
    def busy(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self, pinned, index: int) -> None:
        self.ready_index = None
        self.failed = False

        def run():
            try:
                with open(self.partial, "wb") as f:
                    pinned.write_to(f)
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(self.partial, self.ready)
                self.ready_index = index
            except Exception:
                log.exception("snapshot copy failed")
                self.failed = True
            finally:
                pinned.close()

        self._thread = threading.Thread(target=run, name="raftbus-snapshot", daemon=True)
        self._thread.start()


class _LimitedReader:
    def __init__(self, f, length: int):
        self._f, self._left = f, length

    def read(self, n: int = -1) -> bytes:
        if self._left <= 0:
            return b""
        n = self._left if n is None or n < 0 else min(n, self._left)
        data = self._f.read(n)
        self._left -= len(data)
        return data

    def readinto(self, buf) -> int:
        data = self.read(len(buf))
        buf[: len(data)] = data
        return len(data)


def _decode_journal_command(entry_command: bytes) -> bytes | None:
    if not entry_command or entry_command[0] != _REGULAR_COMMAND:
        return None
    return entry_command[1:]


class RaftGroup:
    """A replicated state machine on the broker's shared loop and transport (the production `Replica`)."""

    def __init__(self, group_id: str, state_machine, store, *, hub, loop, self_id: int, peer_ids,
                 data_dir: Path, settings: RaftSettings, preferred_leader: int | None = None, learner_ids=(),
                 eager_commit_notify: bool = False, journal_budget=None):
        self.group_id = group_id
        self._journal_budget = journal_budget  # broker/storage/open_files.py: idle journals may close their file
        self.eager_commit_notify = eager_commit_notify  # see _Raft._SyncObj__applyLogEntries
        self.state_machine = state_machine
        self.store = store
        self.settings = settings
        self.preferred_leader = preferred_leader
        self.data_dir = Path(data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._loop = loop
        self._snapshot = SnapshotWriter(self.data_dir)
        self._bytes_since_compaction = 0
        self._entries_since_compaction = 0
        self.leader_changes = 0
        self.role = "follower"
        self.commit_latency = LatencyHistogram()  # submit → committed and applied here (leader)
        self.fsync_latency = LatencyHistogram()   # one group-commit sync of this group
        self._handing_over: tuple[int | None, float] | None = None  # (target, until) while stepping aside
        self.stopped: str | None = None  # why the group stopped applying (a storage failure), None while healthy
        self.stopped_disk_full = False   # it stopped because its disk was full (the broker may reopen it)
        self.journal_disk_full = False   # the last journal write failed for lack of space
        self._pending: set[Future] = set()  # submitted commands not answered yet
        self.disk = None  # the broker's DiskSpace: while it is full, a leader takes no new commands
        # While this broker leads the group quiesced: the brokers it hears from (quiesce.py); its followers send
        # nothing then, and hold the whole log, so they are in sync while their broker is live.
        self.quiesced_live_peers = None
        self._hub, self._self_id = hub, self_id
        learners = {int(n) for n in learner_ids}
        # The configuration the group starts from; its own configuration entries (and snapshots) replace it.
        self.membership = configuration.Membership.of(({self_id} | {int(p) for p in peer_ids}) - learners, learners)
        self._membership_proposal: Future | None = None
        self._leader_lost: int | None = None  # the leader's broker whose connection closed (on_peer_lost)
        self._start_raft()

    def _start_raft(self) -> None:
        members = self.membership
        self.transport = GroupTransport(self._hub, self.group_id, sorted(members.members - {self._self_id}))
        conf = self.settings.syncobj_conf(self.data_dir, self._serialize, self._deserialize, self._on_state_changed)
        voters = [node for peer_id, node in self.transport.nodes.items() if peer_id in members.voters]
        self.raft = _Raft(self, Node(str(self._self_id)), voters, conf, self.transport)
        self.transport.raft = self.raft
        self._install_membership(configuration.Membership(members.voters, frozenset(), members.index), members)
        journal = self.raft._SyncObj__raftLog
        if self._journal_budget is not None and hasattr(journal, "attach_budget"):
            journal.attach_budget(self._journal_budget)
        first_index = journal[0][1] if len(journal) else 1
        if first_index > 1 and not (self.data_dir / "raft.snapshot").exists():
            self.raft.destroy()
            raise JournalCorrupt(f"{self.group_id}: the journal starts at index {first_index} and no snapshot covers "
                                 "the entries before it; remove the group's directory to rebuild it from the leader")

    def reopen(self) -> None:
        """Start a group that stopped for lack of space again, in place, from its journal (loop thread). Its store
        holds exactly what was applied — a failed apply commits nothing — and the state machine reloads from it;
        entries after it are replayed from the journal or sent by the leader."""
        try:
            self.raft.destroy()
        except OSError as exc:
            log.warning("closing the stopped group %s: %s", self.group_id, exc)
        reload = getattr(self.state_machine, "reload", None)
        if reload is not None:
            reload()
        self._snapshot = SnapshotWriter(self.data_dir)
        self._start_raft()
        self.stopped, self.stopped_disk_full, self.journal_disk_full = None, False, False
        for peer_id in self._hub.connected_peers():
            self.transport.peer_connected(peer_id)
        self._loop.mark_dirty(self.group_id)
        log.warning("raft group %s reopened", self.group_id, extra={"group": self.group_id})

    # ------------------------------------------------------------------ membership (configuration.py)
    def _install_membership(self, old: configuration.Membership, new: configuration.Membership) -> None:
        reconfigure.install(self.raft, self.transport, self._self_id, old, new, self._hub.connected_peers())
        self.membership = new
        self.transport.voters = new.voters
        self.transport.votes_here = self._self_id in new.voters
        self.transport.learners = new.learners

    def _apply_membership(self, entry: bytes):
        """Apply a committed configuration entry: install it if it was derived from the configuration held here
        (every replica holds the same one at this index), else refuse it as a concurrent proposal."""
        index = self.raft.raftLastApplied + 1
        if self.stopped is not None:
            raise GroupStopped(self.stopped)
        try:
            based_on, voters, learners = configuration.decode_change(entry)
        except configuration.ConfigurationCodecError as exc:
            log.warning("%s: ignored configuration entry %s: %s", self.group_id, index, exc)
            return errors.InvalidArgument(str(exc))
        if based_on != self.membership.index:
            return errors.MembershipChangeInProgress(
                f"configuration entry {index} was derived from configuration {based_on}, not {self.membership.index}")
        installed = configuration.Membership(voters, learners, index)
        self._install_membership(self.membership, installed)
        log.info("raft group membership changed", extra={"group": self.group_id, **installed.to_dict()})
        self._loop.on_applied(self)
        return installed

    def propose_membership(self, step) -> Future:
        """Propose the configuration `step(current)` (loop thread): one voter or learner added, promoted or removed.

        Refused with MembershipChangeInProgress while a previous change is not applied (or this leader has not yet
        applied an entry of its own term), NotLeader on a follower, and with the typed error `step` raises for a
        change that makes no sense (an unknown member, the last voter). The future resolves with the installed
        `Membership` once it is committed and applied here."""
        future: Future = Future()
        try:
            entry = self._membership_entry(step)
        except errors.RaftbusError as exc:
            future.set_exception(exc)
            return future

        def done(result, reason):
            if reason != FAIL_REASON.SUCCESS:
                future.set_exception(error_for_fail_reason(reason, self.leader_id))
            elif isinstance(result, errors.RaftbusError):
                future.set_exception(result)
            else:
                future.set_result(result)

        self._membership_proposal = future
        self.raft._applyCommand(entry, done)
        self._loop.mark_dirty(self.group_id)
        return future

    def _membership_entry(self, step) -> bytes:
        if self.stopped is not None:
            raise self._stopped_error()
        if not self.is_leader:
            raise errors.NotLeader(f"only the leader of {self.group_id} changes its membership",
                                   leader_id=self.leader_id)
        pending = self._membership_proposal is not None and not self._membership_proposal.done()
        if pending or not reconfigure.own_term_applied(self.raft) or \
                reconfigure.config_entry_pending(self.raft, configuration.is_change):
            raise errors.MembershipChangeInProgress(f"{self.group_id}: the previous membership change is not applied")
        current = self.membership
        target = step(current)
        if self._self_id not in target.voters:
            raise errors.InvalidReplicas(f"the leader of {self.group_id} cannot remove itself; move leadership first")
        return configuration.encode_change(target, current.index)

    def learner_progress(self) -> dict[int, int]:
        """Leader only: how many committed entries each member other than the leader still lacks."""
        if not self.is_leader:
            return {}
        commit = self.raft.raftCommitIndex
        peers = self.membership.members - {self._self_id}
        held = reconfigure.replication_progress(self.raft, peers)
        return {peer: max(0, commit - index) for peer, index in held.items()}

    def set_catch_up_throttle(self, bytes_per_s: int) -> None:
        """Bound what this group sends to its learners (bytes/s, 0 = unlimited); loop thread."""
        self.transport.throttle = CatchUpThrottle(bytes_per_s) if bytes_per_s else None

    # ------------------------------------------------------------------ seam
    def submit(self, command: bytes) -> Future:
        future: Future = Future()
        if len(command) > self.settings.command_bytes_max:
            future.set_exception(errors.BatchTooLarge(
                f"command of {len(command)} bytes exceeds raft_command_bytes_max={self.settings.command_bytes_max}"))
            return future

        handing_over = self._handing_over
        if handing_over is not None and raft_monotonic() < handing_over[1] and self.is_leader:
            future.set_exception(errors.LeaderNotAvailable(
                f"leadership is being handed over to broker {handing_over[0]}", leader_id=handing_over[0]))
            return future

        if self.stopped is not None:
            future.set_exception(self._stopped_error())
            return future
        disk = self.disk
        if disk is not None and disk.full and self.is_leader:
            future.set_exception(errors.DiskFull(
                f"{disk.free_bytes} bytes free under the data directory of the leader of {self.group_id} "
                f"(storage_free_bytes_min={disk.free_bytes_min}); leadership is being handed to a replica with room"))
            return future
        submitted = time.monotonic()

        def done(result, reason):
            self._pending.discard(future)
            if future.done():
                return
            if reason == FAIL_REASON.SUCCESS:
                self.commit_latency.observe(time.monotonic() - submitted)
                future.set_result(result)
            else:
                future.set_exception(error_for_fail_reason(reason, self.leader_id))

        self._pending.add(future)
        self.raft.submit(command, done)
        self._loop.mark_dirty(self.group_id)
        return future

    @property
    def is_leader(self) -> bool:
        return self.stopped is None and self.raft._isLeader()

    @property
    def caught_up_as_leader(self) -> bool:
        """Leads, and has applied the no-op of its own election, so every entry its predecessors committed too: what
        it answers from its state includes all of them. (A follower may learn the commit index only from the next
        append, so a new leader can hold committed entries it has not applied yet.)"""
        raft = self.raft
        noop = raft._SyncObj__noopIDx
        return self.is_leader and noop is not None and raft.raftLastApplied >= noop

    @property
    def leader_id(self) -> int | None:
        if self.stopped is not None:
            return None
        leader = self.raft._getLeader()
        return int(leader.id) if leader is not None else None

    def _stopped_error(self) -> errors.RaftbusError:
        return errors.Unavailable(f"the replica of {self.group_id} on this broker stopped: {self.stopped}")

    def stop(self, reason: str, *, disk_full: bool = False) -> None:
        """Crash-stop this group (any thread): it never applies, votes, acknowledges or ticks again in this
        process. A replica that cannot apply a committed entry must not skip it (the others applied it), and
        after a failed fsync the page cache may have dropped what it was asked to write (so nothing written
        since can be trusted). On restart it recovers from its journal, or from the leader's snapshot."""
        if self.stopped is not None:
            return
        self.stopped = reason
        self.stopped_disk_full = disk_full
        self.transport.stopped = True
        log.critical("raft group %s stopped: %s; it stays stopped until it is reopened", self.group_id, reason,
                     extra={"group": self.group_id, "disk_full": disk_full})
        for future in list(self._pending):
            self._pending.discard(future)
            try:
                future.set_exception(errors.RequestTimedOut(
                    f"the outcome is unknown: the replica of {self.group_id} stopped ({reason}); retry idempotently"))
            except Exception:  # answered meanwhile
                pass
        self._loop.on_group_stopped(self)

    @property
    def term(self) -> int:
        return self.raft.raftCurrentTerm

    # ------------------------------------------------------------------ loop thread
    def tick(self) -> None:
        if self.stopped is not None:
            return
        if self._self_id not in self.membership.voters:
            reconfigure.hold_election(self.raft, self.settings.election_timeout_max_ms / 1000)
        if self.transport.throttled:
            self.transport.resume_throttled(self._hub.connected_peers())
        raft = self.raft
        try:
            raft.doTick(0.0)
            if not raft._SyncObj__otherNodes and raft._SyncObj__raftState == _LEADER and \
                    raft.raftCommitIndex < raft._SyncObj__raftLog[-1][1]:
                # The only voter: pysyncobj appends the tick's new commands after it counted the commit index, and
                # no follower's answer will tick the group again; the loop's next pass commits them.
                self._loop.mark_dirty(self.group_id)
            if self.journal_disk_full and not (self.disk is not None and self.disk.full):
                self.journal_disk_full = False
        except GroupStopped:
            pass
        except OSError as exc:
            self.on_disk_fault(exc)

    def _out_of_space(self, exc: BaseException) -> bool:
        """Whether a failed write was for lack of space: ENOSPC, or an I/O error while the disk is full (LMDB
        reports a short write at a full disk as EIO)."""
        if is_disk_full(exc):
            return True
        disk = self.disk
        if disk is None:
            return False
        disk.check()
        return disk.full

    def on_disk_fault(self, exc: BaseException) -> None:
        """A journal write (or another file operation of pysyncobj) failed. Lack of space is a state: the entry
        is not in the log, is not acknowledged, and is written again once there is room. Any other I/O error
        stops the group."""
        if isinstance(exc, GroupStopped):
            return
        if self._out_of_space(exc):
            if not self.journal_disk_full:
                log.error("journal write of %s failed: no space left", self.group_id, extra={"group": self.group_id})
            self.journal_disk_full = True
            return
        self.stop(f"journal I/O failed: {type(exc).__name__}: {exc}")

    def in_sync_replicas(self, self_id: int) -> list[int]:
        """Replicas that acknowledged recently and hold nearly all committed entries (leader only)."""
        now_monotonic = raft_monotonic()  # pysyncobj's clock (CLOCK_MONOTONIC_RAW), which stamps the responses
        if not self.is_leader:
            return []
        if self.quiesced_live_peers is not None:
            live = self.quiesced_live_peers()
            return sorted([self_id, *(p for p in self.membership.voters if p != self_id and p in live)])
        match = self.raft._SyncObj__raftMatchIndex
        last_response = self.raft._SyncObj__lastResponseTime
        commit = self.raft.raftCommitIndex
        lag_s = self.settings.isr_lag_time_ms / 1000
        isr = [self_id]
        voters = self.membership.voters
        for node, index in match.items():
            if int(node.id) not in voters:
                continue  # a learner is not in sync: it does not count for the commit
            fresh = now_monotonic - last_response.get(node, 0) <= lag_s
            if fresh and index >= commit - 1 and self.raft.isNodeConnected(node):
                isr.append(int(node.id))
        return sorted(isr)

    def maybe_transfer_to_preferred(self) -> None:
        """Hand leadership to the preferred replica when it is connected and fully caught up (loop thread)."""
        target = self.preferred_leader
        if target is None or not self.is_leader or target not in self.membership.voters or target == self._self_id:
            return
        self.hand_over(target)

    def hand_over(self, target: int | None = None) -> None:
        """Raft's leadership transfer, done as the paper says: stop taking new commands (LEADER_NOT_AVAILABLE, so
        clients back off briefly and look again) for up to one election timeout, and send TimeoutNow only once every command
        submitted so far is in the log and the target holds all of it. pysyncobj alone keeps appending: the
        target then stood with a shorter log than its peers, lost, and the partition had no leader until an
        election timeout passed (~1 s of unavailability per hand-over under writes)."""
        if not self.is_leader or self.raft._SyncObj__commandsQueue._FastQueue__queue:
            return  # commands still to append: try again at the next check
        node = self.transport.nodes.get(target) if target is not None else None
        if node is not None and node not in self.raft._SyncObj__connectedNodes:
            return  # its broker is gone (its last match index may still look caught up): TimeoutNow would be lost
        self._handing_over = (target, raft_monotonic() + self.settings.election_timeout_max_ms / 1000)

        def sent(_result, reason) -> None:
            if reason != FAIL_REASON.SUCCESS:
                self._handing_over = None  # denied (target not caught up): keep leading, try at the next check

        self.raft.transferLeadership(node, callback=sent)

    @property
    def log_bytes(self) -> int:
        """Bytes of Raft log this group holds in memory (its journal's entries)."""
        journal = self.raft._SyncObj__raftLog
        return getattr(journal, "size_bytes", 0)

    def maybe_compact(self, force: bool = False) -> None:
        """Start a snapshot copy once enough log has accumulated (or at once with `force`, when the broker's
        logs together pass their memory budget); hand it to pysyncobj once complete."""
        snapshot = self._snapshot
        if snapshot.busy or self.stopped is not None:
            return
        if snapshot.ready_index is not None:
            self.raft.forceLogCompaction()
            return
        if not force and not compaction_due(self.settings, self._bytes_since_compaction,
                                            self._entries_since_compaction, self.store.size_bytes):
            return
        self._bytes_since_compaction = 0
        self._entries_since_compaction = 0
        snapshot.start(self.store.snapshot(), self.raft.raftLastApplied)

    def sync(self) -> None:
        """Make everything applied and journaled so far durable: the store first, then the Raft journal (so the
        durable journal always covers the durable applied index). Called by the group commit thread; a failure
        raises, and the group commit then stops the group."""
        if self.stopped is not None:
            return
        started = time.monotonic()
        self.store.sync()
        journal = self.raft._SyncObj__raftLog
        point = journal.sync_point() if hasattr(journal, "sync_point") else None
        try:
            fd = os.open(self.data_dir / "raft.journal", os.O_RDONLY)
        except FileNotFoundError:
            return
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        if point is not None:
            journal.mark_synced(point)  # tells a torn tail from a damaged record on the next open
        self.fsync_latency.observe(time.monotonic() - started)

    def close(self) -> None:
        self.raft.destroy()

    # ------------------------------------------------------------------ pysyncobj hooks
    def _apply_committed(self, command: bytes):
        index = self.raft.raftLastApplied + 1
        if self.stopped is not None:
            raise GroupStopped(self.stopped)
        try:
            result = self.state_machine.apply(index, command)
        except Exception as exc:  # typed answers are returned; this is the store failing
            self.stop(f"applying entry {index} failed: {type(exc).__name__}: {exc}", disk_full=self._out_of_space(exc))
            raise GroupStopped(self.stopped) from exc  # pysyncobj must not count the entry as applied
        self._bytes_since_compaction += len(command)
        self._entries_since_compaction += 1
        self._loop.on_applied(self)
        return result

    def _on_state_changed(self, old_state, new_state) -> None:
        if old_state == _LEADER and new_state == _FOLLOWER:
            self._restart_election_timer()
        # A hand-over belongs to the leadership it was started in: a replica that leads again later (the target
        # was killed and this one was elected) takes commands at once, not after the old hand-over's window.
        self._handing_over = None
        self.leader_changes += 1
        self.role = _ROLES.get(new_state, str(new_state))
        log.info("raft role changed", extra={"group": self.group_id, "from": _ROLES.get(old_state, old_state),
                                             "to": _ROLES.get(new_state, new_state), "term": self.term})
        self._loop.on_leadership_changed(self)

    # ------------------------------------------------------------------ leader connection (loop thread)
    def on_peer_lost(self, peer_id: int) -> None:
        """The broker's connection to `peer_id` closed. If that broker leads this group, a voting follower brings
        its election forward to `leader_lost_election_min_ms`..`max_ms` from now (when that is sooner than its
        deadline): a killed or crashed broker's connections close at once, so the group need not wait out a whole
        election timeout counted from the last heartbeat. A live leader's connection is dialed again within
        `raft_connect_retry_ms`, and its next append or heartbeat restarts the timer before then (as does
        `on_peer_back`). Timing only: whoever stands still needs a majority's votes, as Raft has it.
        A leader handing over to `peer_id` ends the hand-over and takes commands again."""
        handing_over = self._handing_over
        if handing_over is not None and handing_over[0] == peer_id:
            self._handing_over = None  # the target's broker is gone: keep leading (if it stands, its term wins)
        raft = self.raft
        if self.stopped is not None or not self.transport.votes_here or raft._SyncObj__raftState != _FOLLOWER:
            return
        node = self.transport.nodes.get(peer_id)
        if node is None or raft._SyncObj__raftLeader != node:
            return
        settings = self.settings
        deadline = raft_monotonic() + random.uniform(settings.leader_lost_election_min_ms,
                                                     settings.leader_lost_election_max_ms) / 1000
        if deadline < raft._SyncObj__raftElectionDeadline:
            raft._SyncObj__raftElectionDeadline = deadline
            self._leader_lost = peer_id

    def on_peer_back(self, peer_id: int) -> None:
        """The connection to `peer_id` is up again: an election brought forward because it closed goes back to a
        whole election timeout from now (the leader is alive; its heartbeats resume)."""
        if self._leader_lost != peer_id:
            return
        self._leader_lost = None
        raft = self.raft
        if self.stopped is None and raft._SyncObj__raftState == _FOLLOWER and \
                raft._SyncObj__raftLeader == self.transport.nodes.get(peer_id):
            self._restart_election_timer()

    def _restart_election_timer(self) -> None:
        """A leader that steps down starts a fresh election timeout, as Raft has it.

        pysyncobj leaves a former leader with the deadline it had before it was elected, long past, so the moment
        a higher term reaches it (a leadership hand-over's vote request) it stands for election at once. Under
        writes its log is a little longer than the new candidate's, so it refused that vote, won its own
        election, and every hand-over to the preferred replica failed and was tried again 5 s later.
        """
        raft = self.raft
        raft._SyncObj__raftElectionDeadline = raft_monotonic() + raft._SyncObj__generateRaftTimeout()

    def _serialize(self, tmp_file: str, data) -> None:
        """pysyncobj's serializer: turn the completed copy into the snapshot file (fast, no data copy)."""
        last_entry, prev_entry, cluster = data
        data_index = self._snapshot.ready_index
        if data_index is None or not self._snapshot.ready.exists():
            raise RuntimeError("no completed snapshot copy to hand over")
        journal = self.raft._SyncObj__raftLog
        first_idx = journal[0][1]
        tail = journal[data_index + 1 - first_idx: last_entry[1] + 1 - first_idx]
        data_len = self._snapshot.ready.stat().st_size
        os.replace(self._snapshot.ready, tmp_file)
        self._snapshot.ready_index = None
        footer = {
            "last": tuple(last_entry),
            "prev": tuple(prev_entry),
            "cluster": sorted(str(node.id) for node in cluster),
            "data_len": data_len,
            "data_index": data_index,
            "entries": [(bytes(entry[0]), entry[1]) for entry in tail],
            "membership": (self.membership.index, sorted(self.membership.voters), sorted(self.membership.learners)),
        }
        with open(tmp_file, "ab") as f:
            snapshot_footer.write_footer(f, footer)
            f.flush()
            os.fsync(f.fileno())

    def _deserialize(self, file_name: str):
        """pysyncobj's deserializer: restore the store if ours is older, replay the entries after the copy.

        pysyncobj logs a failed load and carries on, voting and acknowledging with a state machine frozen
        before the snapshot; so a snapshot that cannot be loaded stops the group instead (fail closed)."""
        try:
            return self._load_snapshot(file_name)
        except GroupStopped:
            raise
        except Exception as exc:
            self.stop(f"snapshot {file_name} failed to load: {type(exc).__name__}: {exc}",
                      disk_full=self._out_of_space(exc))
            raise GroupStopped(self.stopped) from exc

    def _load_snapshot(self, file_name: str):
        with open(file_name, "rb") as f:
            footer = snapshot_footer.read_footer(f)
            if self.state_machine.applied_index() < footer["data_index"]:
                f.seek(0)
                self.store.restore(_LimitedReader(f, footer["data_len"]))
                reload = getattr(self.state_machine, "reload", None)
                if reload is not None:
                    reload()
        for entry_command, index in footer["entries"]:
            command = _decode_journal_command(entry_command)
            if command is not None:
                self.state_machine.apply(index, command)  # a typed refusal is an answer; a failure raises
        saved = footer.get("membership")
        if saved is not None and saved[0] >= self.membership.index:
            index, voters, learners = saved
            self._install_membership(self.membership, configuration.Membership.of(voters, learners, index))
        return footer["last"], footer["prev"], tuple(footer["cluster"])
