"""The aiohttp application: REST API under /api/v1, health at the root."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import structlog
from aiohttp import web, web_response

from ecron.api import audit, dashboard, executions, health, openapi, pools, short_ids, tasks
from ecron.api.access import Origins, access_middleware
from ecron.api.context import CONTEXT, ApiContext, error
from ecron.errors import Ambiguous, Conflict, NotFound

log = structlog.get_logger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


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
        answer = error(
            exc.status, exc.reason, exc.text if exc.text != f"{exc.status}: {exc.reason}" else None
        )
        if "Allow" in exc.headers:  # a 405 says which methods the path takes
            answer.headers["Allow"] = exc.headers["Allow"]
        return answer
    except ConnectionResetError:
        # the caller hung up before its request was read (it gave up waiting while this
        # node was paused, say): nothing was done, and nobody is left to read an answer
        log.warning("api_caller_gone", method=request.method, path=request.path)
        return error(400, "the request was cut off before it was read")
    except Exception:
        log.exception("api_error", method=request.method, path=request.path)
        return error(500, "internal error", "see the daemon's log")


#: Asked by probes and scrapers, not by people: a node is not "asked" by them (a scrape
#: every second would otherwise hold its polls back for as long as it lasts).
UNTIMED = frozenset({"/metrics", "/healthz", "/readyz"})


def timing_middleware(answered: Callable[[float], None]) -> Any:
    """Tell the node how long each request people made took (it paces its polls by it);
    probes and scrapes (``UNTIMED``) are not told."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path in UNTIMED:
            return await handler(request)
        started = time.monotonic()
        try:
            return await handler(request)
        finally:
            answered(time.monotonic() - started)

    return middleware


#: What every answer says of the server: its name, not its version (nor Python's or
#: aiohttp's, which aiohttp sends by default and a scanner matches against known flaws).
SERVER = "ecron"


def _name_no_version() -> None:
    """What aiohttp itself answers, before the application sees a request (a request it
    cannot read: 400), names no version either. aiohttp has no setting for it: the name it
    sends by default is read from this module attribute at each answer."""
    web_response.SERVER_SOFTWARE = SERVER  # type: ignore[attr-defined]


async def plain_headers(request: web.Request, response: web.StreamResponse) -> None:
    """Every answer names no version, and tells browsers not to guess its type (a JSON
    answer quoting a caller's text is never read as HTML or script)."""
    response.headers["Server"] = SERVER
    response.headers["X-Content-Type-Options"] = "nosniff"


def make_app(ctx: ApiContext) -> web.Application:
    """The whole web application, wired to the daemon's parts."""
    app = web.Application(
        middlewares=[
            timing_middleware(ctx.answered),
            access_middleware(
                ctx.callers,
                Origins(ctx.settings.host_port[0], ctx.settings.public_url),
                ctx.audit,
                ctx.clock,
                ctx.settings.bad_tokens_per_minute,
            ),
            errors_middleware,
        ],
        client_max_size=1024 * 1024,
    )
    app[CONTEXT] = ctx
    app.on_response_prepare.append(plain_headers)
    _name_no_version()
    app.add_routes(health.routes)
    app.add_routes(tasks.routes)
    app.add_routes(executions.routes)
    app.add_routes(short_ids.routes)
    app.add_routes(pools.routes)
    app.add_routes(audit.routes)
    app.add_routes(dashboard.routes)
    app.add_routes(openapi.routes)
    return app
