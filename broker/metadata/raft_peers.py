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

    def sync(self) -> None:
        """Accept and dial every registered broker (loop thread; cheap while the registered brokers are unchanged)."""
        brokers = self.context.metadata_sm.brokers()
        if brokers is self._brokers:
            return
        self._brokers = brokers
        wanted = {b.broker_id: b.raft_address for b in brokers.values()
                  if b.broker_id != self.context.node_id and b.raft_address}
        wanted.update(self.configured)
        if wanted != self._peers:
            self._peers = wanted
            self._set_peers(wanted)
