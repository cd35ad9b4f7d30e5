"""Committed offsets on a partition's leader, wherever the group's coordinator is (a broker acting as a client).

Kafka's clients send OffsetCommit, OffsetFetch, OffsetDelete and DeleteGroups to their group's coordinator, but
raftbus keeps committed offsets in each partition's own Raft group, so they move with the data. The coordinator
hands each partition's part to that partition's leader: the local OffsetService when this broker leads it,
otherwise the leader's Groups service over gRPC (found and retried through the SDK's router, with the broker's
own credentials), where OffsetService checks the commit again against that broker's metadata replica. Blocking:
the Kafka port calls it from its executor.
"""
from __future__ import annotations

from raftbus.client import errors
from raftbus.client.wire import groups_pb2 as gpb
from raftbus.client.wire import groups_pb2_grpc as gpb_grpc

from raftbus.broker.context import partition_group_id
from raftbus.broker.peer_calls import PeerCalls
from raftbus.broker.groups.offset_service import OffsetService
from raftbus.broker.groups.offset_state import CommittedOffset


class OffsetForwarder:
    def __init__(self, context, offsets: OffsetService, *, timeout_ms: int, client_address: str,
                 credentials: dict | None = None):
        self.context = context
        self.offsets = offsets
        self.timeout_s = timeout_ms / 1000
        self._peers = PeerCalls(context, gpb_grpc.GroupsStub, timeout_s=self.timeout_s, client_address=client_address,
                                credentials=credentials)

    def commit(self, group: str, *, member_id: str, generation: int, topic: str, partition: int, offset: int,
               metadata: str) -> CommittedOffset:
        """Commit as Kafka does: the offset may move backwards (a consumer that sought commits where it is)."""
        if self._leads(topic, partition):
            try:
                return self.offsets.commit(group, member_id=member_id, generation=generation, topic=topic,
                                           partition=partition, offset=offset, metadata=metadata, reset=True)
            except errors.RaftbusError as exc:
                if not exc.retriable:
                    raise  # a retriable one (leadership just moved): through the router, which retries
        request = gpb.CommitOffsetRequest(group=group, member_id=member_id, generation=generation, topic=topic,
                                          partition=partition, offset=offset, metadata=metadata, reset=True)
        answer = self._call(topic, partition, lambda stub: stub.CommitOffset(request, timeout=self.timeout_s))
        return CommittedOffset(answer.offset, generation, answer.commit_time_ms, generation, metadata)

    def fetch(self, group: str, topic: str, partition: int, member: tuple[str, int] | None = None):
        """(committed offset or -1, metadata) read through the partition's log; `member` (id, generation) makes it
        the owner's fenced first read (Kafka's consumer protocol)."""
        if self._leads(topic, partition):
            try:
                committed = self.offsets.fetch(group, topic, partition, consistent=True, member=member).committed
                return (-1, "") if committed is None else (committed.offset, committed.metadata)
            except errors.RaftbusError as exc:
                if not exc.retriable:
                    raise
        request = gpb.FetchOffsetRequest(group=group, topic=topic, partition=partition, consistent=True,
                                         member_id=member[0] if member else "", generation=member[1] if member else 0)
        answer = self._call(topic, partition, lambda stub: stub.FetchOffset(request, timeout=self.timeout_s))
        return answer.committed_offset, answer.metadata

    def delete(self, group: str, topic: str, partition: int) -> bool:
        if self._leads(topic, partition):
            try:
                return self.offsets.delete(group, topic=topic, partition=partition)
            except errors.RaftbusError as exc:
                if not exc.retriable:
                    raise
        request = gpb.DeleteOffsetRequest(group=group, topic=topic, partition=partition)
        return self._call(topic, partition, lambda stub: stub.DeleteOffset(request, timeout=self.timeout_s)).deleted

    # ------------------------------------------------------------------ helpers
    def _leads(self, topic: str, partition: int) -> bool:
        found = self.context.topic(topic)
        replica = self.context.partitions.get(partition_group_id(found.topic_id, partition))
        return replica is not None and replica.group.is_leader

    def _call(self, topic: str, partition: int, fn):
        return self._peers.call(topic, partition, fn)

    def close(self) -> None:
        self._peers.close()
