"""What a leader sends its followers, with flow control per group and per peer: no transfer can overflow the one
connection every group between two brokers shares.

`Replication` is the Raft core's `replicate` (broker/raft/pysyncobj): a heartbeat to every peer, and what each
lacks, within bounds:

- **Log entries** go out in messages of at most `raft_catch_up_bytes_in_flight_max` (at least one entry), and a
  group holds no more than that many bytes sent to a peer and not yet acknowledged; pipelining and Raft's
  optimistic next index stay as they were. Each acknowledgement sends the next part at once.
- **A snapshot** streams as `snapshot_chunk` messages of `raft_snapshot_chunk_bytes`, at most
  `raft_snapshot_chunks_in_flight_max` unacknowledged (`raftbus.broker.raft.snapshot_stream`). The follower writes
  them to a temporary file, acknowledges each, and installs the file (an atomic rename, then the core's
  `install_snapshot`) only when its length and SHA-256 match. A dropped connection resumes from the last
  acknowledged offset.
- **The shared buffer**: all groups' entries and chunks to one peer may occupy at most
  `raft_bulk_send_buffer_bytes_max` of its send buffer (one message more at most), and each group sending to a
  peer gets an equal share of that (`flow_control.PeerShares`); heartbeats, votes and replies are never held back. A group
  that has to wait keeps its place: its next acknowledgement or tick sends more. Back-pressure, not disconnects.
- **Learners catching up** get at most their group's catch-up throttle (`throttle.CatchUpThrottle`) of entries;
  entries beyond it wait for a later tick. Snapshot chunks to them are counted, never held back.

While a follower receives a snapshot the leader still sends it heartbeats, with a commit index no higher than
what the follower is known to hold (the heartbeat carries no log position to check it against).
"""
from __future__ import annotations

import logging
from pathlib import Path

from raftbus.broker.raft.flow_control import EntryWindow, allowance, entries_within, shares_of
from raftbus.broker.raft.snapshot_stream import Chunk, SnapshotChunkError, SnapshotReceiver, SnapshotSender

log = logging.getLogger(__name__)

CHUNK, ACK = "snapshot_chunk", "snapshot_ack"
MESSAGE_TYPES = frozenset((CHUNK, ACK))


