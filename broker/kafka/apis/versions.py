"""ApiVersions (18): exactly the API keys and versions the router serves."""
from __future__ import annotations

from raftbus.broker.kafka import codes


def handler(router):
    async def api_versions(request) -> dict:
        request.session.client_id = request.header.client_id
        return {"error_code": codes.NONE, "api_keys": router.versions()}

    return api_versions
