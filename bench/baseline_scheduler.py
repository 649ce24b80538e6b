"""The baseline of ``triggers`` and ``burst``: in-memory APScheduler 3.11 posting the same
triggers as ecron (same headers, JSON body ``{}``) with one shared aiohttp session.

``python -m bench.baseline_scheduler every --tasks N --url URL`` (N jobs, each an
``IntervalTrigger(seconds=1)`` aligned to whole seconds) or ``... cron --tasks N --url URL
--at UNIX_SECONDS`` (N ``CronTrigger`` jobs on that one instant); ``--at-rest M`` adds M jobs
that do not fire while it runs (``CronTrigger`` on 1 January, 00:00, as ecron's tasks at
rest in ``bench.growth``). Prints ``ready`` once the scheduler runs, and runs until SIGTERM.
The benchmark pins it to the subject core.

The scheduled time of each run reaches the job through APScheduler's own
``EVENT_JOB_SUBMITTED`` (dispatched right after the job's coroutine is created and before
it runs), so ``X-Ecron-Scheduled-At`` carries the real fire time, not the call's start.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import uuid
from collections import defaultdict, deque
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp
from apscheduler.events import EVENT_JOB_SUBMITTED, JobSubmissionEvent
from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.interval import IntervalTrigger


def iso(when: datetime) -> str:
    return when.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class Poster:
    """Sends one trigger per run, with the fire time APScheduler submitted it for."""

    def __init__(self, session: aiohttp.ClientSession, url: str) -> None:
        self.session = session
        self.url = url
        self.pending: dict[str, deque[datetime]] = defaultdict(deque)
        self.failed = 0

    def submitted(self, event: JobSubmissionEvent) -> None:
        self.pending[event.job_id].extend(event.scheduled_run_times)

    async def fire(self, task: str) -> None:
        queue = self.pending[task]
        scheduled = queue.popleft() if queue else datetime.now(UTC)
        headers = {
            "X-Ecron-Execution-Id": uuid.uuid4().hex,
            "X-Ecron-Task": task,
            "X-Ecron-Scheduled-At": iso(scheduled),
            "X-Ecron-Attempt": "1",
        }
        try:
            async with self.session.post(self.url, json={}, headers=headers) as response:
                await response.read()
        except aiohttp.ClientError:
            self.failed += 1


def trigger_of(args: argparse.Namespace) -> IntervalTrigger | CronTrigger:
    if args.kind == "every":
        now = datetime.now(UTC)
        start = now.replace(microsecond=0) + timedelta(seconds=1)
        return IntervalTrigger(seconds=1, start_date=start, timezone=UTC)
    at = datetime.fromtimestamp(args.at, UTC)
    # The same fields as ecron's 6-field cron: that second of that day, once a year.
    return CronTrigger(
        month=at.month,
        day=at.day,
        hour=at.hour,
        minute=at.minute,
        second=at.second,
        timezone=UTC,
    )


async def run(args: argparse.Namespace) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    async with aiohttp.ClientSession() as session:
        poster = Poster(session, args.url)
        scheduler = AsyncIOScheduler(
            timezone=UTC,
            job_defaults={"misfire_grace_time": None, "coalesce": False, "max_instances": 100},
        )
        scheduler.add_listener(poster.submitted, EVENT_JOB_SUBMITTED)
        trigger = trigger_of(args)
        for n in range(args.tasks):
            name = f"t{n}"
            scheduler.add_job(poster.fire, trigger, args=[name], id=name)
        yearly = CronTrigger(month=1, day=1, hour=0, minute=0, timezone=UTC)
        for n in range(args.at_rest):
            name = f"rest{n}"
            scheduler.add_job(poster.fire, yearly, args=[name], id=name)
        scheduler.start()
        print("ready", flush=True)
        await stop.wait()
        scheduler.shutdown(wait=False)
    print(f"done failed={poster.failed}", flush=True)


def run_on_ecrons_loop(main: Any) -> None:
    """Run on the event loop ecron runs on (uvloop, a dependency of ecron, where it is
    installed), so that the baseline and ecron are measured on the same loop; say which."""
    try:
        import uvloop
    except ImportError:
        print("loop asyncio", flush=True)
        asyncio.run(main)
        return
    print("loop uvloop", flush=True)
    uvloop.run(main)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("kind", choices=["every", "cron"])
    parser.add_argument("--tasks", type=int, required=True)
    parser.add_argument("--url", required=True)
    parser.add_argument("--at", type=float, help="cron: the one fire time, Unix seconds")
    parser.add_argument("--at-rest", type=int, default=0, help="jobs that do not fire meanwhile")
    run_on_ecrons_loop(run(parser.parse_args()))


if __name__ == "__main__":
    main()
