"""The crash loops' mixed workload: real user services on 127.0.0.1 and the tasks that use
them.

- ``tests.support.service.UserService`` (poll mode): short and long jobs, the two steps of a
  multi-step task, and jobs that outlive their task timeout;
- ``examples/job_service.py``: jobs that fail (``{"fail": true}``) for a task with retries;
- ``examples/callback_service.py``: a ``mode: callback`` task, whose reports are pushed
  through a small balancer to whichever node is up (nodes come and go, and the callback
  URL a service was handed must keep working, as behind a load balancer in production).

Every service records each trigger that *started* work (a repeated trigger of an id that the
service already has starts nothing: it is deduped, as PROTOCOL.md requires), so that the
checks can count starts per remote id, not POSTs.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web
from aiohttp.typedefs import Handler

from tests.support.examples import load_example
from tests.support.service import UserService, wait_for

job_service = load_example("job_service.py")
callback_service = load_example("callback_service.py")

#: How long each kind of job of the UserService runs (seconds).
DURATIONS = {"short": 0.2, "long": 2.5, "fetch": 0.4, "load": 0.6, "slow": 30.0}
#: The poll interval of the poll-mode tasks: "one poll interval" in the bounds below.
POLL_INTERVAL = 0.3
#: How long the balancer holds a callback while no node answers (the callback service waits
#: 10 s for an answer), and how often it tries again meanwhile.
BALANCER_HOLD, BALANCER_RETRY = 8.0, 0.1

_STARTED = re.compile(r"job (?P<kind>[\w.-]+)/(?P<rid>[\w.-]+) started")


@dataclass(frozen=True)
class Start:
    """A trigger that started work at a service: the remote id and the ecron headers."""

    service: str
    remote_id: str
    task: str
    scheduled_at: str
    attempt: str


@dataclass
class StartLog:
    """The starts every service recorded, in order."""

    starts: list[Start] = field(default_factory=list)

    def per_remote_id(self) -> Counter[str]:
        return Counter(start.remote_id for start in self.starts)

    def record(self, service: str, headers: Any) -> None:
        self.starts.append(
            Start(
                service=service,
                remote_id=headers.get("X-Ecron-Execution-Id", ""),
                task=headers.get("X-Ecron-Task", ""),
                scheduled_at=headers.get("X-Ecron-Scheduled-At", ""),
                attempt=headers.get("X-Ecron-Attempt", ""),
            )
        )


class _LogLines(logging.Handler):
    """The job service's own log lines."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def _recording(name: str, jobs: Callable[[], dict[tuple[str, str], Any]], log: StartLog) -> Any:
    """A middleware that records each POST after which the service holds a job it did not
    hold before: a start. Two POSTs of one id that overlap (a killed node's trigger still in
    flight and its adopter's) both see no job before and the one job after: that job is
    recorded once, as the service started it once."""
    recorded: dict[int, Any] = {}  # by id, each job kept so that its id is not reused

    @web.middleware
    async def record(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.method != "POST":
            return await handler(request)
        key = (request.match_info.get("kind", ""), request.headers.get("X-Ecron-Execution-Id", ""))
        before = jobs().get(key)
        response = await handler(request)
        after = jobs().get(key)
        if after is not None and after is not before and id(after) not in recorded:
            recorded[id(after)] = after
            log.record(name, request.headers)
        return response

    return record


def balancer(targets: Callable[[], list[str]]) -> web.Application:
    """Forwards callbacks (``POST /api/v1/executions/{id}/report``) to the first node of
    ``targets()`` that answers, trying again while none does, for up to BALANCER_HOLD."""

    async def forward(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        headers = {
            key: value
            for key, value in request.headers.items()
            if key in ("Authorization", "Content-Type")
        }
        session: aiohttp.ClientSession = request.app[SESSION]

        async def answered() -> list[web.Response]:
            """The first node's answer (in a list: a response is an empty mapping, falsy)."""
            for base in targets():
                try:
                    async with session.post(
                        f"{base}{request.path_qs}", data=body, headers=headers
                    ) as answer:
                        return [
                            web.Response(
                                status=answer.status,
                                body=await answer.read(),
                                content_type=answer.content_type,
                            )
                        ]
                except (aiohttp.ClientError, TimeoutError):
                    continue
            return []

        try:
            [response] = await wait_for(answered, timeout=BALANCER_HOLD, interval=BALANCER_RETRY)
        except AssertionError:
            return web.json_response({"error": "no ecron node answers"}, status=503)
        return response

    async def session_context(app: web.Application) -> AsyncIterator[None]:
        timeout = aiohttp.ClientTimeout(total=5)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            app[SESSION] = session
            yield

    app = web.Application()
    app.router.add_post("/api/v1/executions/{rid}/report", forward)
    app.cleanup_ctx.append(session_context)
    return app


SESSION = web.AppKey("session", aiohttp.ClientSession)


@dataclass
class Workload:
    """The running services: their URLs, and what they saw."""

    user: UserService
    jobs: Any  # job_service.JobService
    pushes: Any  # callback_service.CallbackService
    log: StartLog
    job_log: _LogLines
    urls: dict[str, str]

    def started_remote_ids(self) -> Counter[str]:
        """Starts per remote id, at every service (UserService counts its own)."""
        counts: Counter[str] = Counter(self.user.starts)
        counts.update(self.log.per_remote_id())
        return counts

    def starts_in_job_service_log(self) -> Counter[str]:
        """Starts per remote id as the job service's own log lines tell them."""
        found = (_STARTED.search(line) for line in self.job_log.lines)
        return Counter(match["rid"] for match in found if match)


async def _serve(stack: AsyncExitStack, app: web.Application) -> str:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    stack.push_async_callback(runner.cleanup)
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return f"http://127.0.0.1:{runner.addresses[0][1]}"


@asynccontextmanager
async def serve_workload(
    targets: Callable[[], list[str]], watch: Any = None
) -> AsyncIterator[Workload]:
    """Serve the three user services and the callback balancer (``targets``: the API URLs
    of the nodes that are up); ``watch``, an aiohttp middleware, first sees every call to
    the three services (the pause loops find out which node sent each)."""
    log = StartLog()
    user = UserService(duration=0.2, durations=dict(DURATIONS), trigger_delay=0.05)
    user_app = user.app()
    jobs = job_service.JobService(default_duration=0.3)
    jobs_app = job_service.make_app(service=jobs)
    jobs_app.middlewares.insert(0, _recording("job_service", lambda: jobs.jobs, log))
    pushes_app = callback_service.make_app(default_duration=1.0, report_every=0.3)
    pushes = pushes_app[callback_service.SERVICE]
    pushes_app.middlewares.insert(0, _recording("callback_service", lambda: pushes.jobs, log))
    if watch is not None:
        for app in (user_app, jobs_app, pushes_app):
            app.middlewares.insert(0, watch)
    job_log = _LogLines()
    service_logger = logging.getLogger("job_service")
    service_logger.addHandler(job_log)
    service_logger.setLevel(logging.INFO)
    async with AsyncExitStack() as stack:
        stack.callback(service_logger.removeHandler, job_log)
        urls = {
            "user": await _serve(stack, user_app),
            "jobs": await _serve(stack, jobs_app),
            "pushes": await _serve(stack, pushes_app),
            "balancer": await _serve(stack, balancer(targets)),
        }
        user.url = urls["user"]
        yield Workload(user, jobs, pushes, log, job_log, urls)


#: The retry backoff of ``flaky``, and the delay of ``chained`` (seconds).
RETRY_BACKOFF = 0.2
AFTER_DELAY = 0.5


def workload_tasks(urls: dict[str, str]) -> str:
    """The task file: every 1 to 3 s, short and long jobs (the long task under
    ``concurrency: forbid``, so that some fire times are SKIPPED ``overlap``), two steps,
    callbacks, a job that outlives its 1 s timeout, one that fails and is retried; and a
    short job on a fixed delay (``after``), whose next fire time only an end sets."""
    user, jobs, pushes = urls["user"], urls["jobs"], urls["pushes"]
    poll = f"{int(POLL_INTERVAL * 1000)}ms"
    return f"""\
tasks:
  - name: short
    schedule: {{every: 1s}}
    url: {user}/jobs/short
    poll_interval: {poll}
    concurrency: allow
  - name: long
    schedule: {{every: 2s}}
    url: {user}/jobs/long
    poll_interval: {poll}
    task_timeout: 1m
  - name: steps
    schedule: {{every: 2s}}
    poll_interval: {poll}
    concurrency: allow
    steps:
      - {{name: fetch, url: "{user}/jobs/fetch"}}
      - {{name: load, url: "{user}/jobs/load"}}
  - name: pushed
    schedule: {{every: 2s}}
    url: {pushes}/jobs/pushed
    mode: callback
    body: {{duration: 1}}
    heartbeat_timeout: 10s
    concurrency: allow
  - name: deadline
    schedule: {{every: 3s}}
    url: {user}/jobs/slow
    poll_interval: {poll}
    task_timeout: 1s
    concurrency: allow
  - name: flaky
    schedule: {{every: 3s}}
    url: {jobs}/jobs/flaky
    body: {{duration: 0.3, fail: true}}
    poll_interval: 100ms
    retry: {{max_attempts: 1, backoff: {int(RETRY_BACKOFF * 1000)}ms}}
    concurrency: allow
  - name: chained
    schedule: {{after: {int(AFTER_DELAY * 1000)}ms}}
    url: {user}/jobs/short
    poll_interval: 100ms
"""


#: The tasks above, and the interval of each (seconds), for the fire times of a window.
EVERY = {"short": 1, "long": 2, "steps": 2, "pushed": 2, "deadline": 3, "flaky": 3}
