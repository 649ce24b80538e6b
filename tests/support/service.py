"""A real user service on 127.0.0.1 for the tests: it records every call and can be told,
per execution, how to behave. Each job runs for ``duration`` seconds of real time, or of a
test's clock (``on_clock``)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from ecron.clock import Clock

Behaviour = Callable[[web.Request], Awaitable[web.StreamResponse | None]]

#: The body of a POST to the API that needs none: ``{}`` as ``application/json``, as a
#: daemon without a token asks of anything that changes something (CSRF).
JSON_BODY: dict[str, object] = {}
#: The header of a POST whose body is sent as it is, as JSON.
JSON_TYPE = {"Content-Type": "application/json"}


@dataclass(frozen=True)
class Call:
    """One request the service received."""

    method: str
    path: str
    eid: str
    headers: dict[str, str]
    body: bytes
    at: float


@dataclass
class Job:
    """One execution as the service knows it."""

    eid: str
    started: float
    duration: float
    fail: bool = False
    cancelled: bool = False

    def report(self, now: float) -> dict[str, Any]:
        if self.cancelled:
            return {"status": "FAILED", "message": "cancelled"}
        elapsed = now - self.started
        if elapsed >= self.duration:
            if self.fail:
                return {"status": "FAILED", "message": "the job failed"}
            return {"status": "SUCCESS", "progress": 100, "result": {"eid": self.eid}}
        progress = round(100 * elapsed / self.duration, 1)
        return {"status": "RUNNING", "progress": progress, "message": f"{progress}%"}


@dataclass
class UserService:
    """The service's state, readable by tests."""

    duration: float = 0.5
    #: Durations by the job kind in the path (``/jobs/{kind}``), over ``duration``.
    durations: dict[str, float] = field(default_factory=dict)
    calls: list[Call] = field(default_factory=list)
    jobs: dict[str, Job] = field(default_factory=dict)
    #: Runs before the normal handling; answering something overrides it.
    behaviour: Behaviour | None = None
    #: Per method, answers used once each, in order, before the normal handling.
    script: dict[str, list[Behaviour]] = field(default_factory=dict)
    #: Seconds the trigger's answer is held back (the job has started meanwhile).
    trigger_delay: float = 0.0
    #: How many jobs each eid started (a deduping service never starts one twice).
    starts: dict[str, int] = field(default_factory=dict)
    url: str = ""
    #: What the jobs' durations are measured on (seconds): real time, unless ``on_clock``.
    job_time: Callable[[], float] = time.monotonic

    def on_clock(self, clock: Clock) -> None:
        """Run the jobs on ``clock`` (a test's clock): a job of N seconds is done once that
        clock has moved N seconds past its start. Calls are still stamped in real time."""
        self.job_time = lambda: clock.now().timestamp()

    def most_at_once(self, eids: Collection[str] | None = None) -> int:
        """The most jobs (of ``eids``, or all) that ran at once at the service, each from
        its start to its end."""
        jobs = [job for eid, job in self.jobs.items() if eids is None or eid in eids]
        moments = sorted(
            [(job.started + job.duration, -1) for job in jobs] + [(job.started, 1) for job in jobs]
        )
        most = running = 0
        for _, change in moments:
            running += change
            most = max(most, running)
        return most

    def calls_for(self, eid: str, method: str | None = None) -> list[Call]:
        """Calls about ``eid`` (optionally of one method), in order."""
        return [c for c in self.calls if c.eid == eid and (method is None or c.method == method)]

    def methods_for(self, eid: str) -> list[str]:
        """The sequence of methods received about ``eid``."""
        return [c.method for c in self.calls_for(eid)]

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_route("*", "/jobs/{kind}", self._handle)
        app.router.add_route("*", "/jobs/{kind}/{eid}", self._handle)
        return app

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        eid = request.match_info.get("eid") or request.headers.get("X-Ecron-Execution-Id", "")
        self.calls.append(
            Call(
                request.method, request.path_qs, eid, dict(request.headers), body, time.monotonic()
            )
        )
        scripted = self.script.get(request.method)
        if scripted:
            answer = await scripted.pop(0)(request)
            if answer is not None:
                return answer
        if self.behaviour is not None:
            answer = await self.behaviour(request)
            if answer is not None:
                return answer
        if request.method == "POST":
            return await self.start(eid, request.match_info.get("kind"))
        job = self.jobs.get(eid)
        if job is None:
            return web.json_response({"status": "UNKNOWN"}, status=404)
        if request.method == "DELETE":
            job.cancelled = True
        return web.json_response(job.report(self.job_time()))

    async def start(self, eid: str, kind: str | None = None) -> web.Response:
        """The normal trigger: start the job unless this eid has one (idempotent)."""
        if eid not in self.jobs:
            duration = self.durations.get(kind or "", self.duration)
            self.jobs[eid] = Job(eid, self.job_time(), duration)
            self.starts[eid] = self.starts.get(eid, 0) + 1
        if self.trigger_delay:
            await held_back(self.trigger_delay)
        return web.json_response(self.jobs[eid].report(self.job_time()))


async def held_back(seconds: float) -> None:
    """Hold a test service's answer back for ``seconds`` of real time: what a slow service
    does to ecron (an answer later than its request timeout, bytes trickling in). ecron's
    HTTP timeouts run on real time, so this cannot be a test's clock; it is the one real delay
    of the test services, and everything else in the tests waits for an event or a
    condition (``wait_for``), not for time to pass."""
    await asyncio.sleep(seconds)


async def wait_for(
    predicate: Callable[[], Any], timeout: float = 10.0, interval: float = 0.02
) -> Any:
    """Wait until ``predicate()`` is truthy (and return it), or fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        await asyncio.sleep(interval)
