"""An example user service for ecron tasks in ``mode: callback``: it pushes its reports.

ecron never polls a callback task. ``POST /jobs/{kind}`` starts a job for the eid in
``X-Ecron-Execution-Id`` (or answers the report of the job it already has), then
POSTs a RUNNING report every ``report_every`` seconds, and SUCCESS or FAILED at the
end, to ``X-Ecron-Callback-Url`` with ``Authorization: Bearer <X-Ecron-Callback-Token>``.
A callback is retried with backoff after a transport error or a 5xx; a 409 means
ecron has ended the execution (cancelled, timed out): the job stops. ``GET`` and
``DELETE /jobs/{kind}/{eid}`` report and cancel (ecron cancels by DELETE in every
mode). The trigger body may hold ``{"duration": 8}`` (seconds) and ``{"fail": true}``.
Run it with ``python examples/callback_service.py --port 8082``; see examples/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from ecron.signing import verify

log = logging.getLogger("callback_service")

#: Tries per callback, the first wait between two (doubled each time) and each one's timeout.
CALLBACK_ATTEMPTS, CALLBACK_BACKOFF, CALLBACK_TIMEOUT = 4, 0.2, 10.0

_REMOTE_ID = re.compile(r"[A-Za-z0-9_.-]{1,64}")


@dataclass
class Job:
    """One execution as this service sees it, and where to push its reports."""

    kind: str
    eid: str
    duration: float
    fail: bool
    callback_url: str | None
    token: str
    status: str = "RUNNING"
    progress: float = 0
    message: str = "accepted"
    result: dict[str, Any] | None = None
    #: The HTTP status of every callback answer, in order (None: no answer at all).
    answers: list[int | None] = field(default_factory=list)
    runner: asyncio.Task[None] | None = None

    def report(self) -> dict[str, Any]:
        """The report: status, progress, message, and a result on SUCCESS."""
        report: dict[str, Any] = {"status": self.status, "progress": self.progress}
        report["message"] = self.message
        return report if self.result is None else {**report, "result": self.result}


class CallbackService:
    """The jobs this process knows, keyed by (kind, eid), and how their reports are pushed."""

    def __init__(self, default_duration: float, report_every: float) -> None:
        self.default_duration = default_duration
        self.report_every = report_every
        self.jobs: dict[tuple[str, str], Job] = {}
        self.session: aiohttp.ClientSession | None = None

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
        except ValueError as exc:  # json.JSONDecodeError is a ValueError
            return _error(400, f"the body is not JSON: {exc}")
        duration = params.get("duration", self.default_duration) if isinstance(params, dict) else -1
        if isinstance(duration, bool) or not isinstance(duration, int | float) or duration < 0:
            return _error(400, "the body must be a JSON object; 'duration' a number of seconds")
        callback_url = request.headers.get("X-Ecron-Callback-Url")
        token = request.headers.get("X-Ecron-Callback-Token", "")
        job = Job(kind, eid, float(duration), params.get("fail") is True, callback_url, token)
        if callback_url is None:
            log.warning("job %s/%s has no X-Ecron-Callback-Url: set public_url", kind, eid)
        job.runner = asyncio.create_task(self._work(job), name=f"job {kind}/{eid}")
        self.jobs[kind, eid] = job
        return web.json_response(job.report())

    async def poll(self, request: web.Request) -> web.Response:
        """GET /jobs/{kind}/{eid}: the job's current report, or 404 UNKNOWN."""
        job = self.jobs.get((request.match_info["kind"], request.match_info["eid"]))
        return _unknown() if job is None else web.json_response(job.report())

    async def cancel(self, request: web.Request) -> web.Response:
        """DELETE /jobs/{kind}/{eid}: stop the job (pushing nothing more) and answer its report."""
        job = self.jobs.get((request.match_info["kind"], request.match_info["eid"]))
        if job is None:
            return _unknown()
        if job.runner is not None and not job.runner.done():
            job.runner.cancel()
            await asyncio.wait({job.runner})
        if job.status == "RUNNING":  # a job that had ended keeps its report
            job.status, job.message = "FAILED", "cancelled"
        return web.json_response(job.report())

    async def lifetime(self, app: web.Application) -> AsyncIterator[None]:
        """One HTTP session for every callback while the application runs; at the end,
        every running job is stopped."""
        async with aiohttp.ClientSession() as session:
            self.session = session
            yield
            runners = {job.runner for job in self.jobs.values() if job.runner}
            for runner in runners:
                runner.cancel()
            if runners:
                await asyncio.wait(runners)
            self.session = None

    async def _work(self, job: Job) -> None:
        """Run the job, pushing RUNNING reports on the way and the final report at the end."""
        started = time.monotonic()
        try:
            while True:
                left = job.duration - (time.monotonic() - started)
                await asyncio.sleep(max(0.0, min(self.report_every, left)))
                elapsed = time.monotonic() - started
                if elapsed >= job.duration:
                    job.status, job.progress, job.message = "SUCCESS", 100, "done"
                    job.result = {"kind": job.kind, "seconds": job.duration}
                    break
                if job.fail and elapsed >= job.duration / 2:
                    job.status, job.message = "FAILED", f"{job.kind} failed half-way, as asked"
                    break
                job.progress = round(100 * elapsed / job.duration, 1)
                job.message = f"{job.progress}% done"
                if not await self._push(job):  # ecron has ended the execution: stop the work
                    job.status, job.message = "FAILED", "stopped: ecron had ended the execution"
                    return
        except Exception as exc:  # a crash must end the job, or ecron would wait for nothing
            log.exception("job %s/%s crashed", job.kind, job.eid)
            job.status, job.message = "FAILED", f"crashed: {exc!r}"
        log.info("job %s/%s ended %s: %s", job.kind, job.eid, job.status, job.message)
        await self._push(job)

    async def _push(self, job: Job) -> bool:
        """POST the job's report to ecron, retrying transport errors and 5xx with backoff.

        False when ecron has ended the execution (409). Another 4xx (a wrong URL or
        token) stops the pushing, not the work; GET still answers the report.
        """
        if job.callback_url is None or self.session is None:
            return True
        headers = {"Authorization": f"Bearer {job.token}"}
        timeout = aiohttp.ClientTimeout(total=CALLBACK_TIMEOUT)
        status: int | None = None
        detail = ""
        for attempt in range(1, CALLBACK_ATTEMPTS + 1):
            status = None
            try:
                async with self.session.post(
                    job.callback_url, json=job.report(), headers=headers, timeout=timeout
                ) as response:
                    status, detail = response.status, await response.text()
            except (aiohttp.ClientError, TimeoutError) as exc:
                detail = f"{type(exc).__name__}: {exc}"
            job.answers.append(status)
            if status is not None and status < 500:
                break
            if attempt < CALLBACK_ATTEMPTS:
                wait = CALLBACK_BACKOFF * 2 ** (attempt - 1)
                log.warning("callback for %s failed (%s); retry in %gs", job.eid, detail, wait)
                await asyncio.sleep(wait)
        if status == 409:
            log.info("ecron has ended %s; no more reports: %s", job.eid, detail[:200])
            return False
        if status is not None and 400 <= status < 500:
            log.error("callback for %s refused (%s); no more: %s", job.eid, status, detail[:200])
            job.callback_url = None
        elif status is None or status >= 300:
            log.error("callback for %s lost after %d tries: %s", job.eid, attempt, detail[:200])
        return True


