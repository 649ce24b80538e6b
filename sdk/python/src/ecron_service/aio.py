"""The aiohttp adapter: ``service.aiohttp_app()``, run by ``web.run_app`` or mounted with
``app.add_subapp("/ecron", service.aiohttp_app())``. Its shutdown stops the service."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from aiohttp import web

from ecron_service.protocol import JSON_TYPE, Answer, Call, not_found

if TYPE_CHECKING:
    from ecron_service.service import Service


def aiohttp_app(service: Service) -> web.Application:
    """``service`` as an aiohttp application."""

    async def handle(request: web.Request) -> web.Response:
        match = request.match_info
        call = Call(
            request.method,
            match["name"],
            match.get("eid"),
            request.raw_path,
            request.query_string,
            request.headers,
            await request.read(),
        )
        return _response(service.handle(call))

    async def elsewhere(request: web.Request) -> web.Response:
        return _response(not_found("/" + request.match_info["path"]))

    async def shutdown(_app: web.Application) -> None:
        await asyncio.to_thread(service.shutdown)

    app = web.Application()
    app.router.add_route("*", "/jobs/{name}", handle)
    app.router.add_route("*", "/jobs/{name}/{eid}", handle)
    app.router.add_route("*", "/{path:.*}", elsewhere)
    app.on_shutdown.append(shutdown)
    return app


def _response(answer: Answer) -> web.Response:
    return web.Response(
        status=answer.status,
        body=answer.body,
        content_type=JSON_TYPE,
        headers=answer.headers or None,
    )
