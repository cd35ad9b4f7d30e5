"""The AsyncConsumer's fetcher: the sync Fetcher's buffering, epochs and draining (records stay undecoded until
iterated), with each partition's long-poll Fetch run as a task on the event loop instead of a gRPC future."""
from __future__ import annotations

import asyncio

import grpc

from raftbus.client.errors import RaftbusError, error_from_rpc
from raftbus.client.wire import raftbus_pb2 as pb

from raftbus.client.aio.shared import Fetcher, TopicPartition


class AsyncFetcher(Fetcher):
    def _start(self, tp: TopicPartition, part, member: tuple[str, str, int]) -> None:
        group, member_id, generation = member
        ask = pb.FetchRequest(topic=tp.topic, partition=tp.partition, offset=part.fetch_offset,
                              max_bytes=self.fetch_bytes_max, max_wait_ms=self.fetch_wait_ms, group=group,
                              member_id=member_id, generation=generation)
        part.call = asyncio.get_running_loop().create_task(self._fetch(tp, part.epoch, ask))

    async def _fetch(self, tp: TopicPartition, epoch: int, ask: pb.FetchRequest) -> None:
        """One Fetch from the leader; its answer (or typed error) arrives for the consumer's next collect()."""
        try:
            conn = self.router.connection(await self.router.leader_address(tp.topic, tp.partition))
            answer = await conn.log.Fetch(ask, timeout=self.router.request_timeout_s + self.fetch_wait_ms / 1000)
        except grpc.RpcError as exc:
            self._arrive(tp, epoch, ask.offset, None, error_from_rpc(exc))
        except RaftbusError as err:
            self._arrive(tp, epoch, ask.offset, None, err)
        else:
            self._arrive(tp, epoch, ask.offset, answer, None)

    async def aclose(self) -> None:
        """Cancel every fetch in flight and wait until they have ended."""
        fetches = [part.call for part in self._parts.values() if isinstance(part.call, asyncio.Task)]
        self.close()
        await asyncio.gather(*fetches, return_exceptions=True)
