"""``Service``: the jobs a user service runs, and the protocol's answers (PROTOCOL.md) to
ecron's trigger, poll, cancel and batch poll, whichever adapter carried them."""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import parse_qs

from ecron_service.board import Board
from ecron_service.launch import BackgroundLoop, Job, launch
from ecron_service.protocol import (
    JOB_NAME,
    REMOTE_ID,
    UNKNOWN,
    Answer,
    Call,
    answer,
    error,
    parse_attempt,
    parse_body,
    parse_time,
)
from ecron_service.push import Pusher, push_state
from ecron_service.run import RUNNING, Run
from ecron_service.signing import verify
from ecron_service.stopping import stop_on_sigterm

if TYPE_CHECKING:
    from aiohttp import web

    from ecron_service.asgi import ASGIApp
    from ecron_service.wsgi import WSGIApp

J = TypeVar("J", bound=Job)


class Service:
    """The jobs of one user service, each served at ``/jobs/{name}`` by ``asgi()``,
    ``wsgi()`` or ``aiohttp_app()``.

    ``secret``: check ``X-Ecron-Signature`` (``v2``) on every call and answer 401 without
    a valid one (the task's ``secret``). ``max_running``: past that many running jobs, a
    trigger for a new execution is answered 429 with ``Retry-After: retry_after`` (ecron
    holds the task's triggers back until then, spending no attempt). ``keep_ended``: how
    long an ended run's report is kept (seconds or a ``timedelta``; then 404 ``UNKNOWN``).
    ``push_every`` and ``heartbeat``: where ecron offers a callback URL, the least time
    between two pushed RUNNING reports, and the most without one (seconds).
    """

    def __init__(
        self,
        secret: str | None = None,
        max_running: int | None = None,
        keep_ended: float | timedelta = 3600.0,
        *,
        retry_after: int = 1,
        push_every: float = 1.0,
        heartbeat: float = 30.0,
        logger: logging.Logger | None = None,
    ) -> None:
        if max_running is not None and (isinstance(max_running, bool) or max_running < 1):
            raise ValueError(f"Service: max_running must be at least 1, not {max_running!r}")
        keep = keep_ended.total_seconds() if isinstance(keep_ended, timedelta) else keep_ended
        if not math.isfinite(keep) or keep < 0:
            raise ValueError(f"Service: keep_ended must be 0 seconds or more, not {keep_ended!r}")
        if isinstance(retry_after, bool) or not isinstance(retry_after, int) or retry_after < 1:
            raise ValueError(
                f"Service: retry_after must be whole seconds, 1 or more, not {retry_after!r}"
            )
        for name, value in (("push_every", push_every), ("heartbeat", heartbeat)):
            if not math.isfinite(value) or value <= 0:
                raise ValueError(f"Service: {name} must be more than 0 seconds, not {value!r}")
        self.secret = secret or None
        self.max_running = max_running
        self.retry_after = retry_after
        self.logger = logger or logging.getLogger("ecron_service")
        self._jobs: dict[str, Job] = {}
        self._board = Board(float(keep), self.logger)
        self._pusher = Pusher(self._board.lock, self.logger, every=push_every, heartbeat=heartbeat)
        self._board.pusher = self._pusher
        self._background = BackgroundLoop()
        self._stopping = False

    def __repr__(self) -> str:
        return f"<Service jobs={sorted(self._jobs)} running={self.running}>"

    # -- jobs ---------------------------------------------------------------------------------

    def job(self, name: str) -> Callable[[J], J]:
        """Serve the decorated function as the job ``name``: ``POST /jobs/{name}`` starts
        it, ``GET``/``DELETE /jobs/{name}/{eid}`` poll and cancel a run, ``GET
        /jobs/{name}?ids=...`` polls many. An ``async def`` runs on the event loop (a cancel
        ends it at its next await); a ``def`` in a thread (it sees ``run.cancelled``)."""
        if not isinstance(name, str) or not JOB_NAME.fullmatch(name):
            raise ValueError(
                f"Service.job: the name {name!r} must be 1 to 200 of [A-Za-z0-9_.~-] (it is a "
                "path segment)"
            )
        if name in self._jobs:
            raise ValueError(f"Service.job: there is already a job named {name!r}")

        def register(function: J) -> J:
            if not callable(function):
                raise TypeError(f"Service.job({name!r}) decorates a function, not {function!r}")
            self._jobs[name] = function
            return function

        return register

    @property
    def jobs(self) -> list[str]:
        """The names of the jobs, sorted."""
        return sorted(self._jobs)

    @property
    def running(self) -> int:
        """How many jobs are running (a cancelled ``def`` job counts until it returns)."""
        return self._board.live

    def run(self, job: str, execution_id: str) -> Run | None:
        """The run of ``job`` under ``execution_id`` (None when this service does not know it)."""
        with self._board.lock:
            return self._board.runs.get((job, execution_id))

    # -- the protocol -------------------------------------------------------------------------

    def handle(self, call: Call) -> Answer:
        """The answer to one call of ecron's (the adapters' common part)."""
        if self.secret is not None and not self._signed(call):
            return error(401, "X-Ecron-Signature is missing, wrong or more than 5 minutes old")
        if call.eid is None:
            if call.method == "POST":
                return self._trigger(call)
            if call.method == "GET":
                return self._batch(call)
            return error(405, f"{call.method} is not answered here", ("Allow", "GET, POST"))
        if call.method == "GET":
            return self._poll(call.job, call.eid)
        if call.method == "DELETE":
            return self._cancel(call.job, call.eid)
        return error(405, f"{call.method} is not answered here", ("Allow", "DELETE, GET"))

    def _signed(self, call: Call) -> bool:
        assert self.secret is not None
        header = call.headers.get("x-ecron-signature") or ""
        eid = call.headers.get("x-ecron-execution-id") or ""
        return verify(self.secret, header, call.method, call.target, eid, call.body)

    def _trigger(self, call: Call) -> Answer:
        """POST /jobs/{name}: start the run of this eid, or answer the one already started."""
        eid = call.headers.get("x-ecron-execution-id") or ""
        if not REMOTE_ID.fullmatch(eid):
            return error(
                400, f"X-Ecron-Execution-Id must be 1 to 64 of [A-Za-z0-9_.-], not {eid!r}"
            )
        job = self._jobs.get(call.job)
        if job is None:
            return error(404, f"no job named {call.job!r} here; this service runs {self.jobs}")
        board = self._board
        with board.lock:
            board.forget_old(time.monotonic())
            known = board.runs.get((call.job, eid))
            if known is not None:  # idempotent: the same eid is the same run
                return Answer(200, known.encoded())
            refused = self._refused()
            if refused is not None:
                return refused
            try:
                run = self._new_run(call, eid)
            except ValueError as exc:
                return error(400, str(exc))
            board.add(run)
            if run.push is not None:
                self._pusher.watch(run)
            launch(board, run, job, self._background)
            self.logger.info("job %s %s started for task %s", call.job, eid, run.task or "-")
            return Answer(200, run.encoded())

    def _refused(self) -> Answer | None:
        """503 while stopping, 429 past ``max_running`` (both with ``Retry-After``)."""
        retry = ("Retry-After", str(self.retry_after))
        if self._stopping:
            return error(503, "the service is stopping: trigger it again once it is back", retry)
        if self.max_running is not None and self._board.live >= self.max_running:
            text = f"busy: {self._board.live} jobs running, max_running is {self.max_running}"
            return error(429, text, retry)
        return None

    def _new_run(self, call: Call, eid: str) -> Run:
        headers = call.headers
        run = Run(
            self._board,
            call.job,
            eid,
            {str(name).lower(): str(value) for name, value in headers.items()},
            parse_body(call.body),
            scheduled_at=parse_time(headers, "X-Ecron-Scheduled-At"),
            deadline=parse_time(headers, "X-Ecron-Deadline"),
            attempt=parse_attempt(headers),
        )
        run.push = push_state(
            headers.get("x-ecron-callback-url"), headers.get("x-ecron-callback-token")
        )
        if run.push is not None:
            run.push.sent_version = run.version  # the trigger's answer carries this report
        return run

    def _poll(self, job: str, eid: str) -> Answer:
        """GET /jobs/{name}/{eid}: the run's report, or 404 UNKNOWN."""
        board = self._board
        with board.lock:
            board.forget_old(time.monotonic())
            run = board.runs.get((job, eid))
            if run is None:
                return UNKNOWN
            if run.push is not None:
                self._pusher.polled(run)
            return Answer(200, run.encoded())

    def _batch(self, call: Call) -> Answer:
        """GET /jobs/{name}?ids=a,b: the reports of the runs it knows among ``ids``."""
        if call.job not in self._jobs:
            return error(404, f"no job named {call.job!r} here; this service runs {self.jobs}")
        ids = parse_qs(call.query).get("ids", [""])[-1]
        if not ids:
            return error(400, "ids is missing: ask GET /jobs/{name}?ids=<eid>,<eid>,...")
        reports: dict[str, Any] = {}
        board = self._board
        with board.lock:
            board.forget_old(time.monotonic())
            for eid in ids.split(","):
                run = board.runs.get((call.job, eid))
                if run is not None:
                    reports[eid] = run.report()
                    self._pusher.polled(run)
        return answer(200, {"reports": reports})

    def _cancel(self, job: str, eid: str) -> Answer:
        """DELETE /jobs/{name}/{eid}: stop the run and answer its final report."""
        with self._board.lock:
            run = self._board.runs.get((job, eid))
            if run is None:
                return UNKNOWN
            if run.halt("cancelled"):
                self.logger.info("job %s %s cancelled", job, eid)
            return Answer(200, run.encoded())

    # -- adapters and stopping ----------------------------------------------------------------

    def asgi(self) -> ASGIApp:
        """The service as an ASGI application (uvicorn, FastAPI/Starlette ``mount``)."""
        from ecron_service.asgi import asgi_app

        stop_on_sigterm(self)
        return asgi_app(self)

    def wsgi(self) -> WSGIApp:
        """The service as a WSGI application (Flask, Django, gunicorn, wsgiref)."""
        from ecron_service.wsgi import wsgi_app

        stop_on_sigterm(self)
        return wsgi_app(self)

    def aiohttp_app(self) -> web.Application:
        """The service as an aiohttp application (``web.run_app``, or ``add_subapp``);
        needs aiohttp (``pip install 'ecron-service[aiohttp]'``)."""
        try:
            from ecron_service.aio import aiohttp_app
        except ImportError as exc:
            raise ImportError(
                f"service.aiohttp_app() needs aiohttp: pip install 'ecron-service[aiohttp]' ({exc})"
            ) from exc
        stop_on_sigterm(self)
        return aiohttp_app(self)

    @asynccontextmanager
    async def lifespan(self, app: object = None) -> AsyncIterator[None]:
        """A lifespan for an ASGI framework that mounts the service (FastAPI's
        ``lifespan=service.lifespan``): the service shuts down when the application does."""
        yield
        await asyncio.to_thread(self.shutdown)

    def shutdown(self, timeout: float = 5.0) -> None:
        """Stop: new triggers are answered 503; every running job is stopped and its run
        ends FAILED with ``interrupted: true`` (ecron may resume it: the work stopped
        because the service did), pushed where ecron offered a callback URL, within
        ``timeout`` seconds. Called on SIGTERM and by each adapter's shutdown; once is
        enough, again does nothing."""
        board = self._board
        with board.lock:
            if self._stopping:
                return
            self._stopping = True
            stopped = [run for run in board.runs.values() if run.status == RUNNING]
            for run in stopped:
                run.halt("interrupted: the service is stopping", interrupted=True)
        if stopped:
            self.logger.warning("stopping: %d running jobs end FAILED interrupted", len(stopped))
        self._pusher.flush(stopped, timeout)
        self._pusher.close()
        self._background.close(timeout)
