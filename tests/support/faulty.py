"""User services that misbehave beyond the protocol's outcome table, on 127.0.0.1.

Two kinds: aiohttp answers (``Answer``, for ``UserService.script`` or an app of their own)
for what an aiohttp server can be made to send (a huge body, an endless chunked body,
invalid UTF-8, deep nesting), and ``RawService``, a plain asyncio TCP server, for what
aiohttp's server cannot do (never answer, trickle the header bytes, close in mid-body).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field

from aiohttp import web

from tests.support.service import held_back

Answer = Callable[[web.Request], Awaitable[web.StreamResponse | None]]

MIB = 1024 * 1024
#: The start of a report: what a service that breaks down in mid-answer got out.
REPORT_START = b'{"status": "RUNNING", "message": "'


def huge_body(size: int = 2 * MIB, status: int = 200) -> Answer:
    """A body of ``size`` bytes with its Content-Length: over the cap before a byte is read."""
    body = REPORT_START + b"a" * size + b'"}'

    async def answer(_request: web.Request) -> web.StreamResponse:
        return web.Response(status=status, body=body, content_type="application/json")

    return answer


def endless_body(status: int = 200, chunk: int = 64 * 1024, pause: float = 0.0) -> Answer:
    """A chunked body that never ends: ``chunk`` bytes after ``chunk`` bytes (``pause``
    seconds apart) until the client goes away."""
    piece = b"[" * chunk

    async def answer(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(status=status, headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        with suppress(ConnectionError):  # the client stopped reading and closed
            await response.write(REPORT_START)
            while True:
                await response.write(piece)
                await held_back(pause)
        return response

    return answer


def invalid_utf8() -> Answer:
    """A 200 whose JSON text holds bytes that are not UTF-8."""
    body = b'{"status": "RUNNING", "message": "caf\xe9 \xff\xfe"}'

    async def answer(_request: web.Request) -> web.StreamResponse:
        return web.Response(status=200, body=body, content_type="application/json")

    return answer


def nested(depth: int = 100_000, inside_a_report: bool = False) -> Answer:
    """A 200 whose JSON is ``depth`` arrays deep (alone, or as a SUCCESS report's result)."""
    value = b"[" * depth + b"]" * depth
    body = b'{"status": "SUCCESS", "result": ' + value + b"}" if inside_a_report else value

    async def answer(_request: web.Request) -> web.StreamResponse:
        return web.Response(status=200, body=body, content_type="application/json")

    return answer


@dataclass
class RawService:
    """A TCP server that reads an HTTP request and then misbehaves, chosen by the first
    segment of the path: ``/silent/...`` never answers, ``/slowloris/...`` sends a status
    line and header lines one byte every ``trickle`` seconds and never ends them,
    ``/cut/...`` promises a body of 100,000 bytes, sends 100 of them and closes."""

    trickle: float = 0.02
    url: str = ""
    #: Connections accepted so far, and those still open.
    accepted: int = 0
    open: int = 0
    paths: list[str] = field(default_factory=list)
    _writers: set[asyncio.StreamWriter] = field(default_factory=set)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        self.open += 1
        self._writers.add(writer)
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            path = head.split(b" ", 2)[1].decode()
            self.paths.append(path)
            kind = path.strip("/").split("/")[0]
            if kind == "slowloris":
                await self._slowloris(writer)
            elif kind == "cut":
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n")
                writer.write(b"Content-Length: 100000\r\n\r\n" + REPORT_START + b"x" * 66)
                await writer.drain()
            else:  # silent: hold the connection until the client gives up on it
                await reader.read()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client went away: what a bounded client does
        finally:
            self.open -= 1
            self._writers.discard(writer)
            writer.close()
            with suppress(ConnectionError):
                await writer.wait_closed()

    async def _slowloris(self, writer: asyncio.StreamWriter) -> None:
        lines = b"HTTP/1.1 200 OK\r\n"
        number = 0
        while True:
            for byte in lines:
                writer.write(bytes([byte]))
                await writer.drain()
                await held_back(self.trickle)
            number += 1
            lines = f"X-Padding-{number}: {'a' * 8}\r\n".encode()


@asynccontextmanager
async def raw_service(trickle: float = 0.02) -> AsyncIterator[RawService]:
    """A ``RawService`` listening on a free port of 127.0.0.1 (``service.url``)."""
    service = RawService(trickle=trickle)
    server = await asyncio.start_server(service._handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    service.url = f"http://127.0.0.1:{port}"
    try:
        yield service
    finally:
        server.close()
        for writer in list(service._writers):  # connections left open by a test that failed
            writer.close()
        await server.wait_closed()


@asynccontextmanager
async def answering(answers: dict[str, Answer]) -> AsyncIterator[str]:
    """An aiohttp service answering ``/<name>`` and ``/<name>/<anything>`` (any method) with
    ``answers[name]``; its base URL."""
    app = web.Application()
    for name, answer in answers.items():

        async def handle(request: web.Request, answer: Answer = answer) -> web.StreamResponse:
            await request.read()
            given = await answer(request)
            assert given is not None
            return given

        app.router.add_route("*", f"/{name}", handle)
        app.router.add_route("*", f"/{name}/{{rest:.*}}", handle)
    runner = web.AppRunner(app, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()
