"""The soak's user service (``bench.soak``): three kinds of job, told apart by the URL.

``python -m bench.soak_service --port P [--job-seconds S] [--callback-step S]`` (its own
process, pinned by the benchmark). Every trigger answers ``RUNNING`` 0 and is counted; a
second trigger of an eid already seen counts as a duplicate.

- ``/jobs/short``: short jobs, polled: the first poll answers ``SUCCESS``.
- ``/jobs/long``: long jobs, polled: each lasts between 0.2 and 1.8 times ``--job-seconds``
  (fixed by its eid, so the ends are spread out); a poll answers ``RUNNING`` with the share
  of the time gone, then ``SUCCESS``.
- ``/jobs/callback``: jobs that report by callback only (``mode: callback``): after each
  ``--callback-step`` the service posts ``RUNNING`` 30, ``RUNNING`` 70 and ``SUCCESS`` to the
  trigger's ``X-Ecron-Callback-Url`` with its token (on at most 10 connections), and counts
  the answers by status.

``GET /_stats`` gives the counters so far (``bench.soak`` takes the differences).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import time
from collections import Counter
from typing import Any

import aiohttp
from aiohttp import web

RUNNING_ZERO = {"status": "RUNNING", "progress": 0}
SUCCESS = {"status": "SUCCESS"}
#: The reports a callback job posts, one per ``--callback-step``.
CALLBACK_REPORTS = (
    {"status": "RUNNING", "progress": 30},
    {"status": "RUNNING", "progress": 70, "message": "nearly there"},
    {"status": "SUCCESS", "result": {"rows": 42}},
)

#: The most connections the callbacks are posted on at once.
CALLBACK_CONNECTIONS = 10


class Soak:
    """Everything the service remembers and counts."""

    def __init__(self, job_seconds: float, callback_step: float) -> None:
        self.job_seconds = job_seconds
        self.callback_step = callback_step
        #: label -> eids triggered; counters by name (``triggers.short``, ``polls.long``, ...).
        self.seen: dict[str, set[str]] = {}
        self.counts: Counter[str] = Counter()
        #: Long jobs: eid -> (when triggered, how long it lasts); the eids that ended.
        self.long_jobs: dict[str, tuple[float, float]] = {}
        self.long_done: set[str] = set()
        self.session: aiohttp.ClientSession | None = None
        self.reporting: set[asyncio.Task[None]] = set()

    def length(self, eid: str) -> float:
        """How long long job ``eid`` lasts: 0.2 to 1.8 times ``job_seconds``, by its eid."""
        share = int.from_bytes(hashlib.blake2b(eid.encode(), digest_size=4).digest()) / 2**32
        return self.job_seconds * (0.2 + 1.6 * share)

    async def trigger(self, request: web.Request) -> web.Response:
        label, eid = request.match_info["label"], request.headers.get("X-Ecron-Execution-Id", "")
        seen = self.seen.setdefault(label, set())
        if eid in seen:
            self.counts[f"duplicates.{label}"] += 1
            return web.json_response(RUNNING_ZERO)
        seen.add(eid)
        self.counts[f"triggers.{label}"] += 1
        if label == "long":
            self.long_jobs[eid] = (time.monotonic(), self.length(eid))
        elif label == "callback":
            url = request.headers.get("X-Ecron-Callback-Url")
            token = request.headers.get("X-Ecron-Callback-Token", "")
            if url is None:
                self.counts["callbacks.no_url"] += 1
            else:
                task = asyncio.create_task(self.report(url, token))
                self.reporting.add(task)
                task.add_done_callback(self.reporting.discard)
        return web.json_response(RUNNING_ZERO)

    async def poll(self, request: web.Request) -> web.Response:
        label, eid = request.match_info["label"], request.match_info["eid"]
        self.counts[f"polls.{label}"] += 1
        if label != "long":
            return web.json_response(SUCCESS)
        started, length = self.long_jobs.get(eid, (time.monotonic(), 0.0))
        gone = time.monotonic() - started
        if gone >= length:
            if eid in self.long_jobs and eid not in self.long_done:
                self.long_done.add(eid)
                self.counts["long.finished"] += 1
            return web.json_response(SUCCESS)
        return web.json_response({"status": "RUNNING", "progress": round(100 * gone / length, 1)})

    async def cancel(self, request: web.Request) -> web.Response:
        self.counts[f"cancels.{request.match_info['label']}"] += 1
        return web.json_response({"status": "FAILED", "message": "cancelled"})

    async def report(self, url: str, token: str) -> None:
        """Post the callback job's reports to ``url``, one every ``callback_step``."""
        assert self.session is not None
        headers = {"Authorization": f"Bearer {token}"}
        for body in CALLBACK_REPORTS:
            await asyncio.sleep(self.callback_step)
            try:
                async with self.session.post(url, json=body, headers=headers) as answer:
                    await answer.read()
                    self.counts[f"callbacks.{answer.status}"] += 1
            except (aiohttp.ClientError, TimeoutError):
                self.counts["callbacks.no_answer"] += 1

    async def stats(self, request: web.Request) -> web.Response:
        running = len(self.long_jobs) - len(self.long_done)
        return web.json_response({**self.counts, "long.running": running})


def make_app(soak: Soak) -> web.Application:
    app = web.Application()
    app.add_routes(
        [
            web.post("/jobs/{label}", soak.trigger),
            web.get("/jobs/{label}/{eid}", soak.poll),
            web.delete("/jobs/{label}/{eid}", soak.cancel),
            web.get("/_stats", soak.stats),
        ]
    )

    async def session(_: web.Application) -> Any:
        timeout = aiohttp.ClientTimeout(total=30)
        # at most CALLBACK_CONNECTIONS to the daemon, so that its API connections stay level
        # whatever the callbacks' latency (a slow moment otherwise opens more, and they stay)
        connector = aiohttp.TCPConnector(limit=CALLBACK_CONNECTIONS)
        soak.session = aiohttp.ClientSession(timeout=timeout, connector=connector)
        yield
        for task in list(soak.reporting):
            task.cancel()
        await soak.session.close()

    app.cleanup_ctx.append(session)
    return app


def main() -> None:
    args = argparse.ArgumentParser()
    args.add_argument("--port", type=int, required=True)
    args.add_argument("--job-seconds", type=float, default=300.0, help="a long job's mean length")
    args.add_argument("--callback-step", type=float, default=1.0, help="seconds between reports")
    options = args.parse_args()
    app = make_app(Soak(options.job_seconds, options.callback_step))
    web.run_app(app, host="127.0.0.1", port=options.port, print=None, access_log=None)


if __name__ == "__main__":
    main()
