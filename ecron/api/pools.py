"""``/api/v1/pools``: the pools that tasks share, and where each stands on every node."""

from __future__ import annotations

from aiohttp import web

from ecron.api.context import context

routes = web.RouteTableDef()


@routes.get("/api/v1/pools")
async def list_pools(request: web.Request) -> web.Response:
    """Every pool, by name: limits, tasks, executions running and waiting, ``Retry-After``."""
    return web.json_response({"items": await context(request).commands.pools()})
