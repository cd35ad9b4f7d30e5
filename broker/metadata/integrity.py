"""The Integrity gRPC service: this broker's metadata-store digest at an index, for `raftbus cluster verify`.

Every applied metadata command keeps the content digest of the metadata store (broker/content_digest.py), and the
state machine holds the digest after each of its last applied commands; a broker answers its digest once it
applied the asked index, and re-reads its store against the kept digest.
"""
from __future__ import annotations

import time
from typing import NamedTuple

from raftbus.client import errors
from raftbus.client.wire import integrity_pb2 as ipb
from raftbus.client.wire import integrity_pb2_grpc as ipb_grpc

from raftbus.broker.content_digest import DIGEST_HISTORY_MAX
from raftbus.broker.context import BrokerContext
from raftbus.broker.grpc_server import unary

APPLY_POLL_S = 0.02  # how often a broker waiting to apply the asked index looks again


class MetadataReport(NamedTuple):
    broker_id: int
    index: int             # 0: the asked index was not applied in time
    applied_index: int
    digest: int
    store_consistent: bool | None


class IntegrityService:
    def __init__(self, context: BrokerContext, wait_max_ms: int):
        self.context = context
        self.wait_max_ms = wait_max_ms  # fetch_wait_max_ms

    def metadata_report(self, index: int, max_wait_ms: int) -> MetadataReport:
        sm = self.context.metadata_sm
        if index < 0:
            raise errors.InvalidArgument(f"index must be 0 or more, not {index}")
        index = index or sm.applied_index()
        wait_s = min(max(max_wait_ms, 0), self.wait_max_ms) / 1000
        deadline = time.monotonic() + wait_s
        while sm.applied_index() < index and time.monotonic() < deadline:
            time.sleep(APPLY_POLL_S)
        applied = sm.applied_index()
        if applied < index:
            return MetadataReport(self.context.node_id, 0, applied, 0, sm.store_consistent())
        digest = sm.digest_at(index)
        if digest is None:
            raise errors.Unavailable(f"index {index} is older than the {DIGEST_HISTORY_MAX} last applied metadata "
                                     f"commands whose digest this broker keeps; verify again")
        return MetadataReport(self.context.node_id, index, applied, digest, sm.store_consistent())


class IntegrityServicer(ipb_grpc.IntegrityServicer):
    def __init__(self, service: IntegrityService):
        self.service = service

    @unary
    def MetadataDigest(self, request, context):
        r = self.service.metadata_report(request.index, request.max_wait_ms)
        return ipb.MetadataDigestResponse(broker_id=r.broker_id, index=r.index, applied_index=r.applied_index,
                                          digest=r.digest, store_checked=r.store_consistent is not None,
                                          store_consistent=bool(r.store_consistent))


def integrity_servicers(context: BrokerContext, wait_max_ms: int) -> list:
    """(add_to_server, servicer) pairs of the Integrity service."""
    return [(ipb_grpc.add_IntegrityServicer_to_server, IntegrityServicer(IntegrityService(context, wait_max_ms)))]
