"""A user service written with the kit (``ecron_service``), run as its own process through
one adapter, for the tests of the kit against the daemon (tests/test_kit_daemon.py)::

    python -m tests.support.kit_service --adapter asgi|wsgi|aiohttp --port P --events FILE
        [--secret S] [--max-running N]

ASGI runs under uvicorn, WSGI under a threaded wsgiref server, aiohttp under
``web.run_app``, each as a user would run it (so SIGTERM is handled as it would be). Its
jobs write what happened to them as JSON lines in ``--events`` (``start``, ``end``,
``stopped``), and every request it answers (``request``: method, path, eid, status). A task
URL with ``?slow=<seconds>`` has the answer to the first trigger of each eid held back that
long: a slow answer, which ecron gives up on and sends again (the one real delay here).

- ``climb`` (``async def``) and ``climb-thread`` (``def``): ``body.steps`` steps (5) of
  ``body.pause`` seconds (0.1), progress rising; the result ``{"steps": n}``;
- ``raises``: raises ``RuntimeError(body.message)``;
- ``sleeps`` and ``sleeps-thread``: run until cancelled, then write ``stopped``;
- ``short``: ``body.seconds`` (0.3) between ``start`` and ``end``;
- ``resumable``: runs until stopped, unless it is a resume (``X-Ecron-Resume-Of``): then it
  ends at once with ``{"resumed": <eid>}``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import threading
import time
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from socketserver import ThreadingMixIn
from typing import Any
from urllib.parse import parse_qs
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from ecron_service import Run, Service

Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


class Events:
    """JSON lines appended to a file, one per event, from any thread."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()

    def write(self, event: str, **fields: Any) -> None:
        line = json.dumps({"event": event, "at": time.monotonic(), **fields})
        with self._lock, self.path.open("a") as file:
            file.write(line + "\n")


