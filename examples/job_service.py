"""An example user service for ecron: long-running jobs behind the HTTP task protocol.

Copy it as a starting point for your own service. It depends on aiohttp, the
standard library and ``ecron.signing.verify`` (to check ``X-Ecron-Signature``),
keeps its jobs in memory, and serves (see docs/protocol.md):

- ``POST /jobs/{kind}``: trigger. Starts a job for the eid in ``X-Ecron-Execution-Id``,
  or answers the current report of the job already started for that eid.
- ``GET /jobs/{kind}/{eid}``: poll. The job's current report; 404 ``UNKNOWN`` if unknown.
- ``DELETE /jobs/{kind}/{eid}``: cancel. Stops the job and answers its final report.
- ``GET /jobs/{kind}?ids=a,b,c``: batch poll (a task's ``batch_poll_url``). The reports of
  the jobs it knows among those eids, as ``{"reports": {eid: report}}``; the others are
  left out.

The trigger body may hold ``{"duration": "8s"}`` (or a number of seconds) and
``{"fail": true}``. Run it with ``python examples/job_service.py --port 8081``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import re
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from ecron.signing import verify

log = logging.getLogger("job_service")

#: Finished jobs stay answerable this long (seconds), and at most this many are kept.
KEEP_FINISHED_SECONDS = 3600.0
KEEP_FINISHED_MAX = 10_000
#: How many progress steps a job takes on its way to 100.
TICKS = 20

_REMOTE_ID = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)?")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


@dataclass
class Job:
    """One execution as this service sees it: the work's state and its report."""

    kind: str
    eid: str
    task: str
    duration: float
    fail: bool
    deadline: datetime | None
    status: str = "RUNNING"
    progress: int = 0
    message: str = "accepted"
    result: dict[str, Any] | None = None
    finished_at: float | None = None  # time.monotonic() at the end
    runner: asyncio.Task[None] | None = None

    def report(self) -> dict[str, Any]:
        """The report ecron reads: status, progress, message, and a result on SUCCESS."""
        report: dict[str, Any] = {
            "status": self.status,
            "progress": self.progress,
            "message": self.message,
        }
        if self.result is not None:
            report["result"] = self.result
        return report

    def finish(self, status: str, message: str, result: dict[str, Any] | None = None) -> None:
        """End the job once; a finished job's report never changes again."""
        if self.finished_at is not None:
            return
        self.status, self.message, self.result = status, message, result
        if status == "SUCCESS":
            self.progress = 100
        self.finished_at = time.monotonic()
        log.info("job %s/%s ended %s: %s", self.kind, self.eid, status, message)


def parse_duration(value: Any, default: float) -> float:
    """Seconds from a number or from text like ``"8s"``, ``"500ms"``, ``"2m"``."""
    if value is None:
        return default
    if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
        return float(value)
    if isinstance(value, str) and (match := _DURATION.fullmatch(value.strip())):
        return float(match.group(1)) * _UNITS[match.group(2) or "s"]
    raise ValueError(f"'duration' must be seconds or text like '8s' or '500ms', not {value!r}")


def parse_deadline(value: str | None) -> datetime | None:
    """The ``X-Ecron-Deadline`` header (RFC 3339) as an aware datetime, if given."""
    deadline = datetime.fromisoformat(value) if value else None  # a ValueError becomes a 400
    return deadline.replace(tzinfo=UTC) if deadline and not deadline.tzinfo else deadline


def _error(status: int, text: str) -> web.Response:
    return web.json_response({"error": text}, status=status)


def _unknown() -> web.Response:
    return web.json_response({"status": "UNKNOWN"}, status=404)


