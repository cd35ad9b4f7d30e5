"""InitProducerId (22): a producer id and epoch for an idempotent Kafka producer.

Ids are drawn at random from 2^62 on the broker (no coordinator round trip); a producer's raftbus id is its
Kafka id and epoch (broker/kafka/apis/produce.py), so its sequences live in each partition's producer table like
the SDK's, replicated, and survive a leader change. A producer that asks again with its id and epoch (KIP-360)
gets the next epoch of the same id, which starts its sequences again at 0. Transactions are not served: a
transactional id is refused.
"""
from __future__ import annotations

import secrets

from raftbus.broker.kafka import codes

EPOCH_MAX = 2**15 - 1


def handler(services):
    async def init_producer_id(request) -> dict:
        body = request.body
        if body.transactional_id is not None:
            return {"error_code": codes.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "producer_id": -1,
                    "producer_epoch": -1}
        if services.settings.auth_enabled and request.session.principal is None:
            return {"error_code": codes.CLUSTER_AUTHORIZATION_FAILED, "producer_id": -1, "producer_epoch": -1}
        producer_id = getattr(body, "producer_id", -1)
        epoch = getattr(body, "producer_epoch", -1)
        if producer_id >= 0 and 0 <= epoch < EPOCH_MAX:
            return {"error_code": codes.NONE, "producer_id": producer_id, "producer_epoch": epoch + 1}
        return {"error_code": codes.NONE, "producer_id": secrets.randbits(62), "producer_epoch": 0}

    return init_producer_id
