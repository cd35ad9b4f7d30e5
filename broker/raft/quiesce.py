"""Quiescence: idle Raft groups stop ticking and heartbeating; one liveness message per broker pair replaces them.

A leader whose group is idle (every entry committed and applied, every follower connected and holding the whole
log, nothing submitted) for `quiesce_after_ms` tells its followers "quiesce <group> at <term, last index, last
term>" and stops ticking the group. A follower that agrees (same leader, term and log, all of it committed and
applied) stops ticking it too, so its election timer no longer runs; one that does not agree answers "wake", and
the leader resumes heartbeats. A quiesced group costs nothing per loop pass and sends nothing.

Instead of per-group heartbeats every broker sends each connected peer one "alive" message every
`liveness_interval_ms`. A group wakes (resumes ticking, with a fresh election timeout on a follower) when:
- a message of the group arrives (an append, a vote request, a TimeoutNow), or a command is submitted to it;
- a peer of the group disconnects, or the broker leading it has been silent for `liveness_timeout_ms`;
- a peer says "wake" (it woke for one of these reasons), or the group crash-stops on this broker.
A replica that wakes for any reason other than a message of the group tells the group's other replicas to wake
too, so a leader resumes heartbeats before a follower's election timeout can pass. Raft's safety does not depend
on any of this: quiescence only decides when a replica's timers run (docs/replication.md).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

from raftbus.broker.raft.loop import QUIESCE_CHANNEL
from raftbus.broker.raft.pysyncobj import Role

log = logging.getLogger(__name__)

_OWN = 0  # `quiesced` value of a group this broker leads (broker ids start at 1)


@dataclass(frozen=True)
class QuiesceSettings:
    enabled: bool = True
    quiesce_after_ms: int = 2000       # a leader's group idle this long quiesces
    liveness_interval_ms: int = 200    # one "alive" per connected peer this often
    liveness_timeout_ms: int = 1000    # a leading broker silent this long wakes the groups it leads here


def log_tail(raft) -> tuple[int, int]:
    """(last index, last term) of a group's Raft log."""
    last = raft.log[-1]
    return last[1], last[2]


def leader_idle(group) -> bool:
    """Whether a group this broker leads has nothing to replicate, commit, apply or hand over."""
    raft = group.raft
    if group.stopped is not None or group.busy or raft.role != Role.LEADER or raft.commands_queued:
        return False
    last_index, last_term = log_tail(raft)
    if last_term != raft.term or raft.commit_index != last_index or raft.applied_index != last_index:
        return False
    match, connected = raft.match_index, raft.connected
    return all(match.get(peer) == last_index and peer in connected for peer in group.transport.nodes)


def follower_agrees(group, leader_id: int, term: int, last_index: int, last_term: int) -> bool:
    """Whether a follower holds exactly the quiescing leader's view: same leader and term, the whole log committed
    and applied."""
    raft = group.raft
    if group.stopped is not None or raft.role != Role.FOLLOWER or raft.term != term:
        return False
    if raft.leader_id != leader_id or log_tail(raft) != (last_index, last_term) or group.snapshot_in_progress:
        return False
    return raft.commit_index == last_index and raft.applied_index == last_index


