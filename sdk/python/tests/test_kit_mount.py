"""Each adapter mounted under a prefix in its framework (FastAPI's ``mount``, Flask with
werkzeug's ``DispatcherMiddleware``, aiohttp's ``add_subapp``) answers there, beside the
application's own routes, and checks signatures over the whole path as ecron sent it."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp
import pytest
from aiohttp import web
from fastapi import FastAPI
from flask import Flask
from kit_jobs import service_with_jobs
from kit_servers import _aiohttp, _uvicorn, _wsgiref, call, signed
from werkzeug.middleware.dispatcher import DispatcherMiddleware

from ecron_service import Service

SECRET = "mounted-secret"


@asynccontextmanager
async def mounted(service: Service, framework: str) -> AsyncIterator[str]:
    """An application of ``framework`` with its own ``/hello`` and the service at
    ``/ecron``, on 127.0.0.1; its base URL."""
    try:
        if framework == "fastapi":
            api = FastAPI(lifespan=service.lifespan)
            api.get("/hello")(lambda: {"hello": "fastapi"})
            api.mount("/ecron", service.asgi())
            async with _uvicorn(api) as url:
                yield url
        elif framework == "flask":
            flask = Flask(__name__)
            flask.get("/hello")(lambda: {"hello": "flask"})
            flask.wsgi_app = DispatcherMiddleware(flask.wsgi_app, {"/ecron": service.wsgi()})  # type: ignore[method-assign]
            async with _wsgiref(flask) as url:
                yield url
        else:

            async def hello(_: web.Request) -> web.Response:
                return web.json_response({"hello": "aiohttp"})

            app = web.Application()
            app.router.add_get("/hello", hello)
            app.add_subapp("/ecron", service.aiohttp_app())
            async with _aiohttp(app) as url:
                yield url
    finally:
        service.shutdown()


@pytest.mark.parametrize("framework", ["fastapi", "flask", "aiohttp"])
async def test_a_mounted_service_answers_under_its_prefix_and_checks_the_whole_path(
    framework: str, session: aiohttp.ClientSession
) -> None:
    """Under ``/ecron`` a trigger signed over ``/ecron/jobs/climb?region=eu`` starts the job
    and a signed poll answers it; one signed over the path without the prefix is 401; the
    application's own route still answers."""
    service, seen = service_with_jobs(secret=SECRET)
    now = int(time.time())
    async with mounted(service, framework) as base:
        target = "/ecron/jobs/climb?region=eu"
        good = await call(session, "POST", f"{base}{target}", "e1", **{
            "X-Ecron-Signature": signed(SECRET, "POST", target, "e1", b"", now)})  # fmt: skip
        unprefixed = "/jobs/climb?region=eu"
        short = await call(session, "POST", f"{base}{target}", "e2", **{
            "X-Ecron-Signature": signed(SECRET, "POST", unprefixed, "e2", b"", now)})  # fmt: skip
        poll = "/ecron/jobs/climb/e1?region=eu"
        polled = await call(session, "GET", f"{base}{poll}", "e1", **{
            "X-Ecron-Signature": signed(SECRET, "GET", poll, "e1", b"", now)})  # fmt: skip
        async with session.get(f"{base}/hello") as hello:
            own = await hello.json()
    assert good[0] == 200 and polled[0] == 200 and polled[1]["status"] in ("RUNNING", "SUCCESS")
    assert short[0] == 401
    assert own == {"hello": framework}
    assert [run.execution_id for run in seen.started] == ["e1"]
