"""Liveness and readiness, cheap enough to be asked every second."""

from __future__ import annotations

import structlog
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from ecron.api.context import context

routes = web.RouteTableDef()
log = structlog.get_logger(__name__)


@routes.get("/healthz")
async def healthz(request: web.Request) -> web.Response:
    """The process is alive and serving."""
    return web.json_response({"status": "ok", "node": context(request).node_id})


@routes.get("/readyz")
async def readyz(request: web.Request) -> web.Response:
    """The database answers, the scheduler loop went round recently, and each further
    check (the queue, when required) finds nothing wrong; the body also says how loaded the
    node is (``saturated``, ``poll_delay_seconds``, ...), which never makes it unready.
    It is open to anyone who reaches ``listen``: a problem says what is wrong, never a host
    or an error's text (those go to the log)."""
    ctx = context(request)
    problems = []
    try:
        await ctx.store.ping()
    except Exception as exc:  # the detail (hosts, error text) to the log, not to anyone asking
        log.warning("readiness_database_unreachable", error=f"{type(exc).__name__}: {exc}")
        problems.append("database: unreachable")
    last = ctx.last_tick()
    bound = max(ctx.settings.tick * 10, ctx.settings.tick + ctx.settings.lease_ttl)
    if last is None or ctx.clock.now() - last > bound:
        problems.append("scheduler: the loop has not gone round recently")
    problems += [problem for check in ctx.readiness if (problem := check()) is not None]
    load = dict(ctx.load())
    if problems:
        return web.json_response({"status": "unready", "problems": problems, **load}, status=503)
    # A saturated node is still ready: it answers, and its polls stretch evenly.
    return web.json_response({"status": "ready", "node": ctx.node_id, **load})


@routes.get("/metrics")
async def metrics(request: web.Request) -> web.Response:
    """Prometheus metrics, in the text exposition format."""
    body = context(request).metrics.exposition()
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})