class Replication:
    """The leader's sending side of one group, and its follower's snapshot receiving side (loop thread only)."""

    def __init__(self, transport, group_id: str, settings, hub, self_id: int, data_dir: Path, clock):
        self._raft = None  # the group's RaftNode (`attach`)
        self._transport = transport
        self.group_id = group_id
        self.settings = settings
        self._self_id = int(self_id)
        self._clock = clock
        self._shares = shares_of(hub, settings.bulk_send_buffer_bytes_max)
        self._windows: dict[int, EntryWindow] = {}
        self._senders: dict[int, SnapshotSender] = {}
        self._throttled: set[int] = set()  # learners that used their catch-up budget: nothing more until the next tick
        self._receiver = SnapshotReceiver(Path(data_dir) / "snapshot.incoming", clock=clock)
        self.stats = dict.fromkeys((
            "entries_bytes_sent", "flow_control_waits", "snapshot_chunks_sent", "snapshot_bytes_sent",
            "snapshots_sent", "snapshot_resumes", "snapshots_received", "snapshot_chunks_refused"), 0)

    def attach(self, raft) -> None:
        self._raft = raft

    def close(self) -> None:
        self.close_sending()
        self._receiver.discard()

    def _connected(self, peer: int) -> bool:
        return peer in self._raft.connected and peer not in self._throttled

    def _send(self, peer: int, message: dict) -> None:
        self._transport.send(peer, message)

    # ------------------------------------------------------------------ leader: sending
    def send_append_entries(self) -> None:
        """A heartbeat to every peer, and what each lacks as far as its window, the peer's share of the send buffer
        and (for a learner) the catch-up throttle allow."""
        raft = self._raft
        for peer in raft.voters | raft.learners:
            if peer in self._throttled:
                continue
            if peer in raft.connected:
                self._send_to(peer, heartbeat=True)
            else:
                self._forget(peer)

    def on_reply(self, peer: int) -> None:
        """A follower answered an append: send what its window now has room for."""
        if self._raft.is_leader and self._connected(peer) and peer in self._raft.next_index:
            self._send_to(peer, heartbeat=False)

    def resume_throttled(self) -> None:
        """A new tick: learners held back by the catch-up throttle may be sent to again."""
        self._throttled.clear()

    def on_tick(self) -> None:
        """Every tick: a follower drops its leader-side state; a leader sends what flow control held back."""
        raft = self._raft
        if not raft.is_leader:
            if self._senders or self._windows:
                self.close_sending()
            return
        now = self._clock()
        for peer, sender in list(self._senders.items()):
            if sender.in_flight and now - sender.progress_at > self.settings.snapshot_ack_timeout_ms / 1000:
                sender.resume()  # chunks or their acknowledgements were dropped (the group was not open there)
                sender.progress_at = now
                self.stats["snapshot_resumes"] += 1
                log.info("%s: no acknowledgement of snapshot %s from node %s for %d ms; sending again from %d",
                         self.group_id, sender.id, peer, self.settings.snapshot_ack_timeout_ms, sender.acked)
        last_index = raft.last_index
        next_index = raft.next_index
        for peer in set(self._windows) | set(self._senders):
            if peer not in self._senders and next_index.get(peer, 0) > last_index:
                continue  # nothing held back: its window moves on its acknowledgements (on_reply)
            if self._connected(peer) and peer in next_index:
                self._send_to(peer, heartbeat=False)

    def close_sending(self) -> None:
        """Drop every transfer and window (this replica no longer leads, or closes)."""
        for peer, sender in self._senders.items():
            if not sender.done:
                log.info("%s: snapshot %s to node %s stopped at %d of %d bytes (no longer leading)", self.group_id,
                         sender.id, peer, sender.acked, sender.size)
        for peer in list(self._senders):
            self._drop_sender(peer)
        for peer in list(self._windows):
            self._forget(peer)

    def _send_to(self, peer: int, heartbeat: bool) -> None:
        raft = self._raft
        if raft.next_index[peer] <= raft.first_index:
            self._send_snapshot(peer, heartbeat)
            return
        sender = self._senders.get(peer)
        if sender is not None:  # Raft's reply to the install came first
            self.stats["snapshots_sent"] += sender.sent == sender.size
            self._drop_sender(peer)
        self._send_entries(peer, heartbeat)

    def _send_entries(self, peer: int, heartbeat: bool) -> None:
        raft = self._raft
        journal = raft.log
        window = self._windows.get(peer)
        if window is None:
            window = self._windows[peer] = EntryWindow()
        next_index = raft.next_index[peer]
        window.trim(raft.match_index.get(peer, 0), next_index)
        last_index = journal[-1][1]
        limit = min(self.settings.catch_up_bytes_in_flight_max, self._shares.share(peer))
        message_bytes_max = raft.message_bytes_max
        throttle = self._transport.throttle if peer in raft.learners else None
        sent = False
        while next_index <= last_index:
            budget = min(allowance(window.bytes, limit, self._shares.room(peer)), message_bytes_max)
            entries, size = entries_within(journal, next_index, budget, window.bytes == 0) if budget else ([], 0)
            if not entries:
                self.stats["flow_control_waits"] += 1
                break
            if throttle is not None:
                granted = throttle.grant([len(entry[0]) for entry in entries])
                if granted < len(entries):
                    self._throttled.add(peer)  # the rest goes from the same index at a later tick
                    if not granted:
                        break
                    entries = entries[:granted]
                    size = sum(len(entry[0]) for entry in entries)
            self._send(peer, raft.append_entries_message(next_index, entries))
            next_index = entries[-1][1] + 1
            raft.next_index[peer] = next_index
            window.add(entries[0][1], entries[-1][1], size)
            self.stats["entries_bytes_sent"] += size
            sent = True
            if not self._connected(peer):
                return
        if heartbeat and not sent:
            self._send(peer, raft.append_entries_message(next_index, []))
        self._shares.set_active(peer, self.group_id, window.bytes > 0 or next_index <= last_index)

    def _send_snapshot(self, peer: int, heartbeat: bool) -> None:
        raft = self._raft
        if heartbeat:  # keeps the follower from standing for election; commits nothing it may not hold
            self._send(peer, raft.snapshot_heartbeat_message(min(raft.commit_index, raft.match_index.get(peer, 0))))
        sender = self._sender_for(peer)
        if sender is None:
            return
        self._shares.set_active(peer, self.group_id, not sender.done)
        limit = min(self.settings.snapshot_chunk_bytes * self.settings.snapshot_chunks_in_flight_max,
                    self._shares.share(peer))
        throttle = self._transport.throttle if peer in raft.learners else None
        while sender.next_chunk_bytes() > 0:
            budget = allowance(sender.in_flight, limit, self._shares.room(peer))
            if budget < sender.next_chunk_bytes() and not (budget and sender.in_flight == 0):
                self.stats["flow_control_waits"] += 1
                return
            try:
                chunk = sender.next_chunk()
            except OSError as exc:
                log.error("%s: reading the snapshot for node %s failed: %s", self.group_id, peer, exc)
                self._drop_sender(peer)
                return
            self._send(peer, {"type": CHUNK, "term": raft.term, "commit_index": raft.commit_index, **chunk.fields()})
            if throttle is not None:
                throttle.charge(len(chunk.data))
            self.stats["snapshot_chunks_sent"] += 1
            self.stats["snapshot_bytes_sent"] += len(chunk.data)
            if not self._connected(peer):
                return

    def _sender_for(self, peer: int) -> SnapshotSender | None:
        """The transfer to `peer`: the one under way, or a new one of the current snapshot file."""
        sender = self._senders.get(peer)
        if sender is not None and not sender.done:
            return sender
        path = self._raft.snapshot_path
        try:
            if sender is not None and sender.is_file(path):
                return sender  # sent and installed; Raft's reply moves the next index on
            fresh = SnapshotSender(path, self._self_id, self.settings.snapshot_chunk_bytes)
        except OSError as exc:
            log.error("%s: cannot open the snapshot for node %s: %s", self.group_id, peer, exc)
            return None
        if sender is not None:
            self._drop_sender(peer)
        fresh.progress_at = self._clock()
        self._senders[peer] = fresh
        log.info("%s: sending snapshot %s (%d bytes) to node %s", self.group_id, fresh.id, fresh.size, peer)
        return fresh

    def _drop_sender(self, peer: int) -> None:
        sender = self._senders.pop(peer, None)
        if sender is not None:
            sender.close()
            self._shares.set_active(peer, self.group_id, peer in self._windows and self._windows[peer].bytes > 0)

    def _forget(self, peer: int) -> None:
        """`peer` is disconnected (or this replica no longer leads): in-flight entries are lost; a snapshot
        transfer resumes from its last acknowledged offset."""
        window = self._windows.pop(peer, None)
        if window is not None:
            window.clear()
        sender = self._senders.get(peer)
        if sender is not None:
            sender.resume()
        self._shares.set_active(peer, self.group_id, False)

    def _on_ack(self, peer: int, message: dict) -> None:
        sender = self._senders.get(peer)
        held = message.get("offset")
        if sender is None or message.get("id") != sender.id or type(held) is not int:
            return
        raft = self._raft
        raft.heard_from(peer)
        now = self._clock()
        before = sender.acked
        if sender.on_ack(held, resend=message.get("resend") is True):
            self.stats["snapshot_resumes"] += 1
            log.info("%s: node %s holds %d bytes of snapshot %s; sending again from there", self.group_id,
                     peer, held, sender.id)
        if sender.acked > before:
            sender.progress_at = now
        if sender.done:
            self.stats["snapshots_sent"] += 1
            log.info("%s: node %s installed snapshot %s", self.group_id, peer, sender.id)
            self._drop_sender(peer)
            after = message.get("next_index")
            if type(after) is int and peer in raft.next_index:
                # A follower that lost its data and came back empty reports its new log end here: without this
                # its next index would stay below the snapshot, and it would be offered the same one forever.
                raft.next_index[peer] = max(raft.next_index[peer], after)
        elif raft.is_leader and self._connected(peer):
            self._send_snapshot(peer, heartbeat=False)

    # ------------------------------------------------------------------ follower: receiving
    def receive(self, peer: int, message: dict) -> None:
        """A `snapshot_chunk` (follower) or `snapshot_ack` (leader) from `peer`."""
        if message.get("type") == ACK:
            self._on_ack(peer, message)
            return
        term = message.get("term")
        if type(term) is not int or term < self._raft.term:
            return  # from a deposed leader
        try:
            chunk = Chunk.from_fields(message)
            complete = self._receiver.accept(chunk)
        except (SnapshotChunkError, OSError) as exc:
            self.stats["snapshot_chunks_refused"] += 1
            log.warning("%s: refused a snapshot chunk from node %s: %s", self.group_id, peer, exc)
            self._receiver.discard()
            self._send(peer, {"type": ACK, "term": term, "id": message.get("id"), "offset": 0})
            return
        ack = {"type": ACK, "term": term, "id": chunk.snapshot_id, "offset": self._receiver.written}
        if not complete and (self._receiver.id != chunk.snapshot_id or chunk.offset > self._receiver.written):
            ack["resend"] = True  # a gap: chunks before this one never arrived
        if complete:
            installed = self._install(peer, message)
            ack["offset"] = chunk.size if installed else 0
            ack["next_index"] = self._raft.last_index + 1
        self._send(peer, ack)

    def _install(self, peer: int, message: dict) -> bool:
        """Hand the complete, checked file to the core: it renames it into place, loads it (`RaftGroup._deserialize`,
        which checks its footer) and answers the leader with its new log index."""
        commit = message.get("commit_index")
        started = self._clock()
        installed = self._raft.install_snapshot(peer, self._receiver.path, message["term"],
                                                commit if type(commit) is int else 0)
        if installed:
            self.stats["snapshots_received"] += 1
            log.info("%s: installed a snapshot of %d bytes from node %s (fsync %.2f s, load %.2f s)", self.group_id,
                     message["size"], peer, self._receiver.sync_s, self._clock() - started)
        else:
            self._receiver.discard()
        return installed
