"""An example user service for ecron tasks in ``mode: queue``: it reports through Redis.

ecron never polls a queue task, and this worker has no endpoint for reports: it pushes
them to the Redis stream named in the trigger's ``X-Ecron-Report-Stream`` header, as
``XADD <stream> MAXLEN ~ 10000 * execution_id <eid> token <X-Ecron-Callback-Token>
report <JSON>``: a RUNNING report every ``report_every`` seconds, then SUCCESS (or
FAILED). Only what the protocol requires is served over HTTP: ``POST /jobs/{kind}``
starts a job for the eid in ``X-Ecron-Execution-Id`` (or answers the report of the job
it already has: triggers are idempotent by eid), and ``DELETE /jobs/{kind}/{eid}``
cancels one (404 ``UNKNOWN`` for an eid it does not know). The trigger body may hold
``{"duration": 8}`` (seconds) and ``{"fail": true}``.

Run it with ``python examples/queue_worker.py --port 8083 --redis redis://127.0.0.1:6379/0``
(needs ``pip install 'redis>=5'``); see examples/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from redis.asyncio import Redis
from redis.exceptions import RedisError

log = logging.getLogger("queue_worker")

#: Tries per report message, and the first wait between two (doubled each time).
XADD_ATTEMPTS, XADD_BACKOFF = 5, 0.2
#: The stream is trimmed to about this many messages by each XADD (ecron never trims it).
STREAM_LENGTH = 10_000


@dataclass
class Job:
    """One execution as this worker sees it, and where its reports go."""

    kind: str
    eid: str
    duration: float
    fail: bool
    stream: str
    token: str
    status: str = "RUNNING"
    progress: float = 0
    message: str = "accepted"
    runner: asyncio.Task[None] | None = None

    def report(self) -> dict[str, Any]:
        """The report: status, progress, message, and a result on SUCCESS."""
        report: dict[str, Any] = {
            "status": self.status,
            "progress": self.progress,
            "message": self.message,
        }
        if self.status == "SUCCESS":
            report["result"] = {"kind": self.kind, "seconds": self.duration}
        return report


class QueueWorker:
    """The jobs, by (kind, eid), and the Redis client their reports go through."""

    def __init__(self, redis: Redis, *, default_duration: float, report_every: float) -> None:
        self.redis = redis
        self.default_duration = default_duration
        self.report_every = report_every
        self.jobs: dict[tuple[str, str], Job] = {}
        #: Every report message sent: (eid, report), in order.
        self.sent: list[tuple[str, dict[str, Any]]] = []

    async def trigger(self, request: web.Request) -> web.Response:
        """``POST /jobs/{kind}``: start the job once per eid; answer its current report."""
        kind, eid = request.match_info["kind"], request.headers.get("X-Ecron-Execution-Id", "")
        body = await request.read()
        if not eid:
            return _error(400, "no X-Ecron-Execution-Id header")
        job = self.jobs.get((kind, eid))
        if job is None:
            stream = request.headers.get("X-Ecron-Report-Stream")
            token = request.headers.get("X-Ecron-Callback-Token")
            if not stream or not token:
                return _error(400, "no X-Ecron-Report-Stream or token: give ecron a queue")
            try:
                options = json.loads(body) if body else {}
                duration = float(options.get("duration", self.default_duration))
            except (ValueError, TypeError, AttributeError):
                return _error(400, "the body must be JSON like {'duration': 8}")
            job = Job(kind, eid, duration, bool(options.get("fail")), stream, token)
            self.jobs[(kind, eid)] = job
            job.runner = asyncio.create_task(self._run(job), name=f"job {kind}/{eid}")
        return web.json_response(job.report())

    async def cancel(self, request: web.Request) -> web.Response:
        """``DELETE /jobs/{kind}/{eid}``: stop the job; its final report is the answer."""
        job = self.jobs.get((request.match_info["kind"], request.match_info["eid"]))
        if job is None:
            return web.json_response({"status": "UNKNOWN"}, status=404)
        if job.status == "RUNNING":
            if job.runner is not None:
                job.runner.cancel()
            job.status, job.message = "FAILED", "cancelled"
        return web.json_response(job.report())

    async def _run(self, job: Job) -> None:
        """Work in steps of ``report_every``, pushing each step's report, then the end."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        while (elapsed := loop.time() - started) < job.duration:
            if job.fail and elapsed >= job.duration / 2:
                job.status, job.message = "FAILED", "the job failed half-way"
                break
            job.progress = round(100 * elapsed / job.duration, 1)
            job.message = f"{job.progress}% done"
            await self.push(job)
            await asyncio.sleep(min(self.report_every, job.duration - elapsed))
        else:
            job.status, job.progress, job.message = "SUCCESS", 100, "done"
        await self.push(job)

    async def push(self, job: Job) -> None:
        """XADD the job's report, tried again with backoff while Redis is away."""
        report = job.report()
        fields = {"execution_id": job.eid, "token": job.token, "report": json.dumps(report)}
        for attempt in range(XADD_ATTEMPTS):
            try:
                await self.redis.xadd(
                    job.stream,
                    fields,  # type: ignore[arg-type]
                    maxlen=STREAM_LENGTH,
                    approximate=True,
                )
                self.sent.append((job.eid, report))
                return
            except RedisError as exc:
                log.warning("report about %s not sent (%s), try %d", job.eid, exc, attempt + 1)
                await asyncio.sleep(XADD_BACKOFF * 2**attempt)


WORKER = web.AppKey("queue_worker", QueueWorker)


def _error(status: int, text: str) -> web.Response:
    return web.json_response({"error": text}, status=status)


def make_app(
    redis_url: str, *, default_duration: float = 8.0, report_every: float = 1.0
) -> web.Application:
    """The worker's application; its Redis client is closed and its jobs stopped at cleanup."""
    worker = QueueWorker(
        Redis.from_url(redis_url), default_duration=default_duration, report_every=report_every
    )
    app = web.Application()
    app[WORKER] = worker
    app.router.add_post("/jobs/{kind}", worker.trigger)
    app.router.add_delete("/jobs/{kind}/{eid}", worker.cancel)

    async def close(_app: web.Application) -> None:
        for job in worker.jobs.values():
            if job.runner is not None:
                job.runner.cancel()
        await worker.redis.aclose()

    app.on_cleanup.append(close)
    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8083)
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0", help="Redis URL")
    parser.add_argument("--duration", type=float, default=8.0, help="default job seconds")
    parser.add_argument("--report-every", type=float, default=1.0, help="seconds between reports")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO)
    app = make_app(args.redis, default_duration=args.duration, report_every=args.report_every)
    web.run_app(app, host=args.host, port=args.port)


if __name__ == "__main__":
    main()
