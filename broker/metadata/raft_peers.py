"""The Raft transport's peers follow the metadata: every registered broker, and the configured peers."""
from __future__ import annotations

from collections.abc import Callable

from raftbus.broker.context import BrokerContext


class RaftPeers:
    def __init__(self, context: BrokerContext, configured: dict, set_peers: Callable[[dict], None]):
        self.context = context
        self.configured = dict(configured)  # {broker id: raft address} of `peers` (or of the join answer)
        self._set_peers = set_peers  # RaftHub.set_peers
        self._peers = dict(configured)  # what the transport has now
        self._brokers = None  # the registered brokers they were worked out from
        self._expected: dict[int, str] = {}  # controller: brokers that joined and have not registered yet

    def expect(self, broker_id: int, raft_address: str) -> None:
        """Dial a broker the controller has just added as a metadata learner (any thread): it registers itself
        only once it has connected and caught up."""
        self._expected = {**self._expected, broker_id: raft_address}
        self._brokers = None

    def forget(self, broker_id: int) -> None:
        """Stop dialing a joined broker that was removed before it registered (any thread)."""
        if broker_id in self._expected:
            self._expected = {b: a for b, a in self._expected.items() if b != broker_id}
            self._brokers = None

    def sync(self) -> None:
        """Accept and dial every registered broker (loop thread; cheap while the registered brokers are unchanged)."""
        brokers = self.context.metadata_sm.brokers()
        if brokers is self._brokers:
            return
        self._brokers = brokers
        wanted = {b.broker_id: b.raft_address for b in brokers.values()
                  if b.broker_id != self.context.node_id and b.raft_address}
        wanted.update(self._expected)  # a broker joining again at a new address: the new one
        wanted.update(self.configured)
        if wanted != self._peers:
            self._peers = wanted
            self._set_peers(wanted)