def _error(status: int, text: str) -> web.Response:
    return web.json_response({"error": text}, status=status)


def _unknown() -> web.Response:
    return web.json_response({"status": "UNKNOWN"}, status=404)


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


#: Where a running application keeps its service (tests read its jobs through it).
SERVICE = web.AppKey("service", CallbackService)


def make_app(
    secret: str | None = None, default_duration: float = 8.0, report_every: float = 1.0
) -> web.Application:
    """The service as an aiohttp application; requests must be signed when ``secret`` is set."""
    service = CallbackService(default_duration, report_every)
    app = web.Application(middlewares=[signature_middleware(secret)] if secret else [])
    app[SERVICE] = service
    app.add_routes(
        [
            web.post("/jobs/{kind}", service.trigger),
            web.get("/jobs/{kind}/{eid}", service.poll),
            web.delete("/jobs/{kind}/{eid}", service.cancel),
        ]
    )
    app.cleanup_ctx.append(service.lifetime)
    return app


def main() -> None:
    """Run the service from the command line."""
    parser = argparse.ArgumentParser(description="An example callback-mode user service.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8082)
    parser.add_argument(
        "--secret",
        default=os.environ.get("EXAMPLE_SECRET") or None,
        help="verify X-Ecron-Signature with this secret (default: $EXAMPLE_SECRET)",
    )
    parser.add_argument("--duration", type=float, default=8.0, help="default job length, seconds")
    parser.add_argument("--report-every", type=float, default=1.0, help="seconds between reports")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    app = make_app(args.secret, args.duration, args.report_every)
    web.run_app(app, host=args.host, port=args.port)


if __name__ == "__main__":
    main()
