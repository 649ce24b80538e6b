"""The aiohttp application: REST API under /api/v1, health at the root."""

from __future__ import annotations

import hmac
import time
from collections.abc import Awaitable, Callable
from typing import Any

import structlog
from aiohttp import web

from ecron.api import dashboard, executions, health, openapi, pools, tasks
from ecron.api.context import CONTEXT, ApiContext, error
from ecron.errors import Ambiguous, Conflict, NotFound

log = structlog.get_logger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

#: Paths that never ask for the API token (the OpenAPI document holds no data either), and
#: the prefix of the dashboard's files (which hold no data either).
OPEN_PATHS = ("/", "/healthz", "/readyz", "/metrics", openapi.PATH)
OPEN_PREFIX = dashboard.STATIC


@web.middleware
async def errors_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every error becomes JSON with the right status."""
    try:
        return await handler(request)
    except NotFound as exc:
        return error(404, str(exc))
    except Ambiguous as exc:
        return error(409, str(exc), exc.candidates)
    except Conflict as exc:
        return error(409, str(exc))
    except web.HTTPException as exc:
        if exc.content_type == "application/json":
            raise
        return error(
            exc.status, exc.reason, exc.text if exc.text != f"{exc.status}: {exc.reason}" else None
        )
    except Exception:
        log.exception("api_error", method=request.method, path=request.path)
        return error(500, "internal error", "see the daemon's log")


def auth_middleware(token: str | None) -> Any:
    """Ask for ``Authorization: Bearer <api_token>`` when a token is configured."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if token is None or _is_open(request):
            return await handler(request)
        given = request.headers.get("Authorization", "")
        scheme, _, value = given.partition(" ")
        given_token = value.strip().encode()  # bytes: any text compares, in constant time
        if scheme.lower() != "bearer" or not hmac.compare_digest(given_token, token.encode()):
            return error(
                401, "missing or wrong API token", "send Authorization: Bearer <api_token>"
            )
        return await handler(request)

    return middleware


def _is_open(request: web.Request) -> bool:
    path = request.path
    if path in OPEN_PATHS or path.startswith(OPEN_PREFIX):
        return True
    return (
        request.method == "POST"
        and path.startswith("/api/v1/executions/")
        and path.endswith("/report")
    )


def timing_middleware(answered: Callable[[float], None]) -> Any:
    """Tell the node how long each request took (it paces its polls by it)."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        started = time.monotonic()
        try:
            return await handler(request)
        finally:
            answered(time.monotonic() - started)

    return middleware


def make_app(ctx: ApiContext) -> web.Application:
    """The whole web application, wired to the daemon's parts."""
    app = web.Application(
        middlewares=[
            timing_middleware(ctx.answered),
            errors_middleware,
            auth_middleware(ctx.settings.api_token),
        ],
        client_max_size=1024 * 1024,
    )
    app[CONTEXT] = ctx
    app.add_routes(health.routes)
    app.add_routes(tasks.routes)
    app.add_routes(executions.routes)
    app.add_routes(pools.routes)
    app.add_routes(dashboard.routes)
    app.add_routes(openapi.routes)
    return app
