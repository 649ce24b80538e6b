"""The benchmarks' user service: records what arrives and answers as cheaply as it can.

``python -m bench.service --mode triggers|polls|lifecycle|runs --port P [--delay S]`` (pinned to
its own core by the benchmark; ``--delay`` holds each trigger's answer back: a slow
service). Task URLs are ``/jobs/{label}``: the label (``ecron``, ``baseline``) keeps the
records of the two runs of one benchmark apart.

- ``triggers``: a POST is recorded (arrival time, ``X-Ecron-Task``, ``X-Ecron-Scheduled-At``,
  eid) and answered ``SUCCESS`` at once, so nothing is left to poll.
- ``polls``: a POST answers ``RUNNING``; each GET of ``/jobs/{label}/{eid}`` answers
  ``RUNNING`` with a progress that changes on every poll (never finishing), and so does
  each id of a batch poll, ``GET /batch/{label}?ids=a,b,c`` (PROTOCOL.md, "Batch polls"),
  answered ``{"reports": {...}}``. Each id counts as one poll; each GET as one request.
- ``lifecycle``: a POST answers ``RUNNING`` 0; polls 1-10 answer ``RUNNING`` with rising
  progress, the 11th ``SUCCESS``.
- ``runs``: jobs of ``--job-seconds`` (600): a POST is recorded as in ``triggers`` and
  answers ``RUNNING`` 0; a poll answers ``RUNNING`` with the share of the job's time gone,
  then ``SUCCESS`` once it has passed. Per execution it keeps when it was triggered, when
  last polled and the longest gap so far between two of those (``/_stats/runs``).

Stats live under ``/_stats/...``; ``POST /_mark`` opens a new measuring window for polls.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections import deque
from typing import Any

from aiohttp import web

RUNNING_ZERO = {"status": "RUNNING", "progress": 0}
SUCCESS = {"status": "SUCCESS"}
#: How many of the latest progress values per execution are kept for the persistence check.
KEEP_PROGRESS = 5
#: An execution counts as being polled when its last poll is this recent (seconds).
RECENT = 2.5


class State:
    """Everything the service remembers."""

    def __init__(self, mode: str, delay: float = 0.0, job_seconds: float = 600.0) -> None:
        self.mode = mode
        #: Seconds each trigger's answer is held back (a slow service).
        self.delay = delay
        #: ``runs``: how long a job lasts from its trigger.
        self.job_seconds = job_seconds
        self.clear()

    def clear(self) -> None:
        """Forget everything (between the ecron run and the baseline run)."""
        #: label -> [(arrival, task, scheduled_at, eid)]
        self.triggers: dict[str, list[tuple[float, str, str, str]]] = {}
        self.polls_count: dict[str, int] = {}
        self.last_poll: dict[str, float] = {}
        self.progress: dict[str, deque[float]] = {}
        self.window_polls = 0
        #: HTTP requests that polled (a batch poll is one, however many ids it names).
        self.window_requests = 0
        self.window_started = time.monotonic()
        self.intervals: list[float] = []
        #: Per execution, the largest gap between two of its polls in the window (its first
        #: poll in the window measured from the window's start).
        self.window_gap: dict[str, float] = {}
        self.finished = 0
        #: ``runs``: eid -> when its trigger arrived; the longest gap between its trigger and
        #: a poll or two polls; the eids whose job ended (answered SUCCESS); polls ever.
        self.started: dict[str, float] = {}
        self.max_gap: dict[str, float] = {}
        self.done: set[str] = set()
        self.polls_total = 0


class Handlers:
    """The HTTP handlers, over one ``State``."""

    def __init__(self, state: State) -> None:
        self.state = state

    async def trigger(self, request: web.Request) -> web.Response:
        state, headers = self.state, request.headers
        state.triggers.setdefault(request.match_info["label"], []).append(
            (
                time.time(),
                headers.get("X-Ecron-Task", ""),
                headers.get("X-Ecron-Scheduled-At", ""),
                headers.get("X-Ecron-Execution-Id", ""),
            )
        )
        if state.mode == "runs":
            state.started.setdefault(headers.get("X-Ecron-Execution-Id", ""), time.monotonic())
        if state.delay:
            await asyncio.sleep(state.delay)
        return web.json_response(SUCCESS if state.mode == "triggers" else RUNNING_ZERO)

    async def poll(self, request: web.Request) -> web.Response:
        if self.state.mode == "triggers":
            return web.json_response(SUCCESS)
        self.state.window_requests += 1
        return web.json_response(self.polled(request.match_info["eid"]))

    async def batch(self, request: web.Request) -> web.Response:
        self.state.window_requests += 1
        ids = request.query.get("ids", "").split(",")
        return web.json_response({"reports": {eid: self.polled(eid) for eid in ids if eid}})

    def polled(self, eid: str) -> dict[str, Any]:
        """Record one poll of ``eid``; its report."""
        state = self.state
        count = state.polls_count.get(eid, 0) + 1
        state.polls_count[eid] = count
        now = time.monotonic()
        last = state.last_poll.get(eid)
        state.last_poll[eid] = now
        state.window_polls += 1
        if last is not None and last >= state.window_started:
            state.intervals.append(now - last)
        gap = now - (
            last if last is not None and last >= state.window_started else state.window_started
        )
        if gap > state.window_gap.get(eid, 0.0):
            state.window_gap[eid] = gap
        if state.mode == "lifecycle":
            return lifecycle_report(state, count)
        if state.mode == "runs":
            return job_report(state, eid, now, last)
        progress = (count % 1000) / 10
        kept = state.progress.get(eid)
        if kept is None:
            kept = state.progress[eid] = deque(maxlen=KEEP_PROGRESS)
        kept.append(progress)
        return {"status": "RUNNING", "progress": progress}

    async def cancel(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "FAILED", "message": "cancelled"})

    async def triggers(self, request: web.Request) -> web.Response:
        label = request.match_info["label"]
        return web.json_response({"records": self.state.triggers.get(label, [])})

    async def count(self, request: web.Request) -> web.Response:
        label = request.match_info["label"]
        return web.json_response({"count": len(self.state.triggers.get(label, []))})

    async def mark(self, request: web.Request) -> web.Response:
        self.state.window_polls = self.state.window_requests = 0
        self.state.window_started = time.monotonic()
        self.state.intervals = []
        self.state.window_gap = {}
        return web.json_response({"marked": True})

    async def polls(self, request: web.Request) -> web.Response:
        interval = request.query.get("interval")
        return web.json_response(
            poll_stats(self.state, None if interval is None else float(interval))
        )

    async def runs(self, request: web.Request) -> web.Response:
        interval = float(request.query.get("interval", "1"))
        return web.json_response(run_stats(self.state, interval))

    async def progress(self, request: web.Request) -> web.Response:
        return web.json_response({eid: list(kept) for eid, kept in self.state.progress.items()})

    async def reset(self, request: web.Request) -> web.Response:
        self.state.clear()
        return web.json_response({"reset": True})


def make_app(state: State) -> web.Application:
    handlers = Handlers(state)
    app = web.Application()
    app.add_routes(
        [
            web.post("/jobs/{label}", handlers.trigger),
            web.get("/jobs/{label}/{eid}", handlers.poll),
            web.delete("/jobs/{label}/{eid}", handlers.cancel),
            web.get("/batch/{label}", handlers.batch),
            web.get("/_stats/triggers/{label}", handlers.triggers),
            web.get("/_stats/count/{label}", handlers.count),
            web.get("/_stats/polls", handlers.polls),
            web.get("/_stats/runs", handlers.runs),
            web.get("/_stats/progress", handlers.progress),
            web.post("/_mark", handlers.mark),
            web.post("/_reset", handlers.reset),
        ]
    )
    return app


def lifecycle_report(state: State, count: int) -> dict[str, Any]:
    """Polls 1-10: RUNNING with rising progress; the 11th and later: SUCCESS."""
    if count <= 10:
        return {"status": "RUNNING", "progress": count * 9, "message": f"poll {count}"}
    if count == 11:
        state.finished += 1
    return SUCCESS


def job_report(state: State, eid: str, now: float, last: float | None) -> dict[str, Any]:
    """``runs``: note the gap since the last poll (or the trigger); the job's progress by
    the time gone, or SUCCESS once ``job_seconds`` have passed since its trigger."""
    state.polls_total += 1
    started = state.started.setdefault(eid, now)
    gap = now - (started if last is None else last)
    if gap > state.max_gap.get(eid, 0.0):
        state.max_gap[eid] = gap
    gone = now - started
    if gone >= state.job_seconds:
        if eid not in state.done:
            state.done.add(eid)
            state.finished += 1
        return SUCCESS
    return {"status": "RUNNING", "progress": round(100 * gone / state.job_seconds, 2)}


def run_stats(state: State, interval: float) -> dict[str, Any]:
    """``runs``: the triggers and polls so far, and per execution still running the longest
    gap between its trigger and a poll, or two polls, or its last one and now: the largest,
    p50 and p99 of those, and how many exceed 3 poll intervals."""
    now = time.monotonic()
    posts = sum(len(records) for records in state.triggers.values())
    gaps = []
    for eid, started in state.started.items():
        if eid in state.done:
            gaps.append(state.max_gap.get(eid, 0.0))
            continue
        last = state.last_poll.get(eid)
        gaps.append(max(state.max_gap.get(eid, 0.0), now - (started if last is None else last)))
    gaps.sort()
    n = len(gaps)
    polled = sum(1 for eid in state.started if eid in state.last_poll)
    return {
        "trigger_posts": posts,
        "triggered": len(state.started),
        "duplicates": posts - len(state.started),
        "polls_total": state.polls_total,
        "polled": polled,
        "never_polled": len(state.started) - polled,
        "finished": state.finished,
        "running": len(state.started) - len(state.done),
        "gap_max_s": gaps[-1] if n else None,
        "gap_p50_s": gaps[n // 2] if n else None,
        "gap_p99_s": gaps[min(n - 1, int(n * 0.99))] if n else None,
        "over_3_intervals": sum(1 for gap in gaps if gap > 3 * interval),
    }


def poll_stats(state: State, interval: float | None = None) -> dict[str, Any]:
    """Polls since the mark, how many executions are being polled now, the intervals; and
    per execution the largest gap in the window between two of its polls (the window's start
    and now count as polls): the largest of all, how many exceed 3 ``interval``s, how many
    were not polled at all since the mark."""
    now = time.monotonic()
    intervals = sorted(state.intervals)
    n = len(intervals)
    started = state.window_started
    gaps = [
        max(state.window_gap.get(eid, 0.0), now - max(last, started))
        for eid, last in state.last_poll.items()
    ]
    return {
        "gap_max": max(gaps) if gaps else None,
        "over_3_intervals": None if interval is None else sum(g > 3 * interval for g in gaps),
        "unpolled": sum(1 for last in state.last_poll.values() if last < started),
        "polls": state.window_polls,
        "requests": state.window_requests,
        "seconds": now - state.window_started,
        "recent": sum(1 for at in state.last_poll.values() if at >= now - RECENT),
        "known": len(state.last_poll),
        "interval_mean": sum(intervals) / n if n else None,
        "interval_p50": intervals[n // 2] if n else None,
        "interval_p99": intervals[min(n - 1, int(n * 0.99))] if n else None,
        "finished": state.finished,
    }


def main() -> None:
    args = argparse.ArgumentParser()
    modes = ["triggers", "polls", "lifecycle", "runs"]
    args.add_argument("--mode", choices=modes, required=True)
    args.add_argument("--port", type=int, required=True)
    args.add_argument("--delay", type=float, default=0.0, help="hold each trigger's answer, s")
    args.add_argument("--job-seconds", type=float, default=600.0, help="runs: a job's length")
    options = args.parse_args()
    app = make_app(State(options.mode, options.delay, options.job_seconds))

    web.run_app(app, host="127.0.0.1", port=options.port, print=None, access_log=None, backlog=4096)


if __name__ == "__main__":
    main()
