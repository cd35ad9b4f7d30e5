"""What a leader sends its followers, with flow control per group and per peer: no transfer can overflow the one
connection every group between two brokers shares.

pysyncobj's `__sendAppendEntries` queues everything a follower lacks at once: all of a lagging follower's log, or
a whole snapshot file in 64 KiB pieces, for as long as one heartbeat period lasts. A snapshot or a catch-up larger
than the hub's send buffer (`raft_send_buffer_bytes_max`) then closed the shared connection, every group lost its
peer, and the transfer started again from nothing, forever. `Replication` replaces that method (see
`raftbus.broker.raft.group._Raft`):

- **Log entries** go out in messages of at most `raft_catch_up_bytes_in_flight_max` (at least one entry), and a
  group holds no more than that many bytes sent to a peer and not yet acknowledged; pipelining and Raft's
  optimistic `nextIndex` stay as they were. Each acknowledgement sends the next part at once.
- **A snapshot** streams as `snapshot_chunk` messages of `raft_snapshot_chunk_bytes`, at most
  `raft_snapshot_chunks_in_flight_max` unacknowledged (`raftbus.broker.raft.snapshot_stream`). The follower writes
  them to a temporary file, acknowledges each, and installs the file (an atomic rename, then pysyncobj's own
  install) only when its length and SHA-256 match. A dropped connection resumes from the last acknowledged offset.
- **The shared buffer**: all groups' entries and chunks to one peer may occupy at most
  `raft_bulk_send_buffer_bytes_max` of its send buffer (one message more at most), and each group sending to a
  peer gets an equal share of that (`flow_control.PeerShares`); heartbeats, votes and replies are never held back. A group
  that has to wait keeps its place: its next acknowledgement or tick sends more. Back-pressure, not disconnects.

While a follower receives a snapshot the leader still sends it heartbeats, with a commit index no higher than
what the follower is known to hold (pysyncobj would let a follower with a stale log tail commit it).
"""
from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from pysyncobj.monotonic import monotonic as raft_monotonic

from raftbus.broker.raft.flow_control import EntryWindow, allowance, entries_within, shares_of
from raftbus.broker.raft.snapshot_stream import Chunk, SnapshotChunkError, SnapshotReceiver, SnapshotSender

log = logging.getLogger(__name__)

CHUNK, ACK = "snapshot_chunk", "snapshot_ack"
MESSAGE_TYPES = frozenset((CHUNK, ACK))


class _Received:
    """Hands a complete, checked snapshot file to pysyncobj's install path (never something a peer can send)."""

    def __init__(self, path: str):
        self.path = path
        self.installed = False