def read_events(path: Path) -> list[dict[str, Any]]:
    """Every event written so far."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def make_service(events: Events, secret: str | None, max_running: int | None) -> Service:
    """The service and its jobs (see the module's docstring)."""
    service = Service(secret=secret, max_running=max_running, heartbeat=1.0)
    add_working_jobs(service, events)
    add_stopping_jobs(service, events)
    return service


def started(events: Events, run: Run) -> None:
    events.write("start", job=run.job, eid=run.execution_id, resume_of=run.resume_of)


def add_working_jobs(service: Service, events: Events) -> None:
    """``climb``, ``climb-thread``, ``raises``, ``short``."""

    @service.job("climb")
    async def climb(run: Run) -> dict[str, int]:
        started(events, run)
        steps = run.body.get("steps", 5)
        for step in range(1, steps + 1):
            await asyncio.sleep(run.body.get("pause", 0.1))
            await run.progress(100 * step / (steps + 1), f"step {step} of {steps}")
        return {"steps": steps}

    @service.job("climb-thread")
    def climb_thread(run: Run) -> dict[str, int]:
        started(events, run)
        steps = run.body.get("steps", 5)
        for step in range(1, steps + 1):
            time.sleep(run.body.get("pause", 0.1))
            run.progress(100 * step / (steps + 1), f"step {step} of {steps}")
        return {"steps": steps}

    @service.job("raises")
    async def raises(run: Run) -> None:
        started(events, run)
        raise RuntimeError(run.body.get("message", "it failed"))

    @service.job("short")
    async def short(run: Run) -> None:
        started(events, run)
        await asyncio.sleep(run.body.get("seconds", 0.3))
        events.write("end", job=run.job, eid=run.execution_id)


def add_stopping_jobs(service: Service, events: Events) -> None:
    """``sleeps``, ``sleeps-thread``, ``resumable``: jobs that run until they are stopped."""

    @service.job("sleeps")
    async def sleeps(run: Run) -> None:
        started(events, run)
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            events.write("stopped", job=run.job, eid=run.execution_id)
            raise

    @service.job("sleeps-thread")
    def sleeps_thread(run: Run) -> None:
        started(events, run)
        while not run.cancelled:
            time.sleep(0.01)
        events.write("stopped", job=run.job, eid=run.execution_id)

    @service.job("resumable")
    async def resumable(run: Run) -> dict[str, str]:
        started(events, run)
        if run.resume_of is None:
            await asyncio.Event().wait()  # until the service stops
        return {"resumed": str(run.resume_of)}


class Recorder:
    """What each adapter's wrapper calls: which answers to hold back, and the record."""

    def __init__(self, events: Events) -> None:
        self.events = events
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def delay(self, method: str, query: str, eid: str) -> float:
        """Seconds to hold back this answer: ``slow`` of a first trigger of ``eid``."""
        slow = parse_qs(query).get("slow")
        if method != "POST" or not slow:
            return 0.0
        with self._lock:
            if eid in self._seen:
                return 0.0
            self._seen.add(eid)
        return float(slow[0])

    def record(self, method: str, path: str, eid: str, status: int) -> None:
        self.events.write("request", method=method, path=path, eid=eid, status=status)


def eid_of(path: str, header: str | None) -> str:
    """The remote id a request is about: the header, or the path's last part."""
    return header or path.rstrip("/").rsplit("/", 1)[-1]


def asgi_recorded(app: Any, recorder: Recorder) -> Any:
    """The ASGI application ``app`` with its answers recorded (and held back when asked)."""

    async def wrapped(scope: MutableMapping[str, Any], receive: Any, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        header = headers.get(b"x-ecron-execution-id", b"").decode() or None
        eid = eid_of(scope["path"], header)
        query = scope["query_string"].decode()
        delay = recorder.delay(scope["method"], query, eid)

        async def sending(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                await asyncio.sleep(delay)
                recorder.record(scope["method"], scope["path"], eid, message["status"])
            await send(message)

        await app(scope, receive, sending)

    return wrapped


def wsgi_recorded(app: Any, recorder: Recorder) -> Any:
    """The WSGI application ``app`` with its answers recorded (and held back when asked)."""

    def wrapped(environ: dict[str, Any], start_response: Any) -> Any:
        method, path = environ["REQUEST_METHOD"], environ.get("PATH_INFO", "")
        eid = eid_of(path, environ.get("HTTP_X_ECRON_EXECUTION_ID"))
        delay = recorder.delay(method, environ.get("QUERY_STRING", ""), eid)
        answered: list[int] = []

        def starting(status: str, headers: Any, *rest: Any) -> Any:
            answered.append(int(status.split()[0]))
            return start_response(status, headers, *rest)

        body = app(environ, starting)
        time.sleep(delay)
        recorder.record(method, path, eid, answered[0])
        return body

    return wrapped


def serve_aiohttp(service: Service, recorder: Recorder, port: int) -> None:
    from aiohttp import web

    @web.middleware
    async def recorded(request: web.Request, handler: Any) -> web.StreamResponse:
        eid = eid_of(request.path, request.headers.get("X-Ecron-Execution-Id"))
        delay = recorder.delay(request.method, request.query_string, eid)
        response: web.StreamResponse = await handler(request)
        await asyncio.sleep(delay)
        recorder.record(request.method, request.path, eid, response.status)
        return response

    app = service.aiohttp_app()
    app.middlewares.append(recorded)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


class _ThreadingWSGIServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--adapter", choices=["asgi", "wsgi", "aiohttp"], required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--events", type=Path, required=True)
    parser.add_argument("--secret")
    parser.add_argument("--max-running", type=int)
    args = parser.parse_args()
    events = Events(args.events)
    service = make_service(events, args.secret, args.max_running)
    recorder = Recorder(events)
    if args.adapter == "aiohttp":
        serve_aiohttp(service, recorder, args.port)
    elif args.adapter == "asgi":
        import uvicorn

        app = asgi_recorded(service.asgi(), recorder)
        uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")
    else:
        app = wsgi_recorded(service.wsgi(), recorder)
        server = make_server(
            "127.0.0.1",
            args.port,
            app,
            server_class=_ThreadingWSGIServer,
            handler_class=_QuietHandler,
        )
        server.serve_forever()


if __name__ == "__main__":
    main()
