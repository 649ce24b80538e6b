"""Helpers for the protocol tests: misbehaving answers, and running one execution to its end."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
from aiohttp import web

from ecron.core import Execution
from ecron.daemon import Daemon
from tests.support.service import UserService, held_back, wait_for

Answer = Callable[[web.Request], Awaitable[web.StreamResponse | None]]


def reply(status: int, body: Any = None, *, text: str | None = None, **headers: str) -> Answer:
    """An answer with this status and a JSON body (or a raw text body)."""

    async def answer(_request: web.Request) -> web.StreamResponse:
        if text is not None:
            return web.Response(status=status, text=text, content_type="text/html", headers=headers)
        return web.json_response(body, status=status, headers=headers)

    return answer


def slow(seconds: float, then: Answer | None = None) -> Answer:
    """Hold the answer back for ``seconds`` (longer than request_timeout: no answer arrives)."""

    async def answer(request: web.Request) -> web.StreamResponse | None:
        await held_back(seconds)
        return None if then is None else await then(request)

    return answer


def started_then_slow(service: UserService, seconds: float) -> Answer:
    """Start the job, then hold the answer back: the work runs, the answer is lost."""

    async def answer(request: web.Request) -> web.StreamResponse:
        eid = request.headers["X-Ecron-Execution-Id"]
        await service.start(eid)
        await held_back(seconds)
        return web.json_response({"status": "RUNNING"})

    return answer


def reset() -> Answer:
    """Close the connection without answering (a reset after the request was sent)."""

    async def answer(request: web.Request) -> web.StreamResponse:
        assert request.transport is not None
        request.transport.close()
        return web.Response(status=200)

    return answer


def huge(status: int = 200, size: int = 10 * 1024 * 1024) -> Answer:
    """A 2xx whose body is far over the 1 MiB cap."""

    async def answer(_request: web.Request) -> web.StreamResponse:
        return web.Response(
            status=status, body=b'{"status": "RUNNING", "x": "' + b"a" * size + b'"}'
        )

    return answer


def times(count: int, answer: Answer) -> list[Answer]:
    """The same answer ``count`` times (for ``UserService.script``)."""
    return [answer] * count


async def run_once(daemon: Daemon, task: str) -> str:
    """Start ``task`` through the API; the new execution's id."""
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            f"http://127.0.0.1:{daemon.port}/api/v1/tasks/{task}/run", json={}
        ) as response,
    ):
        assert response.status == 202, await response.text()
        eid: str = (await response.json())["id"]
        return eid


async def ended(daemon: Daemon, eid: str, timeout: float = 15.0) -> Execution:
    """Wait for execution ``eid`` to be final; the stored execution."""

    async def final() -> Execution | None:
        execution = await daemon.store.get_execution(eid)
        return execution if execution is not None and execution.is_final else None

    result: Execution = await wait_for(final, timeout=timeout)
    await daemon.writer.drain()
    return result