class Quiescence:
    """The quiesced groups of one broker (loop thread only, except `on_group_stopped`)."""

    def __init__(self, loop, hub, self_id: int, settings: QuiesceSettings, excluded=()):
        self.loop, self.hub, self.self_id, self.settings = loop, hub, self_id, settings
        self._clock = loop.clock
        self.excluded = set(excluded)
        self.quiesced: dict[str, int] = {}        # group → the broker leading it (_OWN: this one)
        self.led: dict[str, int] = {}             # the quiesced groups led here → which quiesce (a serial) stopped it
        self.led_changes: set[str] = set()        # groups that entered or left `led` since `take_led_changes`
        self._idle_since: dict[str, tuple] = {}   # led groups: ((last index, term), since)
        self._heard: dict[int, float] = {}        # peer → when its last liveness message came
        self._outbox: dict[int, dict] = {}        # peer → {"q": [...], "w": [...]} until the next flush
        self._next_alive = 0.0
        self._last_tick = self._clock()
        self.quiesces = 0
        self.wakes = 0

    # ------------------------------------------------------------------ loop hooks
    def before_message(self, group_id: str) -> None:
        """A message of `group_id` arrived: a quiesced replica wakes (the message itself resets its timers)."""
        if group_id in self.quiesced:
            self.wake(group_id, notify=False)

    def on_dirty(self, group_id: str) -> None:
        """A command was submitted (or other work queued) for `group_id`."""
        if group_id in self.quiesced:
            self.wake(group_id, notify=True)

    def on_peer(self, peer_id: int, connected: bool) -> None:
        """Any change of a peer's connection wakes every quiesced group it replicates."""
        if connected:
            self._heard[peer_id] = self._clock()
        else:
            self._heard.pop(peer_id, None)
        for group_id in [g for g in self.quiesced if self._involves(g, peer_id)]:
            self.wake(group_id, notify=True)

    def on_group_stopped(self, group) -> None:
        """Any thread: the group crash-stopped here; its other replicas must not wait for it."""
        self.loop.call_soon(lambda: self._wake_stopped(group.group_id))

    def on_removed(self, group_id: str) -> None:
        self.quiesced.pop(group_id, None)
        if self.led.pop(group_id, None) is not None:
            self.led_changes.add(group_id)
        self._idle_since.pop(group_id, None)

    def on_message(self, peer_id: int, message) -> None:
        """A liveness message of `peer_id` (QUIESCE_CHANNEL), with any quiesce and wake requests."""
        if not isinstance(message, dict):
            return
        self._heard[peer_id] = self._clock()
        for entry in message.get("q", ()):
            self._on_quiesce(peer_id, entry)
        for group_id in message.get("w", ()):
            if isinstance(group_id, str) and group_id in self.quiesced:
                self.wake(group_id, notify=False)

    def on_tick(self) -> None:
        """Once per tick interval: quiesce idle led groups, wake those of silent leaders, send liveness."""
        if not self.settings.enabled:
            return
        now = self._clock()
        self._forgive_own_lag(now)
        self._quiesce_idle(now)
        self._wake_silent(now)
        if now >= self._next_alive:
            self._next_alive = now + self.settings.liveness_interval_ms / 1000
            for peer_id in self.hub.connected_peers():
                self._outbox.setdefault(peer_id, {})
        self.flush()

    def flush(self) -> None:
        outbox, self._outbox = self._outbox, {}
        for peer_id, message in outbox.items():
            message["a"] = 1
            self.hub.send(peer_id, QUIESCE_CHANNEL, message)

    # ------------------------------------------------------------------ waking
    def wake(self, group_id: str, *, notify: bool) -> None:
        leader = self.quiesced.pop(group_id, None)
        if self.led.pop(group_id, None) is not None:
            self.led_changes.add(group_id)
        group = self.loop.groups.get(group_id)
        if leader is None or group is None:
            return
        self.wakes += 1
        raft = group.raft
        group.quiesced_live_peers = None
        if raft.is_leader:
            # Its followers' last answers may be old (it sent nothing while quiesced): each gets a whole leader
            # fallback timeout to answer again.
            raft.restart_fallback_timer()
        else:
            raft.restart_election_timer()
        self.loop.resume(group)
        if notify:
            for peer_id in group.transport.nodes:
                self._outbox.setdefault(peer_id, {}).setdefault("w", []).append(group_id)

    def take_led_changes(self) -> set[str]:
        """The groups that entered or left `led` since the last call (the leader gossip's changes)."""
        changes, self.led_changes = self.led_changes, set()
        return changes

    def _wake_stopped(self, group_id: str) -> None:
        group = self.loop.groups.get(group_id)
        if group_id in self.quiesced:
            self.wake(group_id, notify=True)
        elif group is not None:
            for peer_id in group.transport.nodes:
                self._outbox.setdefault(peer_id, {}).setdefault("w", []).append(group_id)
        self.flush()

    def _forgive_own_lag(self, now: float) -> None:
        """After a pass of this loop that ran late, peers' messages may be waiting unread in the sockets: their
        silence is counted from now, not from before this broker's own stall."""
        late_s = now - self._last_tick - self.settings.liveness_interval_ms / 1000
        self._last_tick = now
        if late_s > 0:
            for peer in self._heard:
                self._heard[peer] += late_s

    def _wake_silent(self, now: float) -> None:
        timeout_s = self.settings.liveness_timeout_ms / 1000
        silent = {peer for peer, heard in self._heard.items() if now - heard > timeout_s}
        if not silent:
            return
        for peer in silent:
            self._heard[peer] = now  # looked at again after another timeout, not at every tick
        log.warning("brokers %s silent for %d ms: waking the groups they lead here", sorted(silent),
                    self.settings.liveness_timeout_ms)
        for group_id in [g for g, leader in self.quiesced.items() if leader in silent]:
            self.wake(group_id, notify=True)

    def _involves(self, group_id: str, peer_id: int) -> bool:
        group = self.loop.groups.get(group_id)
        return group is None or peer_id in group.transport.nodes

    # ------------------------------------------------------------------ quiescing
    def on_ticked(self, groups) -> None:
        """A loop pass between timer ticks ticked `groups` (they had messages or work): those led here that hold
        nothing but their election's no-op entry are looked at now, so a new group quiesces as soon as its
        followers answered instead of at the next tick; then the outbox goes."""
        if self.settings.enabled:
            now, awake = self._clock(), self.loop.awake
            for group in groups:
                raft = group.raft
                if group.group_id in awake and raft.is_leader and raft.last_index == raft.noop_index:
                    self._check_idle(group.group_id, group, now)
        self.flush()

    def _quiesce_idle(self, now: float) -> None:
        for group_id, group in list(self.loop.awake.items()):
            self._check_idle(group_id, group, now)

    def _check_idle(self, group_id: str, group, now: float) -> None:
        if group_id in self.excluded or not group.raft.is_leader or not leader_idle(group):
            self._idle_since.pop(group_id, None)
            return
        state = (log_tail(group.raft), group.raft.term)
        seen = self._idle_since.get(group_id)
        if seen is None or seen[0] != state:
            self._idle_since[group_id] = (state, now)
            if self._nothing_since_elected(group, state):
                self._heartbeat_now(group)
        elif (now - seen[1] >= self.settings.quiesce_after_ms / 1000 or self._nothing_since_elected(group, state)) \
                and self._followers_answered_since(group, seen[1]):
            self._quiesce_led(group_id, group, state)

    @staticmethod
    def _nothing_since_elected(group, state) -> bool:
        """The leader's log ends with the no-op entry of its own election: no command came since, so the group
        need not wait `quiesce_after_ms` (thousands of new partitions, or the groups a failed broker led, quiesce
        as soon as their followers hold everything)."""
        (last_index, _), _ = state
        return last_index == group.raft.noop_index

    def _heartbeat_now(self, group) -> None:
        """A new leader whose followers all hold its no-op entry heartbeats at its next tick (in the next loop pass)
        instead of after `heartbeat_interval_ms`: the heartbeat tells them the commit index, their answers let the
        group quiesce, so a new group stops ticking one round trip after it is led instead of a heartbeat later."""
        group.raft.heartbeat_at_next_tick()
        self.loop.mark_dirty(group.group_id)

    def _followers_answered_since(self, group, since: float) -> bool:
        """Every follower answered a heartbeat sent after the group went idle (so it learned the commit index)."""
        responses = group.raft.last_response
        return all(responses.get(peer, 0) > since for peer in group.transport.nodes)

    def _quiesce_led(self, group_id: str, group, state) -> None:
        (last_index, last_term), term = state
        self._idle_since.pop(group_id, None)
        self.quiesced[group_id] = _OWN
        self.quiesces += 1
        self.led[group_id] = self.quiesces
        self.led_changes.add(group_id)
        group.quiesced_live_peers = self.live_peers
        self.loop.suspend(group_id)
        entry = [group_id, term, last_index, last_term]
        for peer_id in group.transport.nodes:
            self._outbox.setdefault(peer_id, {}).setdefault("q", []).append(entry)

    def _on_quiesce(self, peer_id: int, entry) -> None:
        try:
            group_id, term, last_index, last_term = entry
        except (TypeError, ValueError):
            return
        group = self.loop.groups.get(group_id) if isinstance(group_id, str) else None
        if group is None or group_id in self.excluded or not self.settings.enabled:
            self._outbox.setdefault(peer_id, {}).setdefault("w", []).append(group_id)
            return
        if follower_agrees(group, peer_id, term, last_index, last_term):
            self.quiesced[group_id] = peer_id
            self.quiesces += 1
            self.loop.suspend(group_id)
            return
        if group_id in self.quiesced:
            self.wake(group_id, notify=False)
        self._outbox.setdefault(peer_id, {}).setdefault("w", []).append(group_id)

    # ------------------------------------------------------------------ leaders' view of live followers
    def live_peers(self) -> set[int]:
        """The connected brokers heard from within `liveness_timeout_ms`: a quiesced leader hears nothing from its
        followers, so their broker's liveness stands for their answers (in-sync replicas)."""
        now, timeout_s = self._clock(), self.settings.liveness_timeout_ms / 1000
        connected = self.hub.connected_peers()
        return {peer for peer, heard in self._heard.items() if peer in connected and now - heard <= timeout_s}

    def stats(self) -> dict:
        led = sum(1 for leader in self.quiesced.values() if leader == _OWN)
        return {"quiesced": len(self.quiesced), "quiesced_led": led, "quiesces": self.quiesces, "wakes": self.wakes}
