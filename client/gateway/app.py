"""The ASGI application: the JSON API under /v1, its OpenAPI 3 document at /openapi.json, interactive docs at
/docs, and the dashboard at /."""
from __future__ import annotations

from contextlib import asynccontextmanager
from importlib.resources import files

import anyio.to_thread
from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException

from raftbus.client.errors import RaftbusError

from raftbus.gateway import admin_api, consumers_api, dashboard, queues_api, records_api, settings, tables_api
from raftbus.gateway.errors import on_http_error, on_raftbus_error, on_validation_error
from raftbus.gateway.gateway import Gateway
from raftbus.gateway.guard import RequestGuard

DESCRIPTION = """The raftbus cluster over HTTP/JSON: stream records, consumer groups, queue topics, key-value tables
and administration. Values are UTF-8 strings (`value`, `key`) or base64 (`value_b64`, `key_b64`). Errors are
`{"error": {"code", "message", "retriable"}}` with the HTTP status of the error's gRPC status."""


# Swagger UI's files, from the fastapi-swagger package (the `http` extra): served by the gateway, no CDN at run time.
SWAGGER_UI_DIR = str(files("fastapi_swagger") / "resources")


def create_app(gateway: Gateway, hosts: tuple[str, ...]) -> FastAPI:
    """The gateway's app over `gateway`, which it closes on shutdown, serving the Host names `hosts`."""

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        # SDK calls block: FastAPI runs each request in a worker thread; long polls hold one each.
        anyio.to_thread.current_default_thread_limiter().total_tokens = settings.REQUEST_THREADS_MAX
        try:
            yield
        finally:
            gateway.close()

    app = FastAPI(title="raftbus HTTP API", version="1", description=DESCRIPTION, lifespan=lifespan,
                  openapi_url="/openapi.json", docs_url=None, redoc_url=None)
    app.state.gateway = gateway
    app.add_middleware(RequestGuard, gateway=gateway, hosts=hosts)
    app.add_exception_handler(RaftbusError, on_raftbus_error)
    app.add_exception_handler(RequestValidationError, on_validation_error)
    app.add_exception_handler(HTTPException, on_http_error)
    for module in (records_api, consumers_api, queues_api, tables_api, admin_api, dashboard):
        app.include_router(module.router)
    app.mount("/static/swagger", StaticFiles(directory=SWAGGER_UI_DIR), name="swagger")
    app.mount("/static", StaticFiles(directory=dashboard.STATIC_DIR), name="static")
    app.add_api_route("/docs", interactive_docs, include_in_schema=False)
    return app


def interactive_docs() -> HTMLResponse:
    """Swagger UI over /openapi.json, its files served from /static/swagger (SWAGGER_UI_DIR)."""
    return get_swagger_ui_html(openapi_url="/openapi.json", title="raftbus HTTP API",
                               swagger_js_url="/static/swagger/swagger-ui-bundle.js",
                               swagger_css_url="/static/swagger/swagger-ui.css",
                               swagger_favicon_url="/static/swagger/favicon-32x32.png")