class Replication:
    """The leader's sending side of one group, and its follower's snapshot receiving side (loop thread only)."""

    def __init__(self, raft, group_id: str, settings, hub, self_id: int, data_dir: Path):
        self._raft = raft
        self.group_id = group_id
        self.settings = settings
        self._self_id = int(self_id)
        self._shares = shares_of(hub, settings.bulk_send_buffer_bytes_max)
        self._windows: dict = {}  # node -> EntryWindow
        self._senders: dict = {}  # node -> SnapshotSender
        self._receiver = SnapshotReceiver(Path(data_dir) / "snapshot.incoming")
        self.stats = dict.fromkeys((
            "entries_bytes_sent", "flow_control_waits", "snapshot_chunks_sent", "snapshot_bytes_sent",
            "snapshots_sent", "snapshot_resumes", "snapshots_received", "snapshot_chunks_refused"), 0)

    # ------------------------------------------------------------------ wiring
    def attach(self) -> None:
        """Hook into the pysyncobj instance once it is built: its install path and its ticks."""
        serializer = self._raft._SyncObj__serializer
        stock = serializer.setTransmissionData

        def set_transmission_data(data):
            if isinstance(data, _Received):
                os.replace(data.path, self._raft._SyncObj__conf.fullDumpFile)
                data.installed = True
                return True
            return stock(data)

        serializer.setTransmissionData = set_transmission_data
        self._raft.addOnTickCallback(self.on_tick)

    def close(self) -> None:
        self.close_sending()
        self._receiver.discard()

    # ------------------------------------------------------------------ pysyncobj internals
    @property
    def _next_index(self) -> dict:
        return self._raft._SyncObj__raftNextIndex

    @property
    def _match_index(self) -> dict:
        return self._raft._SyncObj__raftMatchIndex

    def _connected(self, node) -> bool:
        return node in self._raft._SyncObj__connectedNodes

    def _send(self, node, message: dict) -> None:
        self._raft._SyncObj__transport.send(node, message)

    # ------------------------------------------------------------------ leader: sending
    def send_append_entries(self) -> None:
        """pysyncobj's `__sendAppendEntries`, flow-controlled: a heartbeat to every peer, and what each lacks as
        far as its window and the peer's share of the send buffer allow."""
        raft = self._raft
        raft._SyncObj__newAppendEntriesTime = raft_monotonic() + raft._SyncObj__conf.appendEntriesPeriod
        for node in raft._SyncObj__otherNodes | raft._SyncObj__readonlyNodes:
            if self._connected(node):
                self._send_to(node, heartbeat=True)
            else:
                self._forget(node)

    def on_reply(self, node) -> None:
        """A follower answered an append: send what its window now has room for."""
        if self._raft._isLeader() and self._connected(node) and node in self._next_index:
            self._send_to(node, heartbeat=False)

    def on_tick(self) -> None:
        """Every tick: a follower drops its leader-side state; a leader sends what flow control held back."""
        if not self._raft._isLeader():
            if self._senders or self._windows:
                self.close_sending()
            return
        now = raft_monotonic()
        for node, sender in list(self._senders.items()):
            if sender.in_flight and now - sender.progress_at > self.settings.snapshot_ack_timeout_ms / 1000:
                sender.resume()  # chunks or their acknowledgements were dropped (the group was not open there)
                sender.progress_at = now
                self.stats["snapshot_resumes"] += 1
                log.info("%s: no acknowledgement of snapshot %s from node %s for %d ms; sending again from %d",
                         self.group_id, sender.id, node.id, self.settings.snapshot_ack_timeout_ms, sender.acked)
        last_index = self._raft._SyncObj__raftLog[-1][1]
        next_index = self._next_index
        for node in set(self._windows) | set(self._senders):
            if node not in self._senders and next_index.get(node, 0) > last_index:
                continue  # nothing held back: its window moves on its acknowledgements (on_reply)
            if self._connected(node) and node in next_index:
                self._send_to(node, heartbeat=False)

    def close_sending(self) -> None:
        """Drop every transfer and window (this replica no longer leads, or closes)."""
        for node, sender in self._senders.items():
            if not sender.done:
                log.info("%s: snapshot %s to node %s stopped at %d of %d bytes (no longer leading)", self.group_id,
                         sender.id, node.id, sender.acked, sender.size)
        for node in list(self._senders):
            self._drop_sender(node)
        for node in list(self._windows):
            self._forget(node)

    def _send_to(self, node, heartbeat: bool) -> None:
        journal = self._raft._SyncObj__raftLog
        if self._next_index[node] <= journal[0][1]:
            self._send_snapshot(node, heartbeat)
            return
        sender = self._senders.get(node)
        if sender is not None:  # Raft's reply to the install came first
            self.stats["snapshots_sent"] += sender.sent == sender.size
            self._drop_sender(node)
        self._send_entries(node, journal, heartbeat)

    def _send_entries(self, node, journal, heartbeat: bool) -> None:
        raft, peer = self._raft, int(node.id)
        window = self._windows.get(node)
        if window is None:
            window = self._windows[node] = EntryWindow()
        next_index = self._next_index[node]
        window.trim(self._match_index.get(node, 0), next_index)
        last_index = journal[-1][1]
        limit = min(self.settings.catch_up_bytes_in_flight_max, self._shares.share(peer))
        message_bytes_max = raft._SyncObj__conf.appendEntriesBatchSizeBytes
        sent = False
        while next_index <= last_index:
            budget = min(allowance(window.bytes, limit, self._shares.room(peer)), message_bytes_max)
            entries, size = entries_within(journal, next_index, budget, window.bytes == 0) if budget else ([], 0)
            if not entries:
                self.stats["flow_control_waits"] += 1
                break
            prev_idx, prev_term = raft._SyncObj__getPrevLogIndexTerm(next_index)
            message = {"type": "append_entries", "term": raft.raftCurrentTerm, "commit_index": raft.raftCommitIndex,
                       "entries": entries, "prevLogIdx": prev_idx, "prevLogTerm": prev_term}
            self._send(node, message)
            if len(message["entries"]) < len(entries):  # a learner's catch-up throttle kept the rest back
                entries = message["entries"]
                size = sum(len(entry[0]) for entry in entries)
                if not entries:
                    self._next_index[node] = next_index
                    break
            next_index = entries[-1][1] + 1
            self._next_index[node] = next_index
            window.add(entries[0][1], entries[-1][1], size)
            self.stats["entries_bytes_sent"] += size
            sent = True
            if not self._connected(node):
                return
        if heartbeat and not sent:
            prev_idx, prev_term = raft._SyncObj__getPrevLogIndexTerm(next_index)
            self._send(node, {"type": "append_entries", "term": raft.raftCurrentTerm,
                              "commit_index": raft.raftCommitIndex, "entries": [],
                              "prevLogIdx": prev_idx, "prevLogTerm": prev_term})
        self._shares.set_active(peer, self.group_id, window.bytes > 0 or next_index <= last_index)

    def _send_snapshot(self, node, heartbeat: bool) -> None:
        raft, peer = self._raft, int(node.id)
        if heartbeat:  # keeps the follower from standing for election; commits nothing it may not hold
            self._send(node, {"type": "append_entries", "term": raft.raftCurrentTerm, "serialized": None,
                              "commit_index": min(raft.raftCommitIndex, self._match_index.get(node, 0))})
        sender = self._sender_for(node)
        if sender is None:
            return
        self._shares.set_active(peer, self.group_id, not sender.done)
        limit = min(self.settings.snapshot_chunk_bytes * self.settings.snapshot_chunks_in_flight_max,
                    self._shares.share(peer))
        while sender.next_chunk_bytes() > 0:
            budget = allowance(sender.in_flight, limit, self._shares.room(peer))
            if budget < sender.next_chunk_bytes() and not (budget and sender.in_flight == 0):
                self.stats["flow_control_waits"] += 1
                return
            try:
                chunk = sender.next_chunk()
            except OSError as exc:
                log.error("%s: reading the snapshot for node %s failed: %s", self.group_id, peer, exc)
                self._drop_sender(node)
                return
            self._send(node, {"type": CHUNK, "term": raft.raftCurrentTerm, "commit_index": raft.raftCommitIndex,
                              **chunk.fields()})
            self.stats["snapshot_chunks_sent"] += 1
            self.stats["snapshot_bytes_sent"] += len(chunk.data)
            if not self._connected(node):
                return

    def _sender_for(self, node) -> SnapshotSender | None:
        """The transfer to `node`: the one under way, or a new one of the current snapshot file."""
        sender = self._senders.get(node)
        if sender is not None and not sender.done:
            return sender
        path = self._raft._SyncObj__conf.fullDumpFile
        try:
            if sender is not None and sender.is_file(path):
                return sender  # sent and installed; Raft's reply moves nextIndex on
            fresh = SnapshotSender(path, self._self_id, self.settings.snapshot_chunk_bytes)
        except OSError as exc:
            log.error("%s: cannot open the snapshot for node %s: %s", self.group_id, node.id, exc)
            return None
        if sender is not None:
            self._drop_sender(node)
        fresh.progress_at = raft_monotonic()
        self._senders[node] = fresh
        log.info("%s: sending snapshot %s (%d bytes) to node %s", self.group_id, fresh.id, fresh.size, node.id)
        return fresh

    def _drop_sender(self, node) -> None:
        sender = self._senders.pop(node, None)
        if sender is not None:
            sender.close()
            self._shares.set_active(int(node.id), self.group_id, node in self._windows and
                                    self._windows[node].bytes > 0)

    def _forget(self, node) -> None:
        """`node` is disconnected (or this replica no longer leads): in-flight entries are lost; a snapshot
        transfer resumes from its last acknowledged offset."""
        window = self._windows.pop(node, None)
        if window is not None:
            window.clear()
        sender = self._senders.get(node)
        if sender is not None:
            sender.resume()
        self._shares.set_active(int(node.id), self.group_id, False)

    def _on_ack(self, node, message: dict) -> None:
        sender = self._senders.get(node)
        held = message.get("offset")
        if sender is None or message.get("id") != sender.id or type(held) is not int:
            return
        now = raft_monotonic()
        self._raft._SyncObj__lastResponseTime[node] = now
        before = sender.acked
        if sender.on_ack(held, resend=message.get("resend") is True):
            self.stats["snapshot_resumes"] += 1
            log.info("%s: node %s holds %d bytes of snapshot %s; sending again from there", self.group_id,
                     node.id, held, sender.id)
        if sender.acked > before:
            sender.progress_at = now
        if sender.done:
            self.stats["snapshots_sent"] += 1
            log.info("%s: node %s installed snapshot %s", self.group_id, node.id, sender.id)
            self._drop_sender(node)
            after = message.get("next_index")
            if type(after) is int and node in self._next_index:
                # pysyncobj moves nextIndex only when matchIndex grows: a follower that lost its data and came
                # back empty would be offered the same snapshot forever.
                self._next_index[node] = max(self._next_index[node], after)
        elif self._raft._isLeader() and self._connected(node):
            self._send_snapshot(node, heartbeat=False)

    # ------------------------------------------------------------------ follower: receiving
    def receive(self, node, message: dict) -> None:
        """A `snapshot_chunk` (follower) or `snapshot_ack` (leader) from `node`."""
        if message.get("type") == ACK:
            self._on_ack(node, message)
            return
        term = message.get("term")
        if type(term) is not int or term < self._raft.raftCurrentTerm:
            return  # from a deposed leader
        try:
            chunk = Chunk.from_fields(message)
            complete = self._receiver.accept(chunk)
        except (SnapshotChunkError, OSError) as exc:
            self.stats["snapshot_chunks_refused"] += 1
            log.warning("%s: refused a snapshot chunk from node %s: %s", self.group_id, node.id, exc)
            self._receiver.discard()
            self._send(node, {"type": ACK, "term": term, "id": message.get("id"), "offset": 0})
            return
        ack = {"type": ACK, "term": term, "id": chunk.snapshot_id, "offset": self._receiver.written}
        if not complete and (self._receiver.id != chunk.snapshot_id or chunk.offset > self._receiver.written):
            ack["resend"] = True  # a gap: chunks before this one never arrived
        if complete:
            installed = self._install(node, message)
            ack["offset"] = chunk.size if installed else 0
            ack["next_index"] = self._raft._SyncObj__raftLog[-1][1] + 1
        self._send(node, ack)

    def _install(self, node, message: dict) -> bool:
        """Hand the complete file to pysyncobj as if it had arrived whole: it renames it into place, loads it
        (`RaftGroup._deserialize`, which checks its footer) and answers the leader with its new log index."""
        received = _Received(self._receiver.path)
        commit = message.get("commit_index")
        started = time.monotonic()
        self._raft._SyncObj__onMessageReceived(node, {
            "type": "append_entries", "term": message["term"], "serialized": received,
            "commit_index": commit if type(commit) is int else 0})
        if received.installed:
            self.stats["snapshots_received"] += 1
            log.info("%s: installed a snapshot of %d bytes from node %s (fsync %.2f s, load %.2f s)", self.group_id,
                     message["size"], node.id, self._receiver.sync_s, time.monotonic() - started)
        else:
            self._receiver.discard()
        return received.installed