class JobService:
    """The jobs this process knows, keyed by (kind, eid), and the protocol's calls."""

    def __init__(self, default_duration: float) -> None:
        self.default_duration = default_duration
        self.jobs: dict[tuple[str, str], Job] = {}

    async def trigger(self, request: web.Request) -> web.Response:
        """POST /jobs/{kind}: start the job for this eid, or report the one already started."""
        eid = request.headers.get("X-Ecron-Execution-Id", "")
        if not _REMOTE_ID.fullmatch(eid):
            return _error(400, "X-Ecron-Execution-Id is missing or not 1-64 of [A-Za-z0-9_.-]")
        kind = request.match_info["kind"]
        raw = await request.read()  # before the lookup: no await between it and the insert
        if (job := self.jobs.get((kind, eid))) is not None:
            return web.json_response(job.report())  # idempotent: the same eid is the same job
        try:
            params = json.loads(raw) if raw.strip() else {}
            if not isinstance(params, dict):
                raise ValueError("the body must be a JSON object")
            duration = parse_duration(params.get("duration"), self.default_duration)
            deadline = parse_deadline(request.headers.get("X-Ecron-Deadline"))
        except ValueError as exc:  # json.JSONDecodeError is a ValueError too
            return _error(400, str(exc))
        self._forget_old_jobs(time.monotonic())
        task = request.headers.get("X-Ecron-Task", "-")
        job = Job(kind, eid, task, duration, params.get("fail") is True, deadline)
        job.message = f"accepted: {kind} for task {task}, about {duration:g}s"
        job.runner = asyncio.create_task(self._work(job), name=f"job {kind}/{eid}")
        self.jobs[kind, eid] = job
        attempt = request.headers.get("X-Ecron-Attempt", "?")
        log.info("job %s/%s started for task %s (attempt %s)", kind, eid, task, attempt)
        return web.json_response(job.report())

    async def poll(self, request: web.Request) -> web.Response:
        """GET /jobs/{kind}/{eid}: the job's current report, or 404 UNKNOWN."""
        job = self.jobs.get((request.match_info["kind"], request.match_info["eid"]))
        return _unknown() if job is None else web.json_response(job.report())

    async def batch_poll(self, request: web.Request) -> web.Response:
        """GET /jobs/{kind}?ids=a,b,c: the reports of the jobs known among ``ids``; an eid
        this service does not know is left out (ecron reads that as UNKNOWN)."""
        ids = request.query.get("ids", "")
        if not ids:
            return _error(400, "ids is missing: ask GET /jobs/{kind}?ids=<eid>,<eid>,...")
        kind = request.match_info["kind"]
        jobs = (self.jobs.get((kind, eid)) for eid in ids.split(","))
        return web.json_response({"reports": {job.eid: job.report() for job in jobs if job}})

    async def cancel(self, request: web.Request) -> web.Response:
        """DELETE /jobs/{kind}/{eid}: stop the job and answer its final report."""
        job = self.jobs.get((request.match_info["kind"], request.match_info["eid"]))
        if job is None:
            return _unknown()
        job.finish("FAILED", "cancelled")  # no change if it had already ended
        if job.runner is not None and not job.runner.done():
            job.runner.cancel()
            await asyncio.wait({job.runner})
        return web.json_response(job.report())

    async def close(self, app: web.Application) -> None:
        """Stop every running job when the application shuts down."""
        runners = [job.runner for job in self.jobs.values() if job.runner and not job.runner.done()]
        for runner in runners:
            runner.cancel()
        if runners:
            await asyncio.wait(runners)

    async def _work(self, job: Job) -> None:
        """Run the job, turning an unexpected error into a FAILED report."""
        try:
            await self._steps(job)
        except Exception as exc:  # a crash must end the job, or it would stay RUNNING forever
            log.exception("job %s/%s crashed", job.kind, job.eid)
            job.finish("FAILED", f"crashed: {exc!r}")

    async def _steps(self, job: Job) -> None:
        """The work itself: replace this with yours, updating ``job.progress`` as it goes."""
        for tick in range(1, TICKS + 1):
            await asyncio.sleep(job.duration / TICKS)
            if job.deadline is not None and datetime.now(UTC) >= job.deadline:
                job.finish("FAILED", f"deadline {job.deadline.isoformat()} passed")
                return
            if job.fail and tick * 2 >= TICKS:
                job.finish("FAILED", f"{job.kind} failed at {job.progress}% as asked (fail: true)")
                return
            job.progress = tick * 100 // TICKS
            job.message = f"step {tick} of {TICKS}"
        job.finish("SUCCESS", "done", {"kind": job.kind, "seconds": job.duration})

    def _forget_old_jobs(self, now: float) -> None:
        """Drop finished jobs older than KEEP_FINISHED_SECONDS, and the oldest past the cap."""
        finished = [key for key, job in self.jobs.items() if job.finished_at is not None]
        excess = len(finished) - KEEP_FINISHED_MAX
        for key in finished:
            ended = self.jobs[key].finished_at
            if excess > 0 or (ended is not None and now - ended > KEEP_FINISHED_SECONDS):
                del self.jobs[key]
                excess -= 1


def signature_middleware(secret: str) -> Middleware:
    """An aiohttp middleware that answers 401 to any request not signed with ``secret``."""

    @web.middleware
    async def check_signature(request: web.Request, handler: Handler) -> web.StreamResponse:
        header = request.headers.get("X-Ecron-Signature", "")
        body = await request.read()  # aiohttp keeps the bytes, so the handler can read them again
        eid = request.headers.get("X-Ecron-Execution-Id", "")  # v2 binds it: no replay
        try:  # raw_path is the target as sent (path and ?query, not decoded)
            valid = verify(secret, header, request.method, request.raw_path, body, execution_id=eid)
        except (ValueError, OverflowError):  # a ``t`` too long to be a time
            valid = False
        if not valid:
            return _error(401, "X-Ecron-Signature is missing, wrong or too old")
        return await handler(request)

    return check_signature


def make_app(
    secret: str | None = None, default_duration: float = 8.0, service: JobService | None = None
) -> web.Application:
    """The service as an aiohttp application; requests must be signed when ``secret`` is set.
    ``service`` holds the jobs (default: a new ``JobService``); pass your own to look at them."""
    if service is None:
        service = JobService(default_duration)
    app = web.Application(middlewares=[signature_middleware(secret)] if secret else [])
    app.add_routes(
        [
            web.post("/jobs/{kind}", service.trigger),
            web.get("/jobs/{kind}", service.batch_poll),
            web.get("/jobs/{kind}/{eid}", service.poll),
            web.delete("/jobs/{kind}/{eid}", service.cancel),
        ]
    )
    app.on_shutdown.append(service.close)
    return app


def main() -> None:
    """Run the service from the command line."""
    parser = argparse.ArgumentParser(description="An example user service for ecron.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8081)
    parser.add_argument(
        "--secret",
        default=os.environ.get("EXAMPLE_SECRET") or None,
        help="verify X-Ecron-Signature with this secret (default: $EXAMPLE_SECRET)",
    )
    parser.add_argument("--duration", type=float, default=8.0, help="default job length, seconds")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    web.run_app(make_app(args.secret, args.duration), host=args.host, port=args.port)


if __name__ == "__main__":
    main()
