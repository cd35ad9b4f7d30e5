"""What every asyncio client shares: `async with` closes it, and grpc failures become typed errors."""
from __future__ import annotations

import grpc

from raftbus.client.errors import RaftbusError, error_from_rpc


def typed(exc: grpc.RpcError | RaftbusError) -> RaftbusError:
    """The typed error of a failed call (grpc status + trailing error code), or the typed error itself."""
    return error_from_rpc(exc) if isinstance(exc, grpc.RpcError) else exc


class AsyncClient:
    """An async context manager: `async with Client(...) as c:` starts it and closes it on the way out."""

    async def start(self) -> None:
        """Connect ahead of the first call (clients that need it override this)."""

    async def close(self) -> None:
        raise NotImplementedError

    async def __aenter__(self):
        await self.start()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()
