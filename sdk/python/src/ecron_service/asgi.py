"""The ASGI adapter: ``service.asgi()`` under uvicorn (``uvicorn module:app``), or mounted
in FastAPI or Starlette (``app.mount("/ecron", service.asgi())``). Its lifespan shuts the
service down; a framework that does not pass the lifespan on to what it mounts takes
``lifespan=service.lifespan`` instead."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, MutableMapping
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from ecron_service.protocol import JSON_TYPE, MAX_BODY, Call, error, not_found, route

if TYPE_CHECKING:
    from ecron_service.service import Service

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

_JSON_HEADER = (b"content-type", JSON_TYPE.encode())


def asgi_app(service: Service) -> ASGIApp:
    """``service`` as an ASGI 3 application."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(service, receive, send)
            return
        if scope["type"] != "http":
            return  # no websockets here
        path = _below_mount(scope)
        routed = route(path)
        if routed is None:
            await _send(send, not_found(path).status, not_found(path).body, ())
            return
        body = await _body(receive)
        if body is None:
            too_big = error(413, f"the body is over {MAX_BODY} bytes")
            await _send(send, too_big.status, too_big.body, ())
            return
        query = scope.get("query_string", b"").decode("latin-1")
        raw = scope.get("raw_path") or quote(scope.get("root_path", "") + path).encode()
        target = raw.decode("latin-1") + (f"?{query}" if query else "")
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        call = Call(scope["method"], routed[0], routed[1], target, query, headers, body)
        answer = service.handle(call)
        extra = tuple((k.lower().encode(), v.encode()) for k, v in answer.headers)
        await _send(send, answer.status, answer.body, extra)

    return app


def _below_mount(scope: Scope) -> str:
    """The path below where the application is mounted (Starlette keeps the whole path in
    ``path`` and the mount point in ``root_path``; others strip it)."""
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    if root and path.startswith(root):
        return path[len(root) :] or "/"
    return path


async def _body(receive: Receive) -> bytes | None:
    """The request's body (None past ``MAX_BODY``)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b"".join(chunks)  # the client went away: nobody reads the answer
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def _send(
    send: Send, status: int, body: bytes, extra: tuple[tuple[bytes, bytes], ...]
) -> None:
    headers = [_JSON_HEADER, (b"content-length", str(len(body)).encode()), *extra]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _lifespan(service: Service, receive: Receive, send: Send) -> None:
    """Startup does nothing; shutdown stops the service (its running jobs end FAILED
    interrupted)."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await asyncio.to_thread(service.shutdown)
            await send({"type": "lifespan.shutdown.complete"})
            return
