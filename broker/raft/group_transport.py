"""A group's channel of the broker's one transport (`RaftHub`): what its replica sends and receives."""
from __future__ import annotations

import logging

from raftbus.broker.raft.transfer import MESSAGE_TYPES as TRANSFER_MESSAGES

log = logging.getLogger(__name__)


class GroupStopped(Exception):
    """Raised out of the Raft core's apply when the group had to stop: the core then does not count the entry as
    applied, and the group never ticks again in this process."""


class GroupTransport:
    """Loop thread only. `nodes` are the group's other members (broker ids): messages from anyone else are dropped."""

    def __init__(self, hub, channel: str, peer_ids):
        self._hub = hub
        self.channel = channel
        self.nodes: set[int] = {int(peer_id) for peer_id in peer_ids}
        self.raft = None          # the group's RaftNode
        self.replication = None   # the group's transfer.Replication
        self.stopped = False      # a stopped group neither receives nor answers: to its peers it is down
        self.throttle = None      # throttle.CatchUpThrottle: bounds what the leader sends to learners

    def send(self, peer: int, message: dict) -> bool:
        if self.stopped:
            return False
        try:
            return self._hub.send(peer, self.channel, message)
        except ValueError:
            log.error("%s: message to %s exceeds the frame limit; dropped", self.channel, peer)
            return False

    def peer_connected(self, peer_id: int) -> None:
        if peer_id in self.nodes:
            self.raft.peer_connected(peer_id)

    def peer_disconnected(self, peer_id: int) -> None:
        if peer_id in self.nodes:
            self.raft.peer_disconnected(peer_id)

    def deliver(self, peer_id: int, message) -> None:
        if peer_id not in self.nodes or self.stopped or not isinstance(message, dict):
            return
        kind = message.get("type")
        if kind in TRANSFER_MESSAGES:
            self.replication.receive(peer_id, message)
            return
        self.raft.receive(peer_id, message)
        if kind == "next_node_idx":
            self.replication.on_reply(peer_id)

    def receive(self, peer_id: int, message, on_fault) -> None:
        """`deliver`, with a fault of the group's own disk (a journal write that failed) handed to `on_fault`
        instead of the hub: the message is then not acknowledged, and the leader sends it again."""
        try:
            self.deliver(peer_id, message)
        except (OSError, GroupStopped) as exc:
            on_fault(exc)
