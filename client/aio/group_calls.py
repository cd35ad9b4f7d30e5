"""The Groups RPCs as coroutines through an AsyncRouter: membership calls to the controller, offsets to partition
leaders. Answers come back in the sync SDK's shapes (JoinAnswer, Assignment, PartitionOffset)."""
from __future__ import annotations

from raftbus.client.router import Connection
from raftbus.client.wire import groups_pb2 as gpb
from raftbus.client.wire import groups_pb2_grpc as gpb_grpc

from raftbus.client.aio.router import AsyncRouter
from raftbus.client.aio.shared import Assignment, JoinAnswer, TopicPartition, partitions_of, partitions_proto


class AsyncGroupCalls:
    def __init__(self, router: AsyncRouter):
        self.router = router
        self._stubs: dict[str, tuple[object, gpb_grpc.GroupsStub]] = {}

    def stub(self, conn: Connection) -> gpb_grpc.GroupsStub:
        known = self._stubs.get(conn.address)
        if known is None or known[0] is not conn.channel:
            known = self._stubs[conn.address] = (conn.channel, gpb_grpc.GroupsStub(conn.channel))
        return known[1]

    async def _on_controller(self, method: str, request):
        timeout_s = self.router.request_timeout_s
        return await self.router.call_controller(
            lambda conn: getattr(self.stub(conn), method)(request, timeout=timeout_s))

    async def _on_leader(self, tp: TopicPartition, method: str, request):
        timeout_s = self.router.request_timeout_s
        return await self.router.call_partition(
            tp[0], tp[1], lambda conn: getattr(self.stub(conn), method)(request, timeout=timeout_s))

    async def join(self, group: str, client_id: str, topics, session_timeout_ms: int,
                   rebalance_timeout_ms: int) -> JoinAnswer:
        joined = await self._on_controller("JoinGroup", gpb.JoinGroupRequest(
            group=group, client_id=client_id, topics=sorted(topics), session_timeout_ms=session_timeout_ms,
            rebalance_timeout_ms=rebalance_timeout_ms))
        return JoinAnswer(joined.member_id, joined.generation, joined.session_timeout_ms,
                          joined.rebalance_timeout_ms, joined.heartbeat_interval_ms)

    async def sync(self, group: str, member_id: str, generation: int, released=()) -> Assignment:
        view = await self._on_controller("SyncGroup", gpb.SyncGroupRequest(
            group=group, member_id=member_id, generation=generation, released=partitions_proto(released)))
        return Assignment(view.generation, partitions_of(view.owned), partitions_of(view.revoking),
                          partitions_of(view.pending))

    async def heartbeat(self, group: str, member_id: str, generation: int, max_wait_ms: int) -> gpb.HeartbeatResponse:
        """One long-polling Heartbeat to the controller, not retried (the heartbeat task paces them)."""
        conn = self.router.connection(await self.router.controller_address())
        request = gpb.HeartbeatRequest(group=group, member_id=member_id, generation=generation,
                                       max_wait_ms=max_wait_ms)
        return await self.stub(conn).Heartbeat(request, timeout=self.router.request_timeout_s + max_wait_ms / 1000)

    async def leave(self, group: str, member_id: str) -> None:
        await self._on_controller("LeaveGroup", gpb.LeaveGroupRequest(group=group, member_id=member_id))

    async def commit(self, group: str, member_id: str, generation: int, tp: TopicPartition, offset: int,
                     reset: bool = False) -> int:
        committed = await self._on_leader(tp, "CommitOffset", gpb.CommitOffsetRequest(
            group=group, member_id=member_id, generation=generation, topic=tp[0], partition=tp[1], offset=offset,
            reset=reset))
        return committed.offset

    async def fetch_offset(self, group: str, tp: TopicPartition,
                           member: tuple[str, int] | None = None) -> gpb.PartitionOffset:
        """The committed offset (read linearizably at the leader), the log start and the high watermark;
        `member` (member_id, generation) makes it the owner's start read, which fences older generations' commits."""
        member_id, generation = member or ("", 0)
        return await self._on_leader(tp, "FetchOffset", gpb.FetchOffsetRequest(
            group=group, topic=tp[0], partition=tp[1], consistent=True, member_id=member_id, generation=generation))
