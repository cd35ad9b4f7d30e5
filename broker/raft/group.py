"""One Raft group per replicated state machine, driven by the broker's loop over its one transport.

A `RaftGroup` joins the pieces of one replica: its Raft core (`broker/raft/pysyncobj`), its journal, its channel of
the hub (`GroupTransport`), what its leader sends (`transfer.Replication`), its configuration (`configuration`,
`reconfigure`) and its snapshots (`snapshots`). Beyond them it adds:
- the state machine is reached through one kind of entry, a regular entry whose payload is the command's own
  bytes, with the Raft index passed in;
- snapshots copy the LMDB store off the loop thread (`SnapshotWriter`), handed to the core's serializer and
  deserializer hooks only once complete;
- crash-stop (`RaftGroup.stop`): a group whose store, fsync or snapshot fails stops applying, voting and
  acknowledging instead of skipping an entry the other replicas applied; one stopped for lack of space reopens
  in place (`RaftGroup.reopen`); a leader on a full disk refuses writes with DISK_FULL;
- Raft's leadership transfer done as the paper describes it (`hand_over`), and an earlier election when the
  leader's broker connection closes (`on_peer_lost`).
"""
from __future__ import annotations

import logging
import os
import random
from concurrent.futures import Future
from pathlib import Path

from raftbus.client import errors

from raftbus.broker.raft import configuration, reconfigure, retire, snapshot_footer
from raftbus.broker.raft.group_transport import GroupStopped, GroupTransport
from raftbus.broker.raft.journal import AppendJournal, JournalCorrupt
from raftbus.broker.raft.latency import LatencyHistogram
from raftbus.broker.raft.pysyncobj import Outcome, RaftNode, RaftOptions, Role
from raftbus.broker.raft.settings import RaftSettings
from raftbus.broker.raft.snapshots import (SNAPSHOT_FILE, LimitedReader, SnapshotWriter, compaction_due,
                                          journal_command)
from raftbus.broker.raft.throttle import CatchUpThrottle
from raftbus.broker.raft.transfer import Replication
from raftbus.broker.storage.base import is_disk_full
from raftbus.broker.storage.private import private_dir

__all__ = ["RaftGroup", "RaftSettings", "GroupStopped", "compaction_due", "error_for_outcome"]

log = logging.getLogger(__name__)

_LEADER = Role.LEADER


def raft_options(settings: RaftSettings, data_dir: Path, eager_commit_notify: bool) -> RaftOptions:
    return RaftOptions(
        election_timeout_min_s=settings.election_timeout_min_ms / 1000,
        election_timeout_max_s=settings.election_timeout_max_ms / 1000,
        heartbeat_interval_s=settings.heartbeat_interval_ms / 1000,
        leader_fallback_timeout_s=settings.leader_fallback_timeout_ms / 1000,
        commands_queue_max=settings.commands_queue_max,
        reads_waiting_max=settings.reads_waiting_max,
        # Larger than any command (the API refuses bigger ones): every entry travels whole.
        message_bytes_max=settings.command_bytes_max + 64 * 1024,
        snapshot_path=str(data_dir / SNAPSHOT_FILE),
        eager_commit_notify=eager_commit_notify,
        replace_file=retire.replace,
    )


def error_for_outcome(outcome: int, leader_id: int | None) -> errors.RaftbusError:
    if outcome == Outcome.QUEUE_FULL:
        return errors.Overloaded("the group's command queue is full (raft_commands_queue_max)")
    if outcome == Outcome.NO_LEADER:
        return errors.LeaderNotAvailable("no leader is elected right now")
    if outcome in (Outcome.NOT_LEADER, Outcome.DISCARDED):
        return errors.NotLeader("leadership changed before the command committed", leader_id=leader_id)
    if outcome == Outcome.LEADER_CHANGED:
        return errors.NotLeader("leadership changed before the command's commit was known: it may still commit; "
                                "retry idempotently", leader_id=leader_id)
    if outcome == Outcome.UNKNOWN:
        return errors.RequestTimedOut("the command's outcome is unknown; retry idempotently")
    return errors.InternalError(f"raft refused the command (reason {outcome})")


