"""A broker records its client address, Raft address, metrics URL and Kafka address in the metadata group, and
again whenever what is recorded differs (a restart on another address, a metrics or Kafka port picked at start)."""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from raftbus.broker.context import BrokerContext

log = logging.getLogger(__name__)

RETRY_S = 0.2  # while not registered as it is: the next try
RECHECK_S = 2.0  # once registered as it is: the next look


class BrokerRegistration:
    def __init__(self, context: BrokerContext, register_broker, *, client_address: str, raft_address: str,
                 metrics_url: Callable[[], str] = str, kafka_address: Callable[[], str] = str):
        self.context = context
        self._register_broker = register_broker  # AdminService.register_broker
        self.client_address = client_address
        self.raft_address = raft_address
        self.metrics_url = metrics_url  # read when registering: the metrics server starts after this is built
        self.kafka_address = kafka_address  # likewise the Kafka port (broker/kafka/)

    def registered(self) -> bool:
        known = self.context.metadata_sm.brokers().get(self.context.node_id)
        return known is not None and (known.address, known.raft_address, known.metrics_url, known.kafka_address) == (
            self.client_address, self.raft_address, self.metrics_url(), self.kafka_address())

    def run(self, stopping: threading.Event) -> None:
        """Until the broker stops (a thread of its own): register when the metadata group has a leader."""
        while not stopping.wait(RETRY_S):
            if self.registered():
                if stopping.wait(RECHECK_S):
                    return
                continue
            if self.context.metadata_group.leader_id is None:
                continue
            try:
                self._register_broker(self.context.node_id, self.client_address, self.raft_address,
                                      self.metrics_url(), self.kafka_address())
            except Exception as exc:
                log.debug("broker registration will be retried: %s", exc)
