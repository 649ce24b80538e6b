"""Real servers on 127.0.0.1 for the kit's tests: a ``Service`` through each adapter (ASGI
under uvicorn, WSGI under a threaded wsgiref, aiohttp), and a stand-in for ecron's callback
and log endpoints that records what is pushed to it."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import socket
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import aiohttp
import uvicorn
from aiohttp import web

from ecron_service import Service

ADAPTERS = ("asgi", "wsgi", "aiohttp")


class _ThreadingWSGIServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@asynccontextmanager
async def serve(service: Service, adapter: str) -> AsyncIterator[str]:
    """``service`` through ``adapter`` on a free port of 127.0.0.1; its base URL. At the end
    the server stops and the service is shut down (as its server's stop would)."""
    try:
        if adapter == "aiohttp":
            async with _aiohttp(service.aiohttp_app()) as url:
                yield url
        elif adapter == "asgi":
            async with _uvicorn(service.asgi()) as url:
                yield url
        else:
            async with _wsgiref(service.wsgi()) as url:
                yield url
    finally:
        await asyncio.to_thread(service.shutdown)


@asynccontextmanager
async def _aiohttp(app: web.Application) -> AsyncIterator[str]:
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=1)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


@asynccontextmanager
async def _uvicorn(app: Any) -> AsyncIterator[str]:
    """uvicorn in a thread of its own (so that it sets no signal handler), on a socket
    bound here."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=1)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        await until(lambda: server.started)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        await asyncio.to_thread(thread.join, 10)
        sock.close()


@asynccontextmanager
async def _wsgiref(app: Any) -> AsyncIterator[str]:
    server = make_server(
        "127.0.0.1", 0, app, server_class=_ThreadingWSGIServer, handler_class=_QuietHandler
    )
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        await asyncio.to_thread(thread.join, 10)


async def until(predicate: Callable[[], Any], timeout: float = 5.0) -> Any:
    """Wait until ``predicate()`` is truthy (and return it), or fail after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        await asyncio.sleep(0.01)


def signed(secret: str, method: str, target: str, eid: str, body: bytes, t: int) -> str:
    """An ``X-Ecron-Signature`` made straight from PROTOCOL.md (v1, and v2 over ``eid``)."""
    v1 = hmac.new(secret.encode(), f"{t}.{method}.{target}.".encode() + body, hashlib.sha256)
    v2 = hmac.new(secret.encode(), f"{t}.{method}.{target}.{eid}.".encode() + body, hashlib.sha256)
    return f"t={t},v1={v1.hexdigest()},v2={v2.hexdigest()}"


def headers_for(eid: str, **extra: str) -> dict[str, str]:
    """The headers ecron sends on a call about ``eid``."""
    return {
        "X-Ecron-Execution-Id": eid,
        "X-Ecron-Task": "nightly",
        "X-Ecron-Scheduled-At": "2026-01-01T03:00:00.000Z",
        "X-Ecron-Deadline": "2099-01-01T05:00:00Z",
        "X-Ecron-Attempt": "1",
        "X-Ecron-Trigger-Kind": "manual",
        **extra,
    }


async def call(
    session: aiohttp.ClientSession,
    method: str,
    url: str,
    eid: str = "",
    body: bytes = b"",
    **headers: str,
) -> tuple[int, Any, dict[str, str]]:
    """One call as ecron makes it; the status, the JSON answer and the headers."""
    sent = headers_for(eid, **headers) if eid else dict(headers)
    async with session.request(method, url, data=body or None, headers=sent) as response:
        return response.status, await response.json(), dict(response.headers)


@dataclass
class Pushed:
    """One POST the stand-in received."""

    kind: str  # "report" or "logs"
    remote_id: str
    authorization: str
    body: Any


@dataclass
class Receiver:
    """A stand-in for ecron's callback and log endpoints: records each POST and answers
    the next of ``answers[kind]`` (200 for reports and 202 for lines when none is left)."""

    url: str = ""
    pushed: list[Pushed] = field(default_factory=list)
    answers: dict[str, list[int]] = field(default_factory=dict)

    def reports(self, remote_id: str) -> list[dict[str, Any]]:
        return [p.body for p in self.pushed if p.kind == "report" and p.remote_id == remote_id]

    def lines(self, remote_id: str) -> list[str]:
        return [line for p in self.pushed if p.kind == "logs" and p.remote_id == remote_id
                for line in p.body["lines"]]  # fmt: skip

    def callback_headers(self, remote_id: str) -> dict[str, str]:
        """The headers of a trigger from a daemon whose public URL is this stand-in."""
        return {
            "X-Ecron-Callback-Url": f"{self.url}/api/v1/executions/{remote_id}/report",
            "X-Ecron-Callback-Token": f"token-of-{remote_id}",
        }

    def _handler(self, kind: str) -> Callable[[web.Request], Awaitable[web.Response]]:
        async def handle(request: web.Request) -> web.Response:
            self.pushed.append(
                Pushed(
                    kind,
                    request.match_info["eid"],
                    request.headers.get("Authorization", ""),
                    await request.json(),
                )
            )
            waiting = self.answers.get(kind)
            status = waiting.pop(0) if waiting else (200 if kind == "report" else 202)
            return web.json_response({"status": status}, status=status)

        return handle


@asynccontextmanager
async def receiving() -> AsyncIterator[Receiver]:
    """A ``Receiver`` on a free port of 127.0.0.1."""
    receiver = Receiver()
    app = web.Application()
    app.router.add_post("/api/v1/executions/{eid}/report", receiver._handler("report"))
    app.router.add_post("/api/v1/executions/{eid}/logs", receiver._handler("logs"))
    async with _aiohttp(app) as url:
        receiver.url = url
        yield receiver