class RaftGroup:
    """A replicated state machine on the broker's shared loop and transport (the production `Replica`)."""

    def __init__(self, group_id: str, state_machine, store, *, hub, loop, self_id: int, peer_ids,
                 data_dir: Path, settings: RaftSettings, preferred_leader: int | None = None, learner_ids=(),
                 eager_commit_notify: bool = False, journal_budget=None, disk=None):
        self.group_id = group_id
        self._journal_budget = journal_budget  # broker/storage/open_files.py: idle journals may close their file
        # Followers learn each new commit index at once (the metadata group: every broker answers metadata reads
        # from its own replica), not only from the next append or heartbeat.
        self.eager_commit_notify = eager_commit_notify
        self.state_machine = state_machine
        self.store = store
        self.settings = settings
        self.preferred_leader = preferred_leader
        self.data_dir = Path(data_dir)
        private_dir(self.data_dir)
        self._loop = loop
        self._clock = loop.clock
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
        self.disk = disk  # the broker's DiskSpace: while it is full, a leader takes no new commands
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
        journal = AppendJournal(str(self.data_dir / "raft.journal"))
        self.transport = GroupTransport(self._hub, self.group_id, sorted(members.members - {self._self_id}))
        self.replication = Replication(self.transport, self.group_id, self.settings, self._hub, self._self_id,
                                       self.data_dir, self._clock)
        self.raft = RaftNode(
            self._self_id, sorted(members.voters), name=self.group_id, journal=journal,
            options=raft_options(self.settings, self.data_dir, self.eager_commit_notify), clock=self._clock,
            send=self.transport.send, apply=self._apply_committed, apply_other=self._apply_other,
            serialize=self._serialize, deserialize=self._deserialize, replicate=self.replication.send_append_entries,
            on_role_changed=self._on_state_changed, on_tick=self.replication.on_tick)
        self.replication.attach(self.raft)
        self.transport.raft, self.transport.replication = self.raft, self.replication
        self._install_membership(configuration.Membership(members.voters, frozenset(), members.index), members)
        if self._journal_budget is not None:
            journal.attach_budget(self._journal_budget)
        first_index = journal[0][1] if len(journal) else 1
        if first_index > 1 and not (self.data_dir / SNAPSHOT_FILE).exists():
            self.close()
            raise JournalCorrupt(f"{self.group_id}: the journal starts at index {first_index} and no snapshot covers "
                                 "the entries before it; remove the group's directory to rebuild it from the leader")

    def reopen(self) -> None:
        """Start a group that stopped for lack of space again, in place, from its journal (loop thread). Its store
        holds exactly what was applied — a failed apply commits nothing — and the state machine reloads from it;
        entries after it are replayed from the journal or sent by the leader."""
        try:
            self.close()
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

    def _apply_membership(self, index: int, entry: bytes):
        """Apply a committed configuration entry: install it if it was derived from the configuration held here
        (every replica holds the same one at this index), else refuse it as a concurrent proposal."""
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

        def done(result, outcome):
            if outcome != Outcome.APPLIED:
                future.set_exception(error_for_outcome(outcome, self.leader_id))
            elif isinstance(result, errors.RaftbusError):
                future.set_exception(result)
            else:
                future.set_result(result)

        self._membership_proposal = future
        self.raft.propose_entry(entry, done)
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
        commit = self.raft.commit_index
        peers = self.membership.members - {self._self_id}
        held = reconfigure.replication_progress(self.raft, peers)
        return {peer: max(0, commit - index) for peer, index in held.items()}

    def caught_up_learners(self, lag_entries_max: int) -> set[int]:
        """Leader only: the learners that hold an authenticated connection to this broker (the Raft handshake
        proved the cluster secret and their node id), acknowledged entries since this leader's term began, and
        lack at most `lag_entries_max` committed entries. A learner that never answered is not caught up, however
        short the log."""
        if not self.is_leader:
            return set()
        raft = self.raft
        commit = raft.commit_index
        ready = set()
        for peer in self.membership.learners - {self._self_id}:
            held = raft.match_index.get(peer, 0)
            if peer in raft.connected and held >= 1 and commit - held <= lag_entries_max:
                ready.add(peer)
        return ready

    def set_catch_up_throttle(self, bytes_per_s: int) -> None:
        """Bound what this group sends to its learners (bytes/s, 0 = unlimited); loop thread."""
        self.transport.throttle = CatchUpThrottle(bytes_per_s, clock=self._clock) if bytes_per_s else None

    # ------------------------------------------------------------------ seam
    def submit(self, command: bytes) -> Future:
        future: Future = Future()
        if len(command) > self.settings.command_bytes_max:
            future.set_exception(errors.BatchTooLarge(
                f"command of {len(command)} bytes exceeds raft_command_bytes_max={self.settings.command_bytes_max}"))
            return future

        handing_over = self._handing_over
        if handing_over is not None and self._clock() < handing_over[1] and self.is_leader:
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
        clock = self._clock
        submitted = clock()

        def done(result, outcome):
            self._pending.discard(future)
            if future.done():
                return
            if outcome == Outcome.APPLIED:
                self.commit_latency.observe(clock() - submitted)
                future.set_result(result)
            else:
                future.set_exception(error_for_outcome(outcome, self.leader_id))

        self._pending.add(future)
        self.raft.propose(command, done)
        self._loop.mark_dirty(self.group_id)
        return future

    def confirm_read(self) -> Future:
        """A future that completes (with the read index) once this replica's applied state answers linearizably a
        read that began before this call: the Raft core's ReadIndex (`RaftNode.read_index`: a heartbeat round
        acknowledged by a majority of voters in this leader's term, no log entry, then the apply up to the commit
        index of the round's start). Fails with NotLeader (a deposed leader included), LeaderNotAvailable,
        Overloaded (`raft_reads_waiting_max`) or Unavailable (a stopped group); all retriable."""
        future: Future = Future()
        if self.stopped is not None:
            future.set_exception(self._stopped_error())
            return future

        def done(index, outcome):
            self._pending.discard(future)
            if future.done():
                return
            if outcome == Outcome.APPLIED:
                future.set_result(index)
            elif outcome == Outcome.QUEUE_FULL:
                future.set_exception(errors.Overloaded(
                    f"too many reads wait for {self.group_id} to confirm its leadership (raft_reads_waiting_max)"))
            else:
                future.set_exception(error_for_outcome(outcome, self.leader_id))

        self._pending.add(future)
        self.raft.read_index(done)
        self._loop.mark_dirty(self.group_id)
        return future

    @property
    def is_leader(self) -> bool:
        return self.stopped is None and self.raft.role == _LEADER

    @property
    def caught_up_as_leader(self) -> bool:
        """Leads, and has applied the no-op of its own election, so every entry its predecessors committed too: what
        it answers from its state includes all of them. (A follower may learn the commit index only from the next
        append, so a new leader can hold committed entries it has not applied yet.)"""
        return self.is_leader and reconfigure.own_term_applied(self.raft)

    @property
    def leader_id(self) -> int | None:
        if self.stopped is not None:
            return None
        return self.raft.leader_id

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
        return self.raft.term

    @property
    def snapshot_in_progress(self) -> bool:
        """A store copy is being made or waits to be handed to the core."""
        snapshot = self._snapshot
        return snapshot.busy or snapshot.ready_index is not None

    @property
    def busy(self) -> bool:
        """Commands wait for their answers, a hand-over runs, or a snapshot is in progress (a leader then does not
        quiesce)."""
        handing_over = self._handing_over
        return bool(self._pending) or (handing_over is not None and self._clock() < handing_over[1]) or \
            self.snapshot_in_progress

    # ------------------------------------------------------------------ loop thread
    def tick(self) -> None:
        if self.stopped is not None:
            return
        self.replication.resume_throttled()
        raft = self.raft
        try:
            raft.tick()
            if not raft.voters and raft.role == _LEADER and raft.commit_index < raft.last_index:
                # The only voter: the core appends the tick's new commands after it counted the commit index, and
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
        """A journal write (or another file operation of the Raft core) failed. Lack of space is a state: the entry
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
        if not self.is_leader:
            return []
        if self.quiesced_live_peers is not None:
            live = self.quiesced_live_peers()
            return sorted([self_id, *(p for p in self.membership.voters if p != self_id and p in live)])
        raft = self.raft
        now = self._clock()
        last_response, commit, connected = raft.last_response, raft.commit_index, raft.connected
        lag_s = self.settings.isr_lag_time_ms / 1000
        isr = [self_id]
        voters = self.membership.voters
        for peer, index in raft.match_index.items():
            if peer not in voters:
                continue  # a learner is not in sync: it does not count for the commit
            fresh = now - last_response.get(peer, 0) <= lag_s
            if fresh and index >= commit - 1 and peer in connected:
                isr.append(peer)
        return sorted(isr)

    def maybe_transfer_to_preferred(self) -> None:
        """Hand leadership to the preferred replica when it is connected and fully caught up (loop thread)."""
        target = self.preferred_leader
        if target is None or not self.is_leader or target not in self.membership.voters or target == self._self_id:
            return
        self.hand_over(target)

    def most_caught_up(self, peers) -> int:
        """Of `peers`, the one holding the most of this leader's log (the highest id among equals, as the Raft
        core's own choice of a transfer target)."""
        match = self.raft.match_index
        return max(peers, key=lambda peer: (match.get(peer, 0), peer))

    def hand_over(self, target: int | None = None) -> None:
        """Raft's leadership transfer, done as the paper says: stop taking new commands (LEADER_NOT_AVAILABLE, so
        clients back off briefly and look again) for up to one election timeout, and send TimeoutNow only once every command
        submitted so far is in the log and the target holds all of it (a leader that kept appending would leave the
        target standing with a shorter log than its peers: it would lose, and the group would wait out an election
        timeout without a leader)."""
        raft = self.raft
        if not self.is_leader or raft.commands_queued:
            return  # commands still to append: try again at the next check
        peer = target if target in self.transport.nodes else None
        if peer is not None and peer not in raft.connected:
            return  # its broker is gone (its last match index may still look caught up): TimeoutNow would be lost
        self._handing_over = (target, self._clock() + self.settings.election_timeout_max_ms / 1000)

        def sent(_result, outcome) -> None:
            if outcome != Outcome.APPLIED:
                self._handing_over = None  # denied (target not caught up): keep leading, try at the next check

        raft.transfer_leadership(peer, sent)

    @property
    def log_bytes(self) -> int:
        """Bytes of Raft log this group holds in memory (its journal's commands not released to the file only)."""
        return self.raft.log.resident_bytes

    def release_log(self) -> None:
        """Let the journal hold in the file only what every replica that needs it from memory has (housekeeping)."""
        raft = self.raft
        raft.log.release_through(raft.release_point())

    def maybe_compact(self, force: bool = False) -> None:
        """Start a snapshot copy once enough log has accumulated (or at once with `force`, when the broker's
        logs together pass their memory budget); hand it to the Raft core once complete. A leader's core keeps the
        entries its live followers still need (`RaftNode.compact`) unless the log has reached
        raft_log_bytes_max or raft_log_entries_max, or `force` says the broker's budget is spent."""
        if self.stopped is not None:
            return
        self.release_log()
        snapshot = self._snapshot
        if snapshot.busy:
            return
        if snapshot.ready_index is not None:
            journal, settings = self.raft.log, self.settings
            full = journal.size_bytes >= settings.log_bytes_max or len(journal) >= settings.log_entries_max
            self.raft.compact(snapshot.ready_index, keep_for_followers=not (force or full))
            return
        if not force and not compaction_due(self.settings, self._bytes_since_compaction,
                                            self._entries_since_compaction, self.store.size_bytes):
            return
        footer = self._footer_at(self.raft.applied_index)
        if footer is None:
            return
        self._bytes_since_compaction = 0
        self._entries_since_compaction = 0
        snapshot.start(self.store.snapshot(), footer)

    def _footer_at(self, index: int) -> dict | None:
        """The footer of a snapshot at applied index `index` (all but the copy's length, which its writer adds):
        the log entries `index` - 1 and `index`, what the core checks on load; None while the log lacks them."""
        journal = self.raft.log
        first = journal[0][1]
        if index - 1 < first or index - first >= len(journal):
            return None
        prev, last = journal[index - 1 - first:index + 1 - first]
        membership = self.membership
        return {
            "last": (bytes(last[0]), last[1], last[2]),
            "prev": (bytes(prev[0]), prev[1], prev[2]),
            "cluster": sorted(str(peer) for peer in self.raft.voters | {self._self_id}),
            "data_index": index,
            "entries": [],  # read back when present (entries after the copy, replayed on load)
            "membership": (membership.index, sorted(membership.voters), sorted(membership.learners)),
        }

    def sync(self) -> None:
        """Make everything applied and journaled so far durable: the store first, then the Raft journal (so the
        durable journal always covers the durable applied index). Called by the group commit thread; a failure
        raises, and the group commit then stops the group."""
        if self.stopped is not None:
            return
        started = self._clock()
        self.store.sync()
        journal = self.raft.log
        journal.rewrite_compacted()  # the file without the entries a compaction dropped (the Raft loop never waits)
        point = journal.sync_point()
        journal.fsync_open()  # through the descriptor the journal holds: a group commit opens no file
        journal.mark_synced(point)  # tells a torn tail from a damaged record on the next open
        self.fsync_latency.observe(self._clock() - started)

    def close(self) -> None:
        self.replication.close()
        self.raft.close()

    # ------------------------------------------------------------------ the Raft core's hooks
    def _apply_committed(self, index: int, command: bytes):
        if self.stopped is not None:
            raise GroupStopped(self.stopped)
        try:
            result = self.state_machine.apply(index, command)
        except Exception as exc:  # typed answers are returned; this is the store failing
            self.stop(f"applying entry {index} failed: {type(exc).__name__}: {exc}", disk_full=self._out_of_space(exc))
            raise GroupStopped(self.stopped) from exc  # the core must not count the entry as applied
        self._bytes_since_compaction += len(command)
        self._entries_since_compaction += 1
        self._loop.on_applied(self)
        return result

    def _apply_other(self, index: int, entry: bytes):
        """A committed entry that is neither a command nor a no-op: a configuration entry, or one raftbus never
        writes (pysyncobj's membership and version entries, kinds 2 and 3), which changes nothing anywhere."""
        if configuration.is_change(entry):
            return self._apply_membership(index, entry)
        log.warning("%s: ignored a committed entry of type %s", self.group_id, entry[0] if entry else None)
        return None

    def _on_state_changed(self, old: int, new: int) -> None:
        # A hand-over belongs to the leadership it was started in: a replica that leads again later (the target
        # was killed and this one was elected) takes commands at once, not after the old hand-over's window.
        self._handing_over = None
        self.leader_changes += 1
        self.role = Role.NAMES[new]
        log.info("raft role changed", extra={"group": self.group_id, "from": Role.NAMES[old], "to": self.role,
                                             "term": self.term})
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
        if self.stopped is not None or not raft.is_voter or raft.role != Role.FOLLOWER:
            return
        if peer_id not in self.transport.nodes or raft.leader_id != peer_id:
            return
        settings = self.settings
        if raft.bring_election_forward(random.uniform(settings.leader_lost_election_min_ms,
                                                      settings.leader_lost_election_max_ms) / 1000):
            self._leader_lost = peer_id

    def on_peer_back(self, peer_id: int) -> None:
        """The connection to `peer_id` is up again: an election brought forward because it closed goes back to a
        whole election timeout from now (the leader is alive; its heartbeats resume)."""
        if self._leader_lost != peer_id:
            return
        self._leader_lost = None
        raft = self.raft
        if self.stopped is None and raft.role == Role.FOLLOWER and raft.leader_id == peer_id and \
                peer_id in self.transport.nodes:
            raft.restart_election_timer()

    def _serialize(self, tmp_file: str, last_entry, prev_entry, cluster) -> None:
        """The core's serializer: the completed copy, its footer written and fsynced by the copy's thread, becomes
        the snapshot file by a rename (no write or sync on the loop thread). The core snapshots at the copy's index
        (`RaftNode.compact`), whose entries the footer holds."""
        data_index = self._snapshot.ready_index
        if data_index is None or not self._snapshot.ready.exists():
            raise RuntimeError("no completed snapshot copy to hand over")
        if (last_entry[1], last_entry[2]) != self._snapshot.ready_last:
            raise RuntimeError(f"a snapshot at {last_entry[1:]} asked of a store copy at {self._snapshot.ready_last}")
        os.replace(self._snapshot.ready, tmp_file)
        self._snapshot.ready_index = None

    def _deserialize(self, file_name: str):
        """The core's deserializer: restore the store if ours is older, replay the entries after the copy.

        A snapshot that cannot be loaded stops the group (fail closed): carrying on would vote and acknowledge with
        a state machine frozen before the snapshot."""
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
                self.store.restore(LimitedReader(f, footer["data_len"]))
                reload = getattr(self.state_machine, "reload", None)
                if reload is not None:
                    reload()
        for entry_command, index in footer["entries"]:
            command = journal_command(entry_command)
            if command is not None:
                self.state_machine.apply(index, command)  # a typed refusal is an answer; a failure raises
        saved = footer.get("membership")
        if saved is not None and saved[0] >= self.membership.index:
            index, voters, learners = saved
            self._install_membership(self.membership, configuration.Membership.of(voters, learners, index))
        return footer["last"], footer["prev"], tuple(footer["cluster"])
