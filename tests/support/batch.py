"""A real user service with a batch endpoint (PROTOCOL.md, "Batch polls"): the test
``UserService`` (triggers, per-id polls and cancels, each recorded) plus ``GET
/batch/{kind}?ids=a,b,c``, which records each call and answers the reports of the jobs it
knows, unless a test scripted the answer."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from ecron.signing import verify
from tests.support.service import UserService

#: A scripted answer to one batch call, given the ids asked about.
BatchAnswer = Callable[[list[str]], Awaitable[web.StreamResponse]]


@dataclass(frozen=True)
class BatchCall:
    """One batch call the service received."""

    ids: list[str]
    #: The raw path and query as sent (what a signature covers).
    target: str
    query: dict[str, str]
    headers: dict[str, str]
    #: Whether ``X-Ecron-Signature`` verified (None: the service checks none).
    signed: bool | None


@dataclass
class BatchService:
    """The service's state, readable by tests."""

    service: UserService
    calls: list[BatchCall] = field(default_factory=list)
    #: Answers used once each, in order, before the normal answer.
    script: list[BatchAnswer] = field(default_factory=list)
    #: Per id, a report given instead of the job's (None: leave the id out).
    reports: dict[str, Any] = field(default_factory=dict)
    #: The secret signatures are verified with, and the clock they are checked against.
    secret: str | None = None
    now: Callable[[], float] = time.time
    url: str = ""

    @property
    def per_id_polls(self) -> int:
        """GETs of single executions the service received (a batch-polled task has none)."""
        return sum(1 for call in self.service.calls if call.method == "GET")

    def finish(self, remote_id: str, *, fail: bool = False) -> None:
        """The job ``remote_id`` is done: its next report is SUCCESS (or FAILED)."""
        job = self.service.jobs[remote_id]
        job.duration, job.fail = 0.0, fail

    async def _batch(self, request: web.Request) -> web.StreamResponse:
        ids = request.query.get("ids", "").split(",")
        signed = None
        if self.secret is not None:
            header = request.headers.get("X-Ecron-Signature", "")
            signed = verify(self.secret, header, "GET", request.raw_path, b"", now=self.now())
        self.calls.append(
            BatchCall(ids, request.raw_path, dict(request.query), dict(request.headers), signed)
        )
        if self.script:
            return await self.script.pop(0)(ids)
        answers: dict[str, Any] = {}
        for remote_id in ids:
            job = self.service.jobs.get(remote_id)
            answer = self.reports.get(remote_id, job and job.report(time.monotonic()))
            if answer is not None:
                answers[remote_id] = answer
        return web.json_response({"reports": answers})


@asynccontextmanager
async def batch_service(duration: float = 60.0) -> AsyncIterator[BatchService]:
    """A ``BatchService`` on a free port of 127.0.0.1; each job runs ``duration`` seconds
    unless ``finish``ed."""
    users = UserService(duration=duration)
    batch = BatchService(users)
    app = users.app()
    app.router.add_get("/batch/{kind}", batch._batch)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    users.url = batch.url = f"http://127.0.0.1:{port}"
    try:
        yield batch
    finally:
        await runner.cleanup()
