"""What the API tells the node's poll pace: the requests people make, each with how long it
took, over real HTTP on 127.0.0.1."""

from __future__ import annotations

import aiohttp
from aiohttp import web
from aiohttp.test_utils import TestServer

from ecron.api.app import UNTIMED, timing_middleware


async def ok(request: web.Request) -> web.Response:
    return web.Response(text="ok")


async def test_probes_and_scrapes_do_not_count_as_people_asking() -> None:
    """A node paces its polls by the requests people make of its API: ``/metrics``,
    ``/healthz`` and ``/readyz`` (a scraper every second, a liveness probe) are not told to
    the pace, so they never hold polls back; any other path is, with how long it took."""
    told: list[float] = []
    app = web.Application(middlewares=[timing_middleware(told.append)])
    for path in ("/metrics", "/healthz", "/readyz", "/api/v1/tasks"):
        app.router.add_get(path, ok)
    async with TestServer(app, host="127.0.0.1") as server, aiohttp.ClientSession() as session:
        for path in sorted(UNTIMED):
            async with session.get(server.make_url(path)) as answer:
                assert answer.status == 200
        assert told == []
        async with session.get(server.make_url("/api/v1/tasks")) as answer:
            assert answer.status == 200
    assert len(told) == 1 and 0 <= told[0] < 5
