"""The ``eta`` of execution snapshots, from a live daemon driving a real user service that
reports progress: from the pace so far, from the task's recent successful runs before any
progress, null otherwise; read in one go for list answers."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp
import sqlalchemy as sa
from aiohttp import web

from ecron.clock import iso
from ecron.core import Execution, Status
from ecron.daemon import Daemon
from ecron.ids import new_eid
from tests.protocol_support import ended, run_once
from tests.support.daemon import DaemonFactory, task
from tests.support.rig import FakeClock
from tests.support.service import UserService, wait_for

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def parse(text: str) -> datetime:
    return datetime.fromisoformat(text)


async def get(daemon: Daemon, path: str) -> tuple[Any, datetime, datetime]:
    """GET ``/api/v1{path}``: the JSON answer, and the moments just before and after (on
    the daemon's clock)."""
    async with aiohttp.ClientSession() as session:
        before = daemon.clock.now()
        async with session.get(f"http://127.0.0.1:{daemon.port}/api/v1{path}") as response:
            assert response.status == 200, await response.text()
            body = await response.json()
        return body, before, daemon.clock.now()


async def moving(daemon: Daemon, eid: str) -> Execution:
    """Wait until ``eid`` is RUNNING with progress between 0 and 100."""

    async def check() -> Execution | None:
        execution = await daemon.store.get_execution(eid)
        if execution and execution.status is Status.RUNNING and 0 < execution.progress < 100:
            return execution
        return None

    found: Execution = await wait_for(check, timeout=10)
    return found


def at_pace(snapshot: dict[str, Any], now: datetime) -> datetime:
    """The end at the pace so far, seen at ``now``: 100 at the rate of progress since the
    first trigger."""
    started, progress = parse(snapshot["triggered_at"]), snapshot["progress"]
    return now + (now - started) * ((100 - progress) / progress)


def assert_paced(snapshot: dict[str, Any], before: datetime, after: datetime) -> None:
    """The snapshot's eta is the end at its pace, seen at some moment of the request."""
    assert snapshot["status"] == "RUNNING" and snapshot["eta"] is not None, snapshot
    eta = parse(snapshot["eta"])
    assert at_pace(snapshot, before) - timedelta(milliseconds=1) <= eta  # ms are cut
    assert eta <= at_pace(snapshot, after)
    assert eta >= before


async def test_a_running_execution_has_an_eta_at_its_pace_in_every_answer_and_none_once_ended(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """While the job reports progress, the snapshot (alone, in the history, and as the
    task's last execution) holds the end at its pace so far; once SUCCESS, null. (The daemon
    and the 4 s job run on a clock the test moves: 25% done 1 s in, the pace says 3 s more.)"""
    user_service.durations["slow"] = 4.0
    clock = FakeClock(T0)
    user_service.on_clock(clock)
    async with make_daemon([task("slow", f"{user_service.url}/jobs/slow")], clock=clock) as daemon:
        eid = await run_once(daemon, "slow")
        await wait_for(lambda: daemon.engine.settled(clock.now()), timeout=5)  # triggered
        clock.advance(timedelta(seconds=1))
        await moving(daemon, eid)
        alone, before, after = await get(daemon, f"/executions/{eid}")
        assert_paced(alone, before, after)
        page, before, after = await get(daemon, "/executions")
        assert_paced(next(item for item in page["items"] if item["id"] == eid), before, after)
        one, before, after = await get(daemon, "/tasks/slow")
        assert one["last_execution"]["id"] == eid
        assert_paced(one["last_execution"], before, after)
        assert parse(alone["eta"]) == T0 + timedelta(seconds=4)
        clock.advance(timedelta(seconds=3))
        await ended(daemon, eid)
        final, _, _ = await get(daemon, f"/executions/{eid}")
    assert final["status"] == "SUCCESS" and final["eta"] is None


def no_progress_yet(kind: str) -> Any:
    """A service behaviour: jobs of ``kind`` say RUNNING with no progress, forever."""

    async def answer(request: web.Request) -> web.StreamResponse | None:
        if request.match_info.get("kind") != kind or request.method == "DELETE":
            return None
        return web.json_response({"status": "RUNNING", "message": "warming up"})

    return answer


async def past_runs(daemon: Daemon, name: str, *took: timedelta) -> None:
    """Record successful runs of ``name`` that took ``took`` each (the task's history)."""
    start = datetime(2026, 1, 1, tzinfo=UTC)
    for n, duration in enumerate(took):
        at = start + timedelta(days=n)
        done = Execution(
            eid=new_eid(),
            task=name,
            scheduled_at=at,
            created_at=at,
            status=Status.SUCCESS,
            progress=100.0,
            triggered_at=at,
            finished_at=at + duration,
        )
        assert await daemon.store.create_execution(done) is not None


async def test_before_any_progress_the_eta_is_the_trigger_plus_the_median_of_recent_runs(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """A job that reports no progress yet is expected to last the median of the task's
    recent successful runs (here 10, 20 and 60 minutes: 20); a task without successful
    runs has no estimate."""
    user_service.behaviour = no_progress_yet("warm")
    specs = [task(name, f"{user_service.url}/jobs/warm") for name in ("warm", "new")]
    async with make_daemon(specs) as daemon:
        await past_runs(daemon, "warm", *(timedelta(minutes=m) for m in (10, 60, 20)))
        eids = [await run_once(daemon, name) for name in ("warm", "new")]

        async def running() -> bool:
            found = [await daemon.store.get_execution(eid) for eid in eids]
            return all(e is not None and e.status is Status.RUNNING for e in found)

        await wait_for(running, timeout=10)
        warm, _, _ = await get(daemon, f"/executions/{eids[0]}")
        new, _, _ = await get(daemon, f"/executions/{eids[1]}")
    assert warm["progress"] == 0 and warm["message"] == "warming up"
    assert warm["eta"] == iso(parse(warm["triggered_at"]) + timedelta(minutes=20))
    assert new["status"] == "RUNNING" and new["eta"] is None


@contextmanager
def duration_reads(daemon: Daemon) -> Iterator[list[str]]:
    """The statements that read recent durations, while the block runs."""
    seen: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if "resume_attempt =" in statement and "finished_at IS NOT NULL" in statement:
            seen.append(statement)

    engine = daemon.store.engines.reader.sync_engine
    sa.event.listen(engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        sa.event.remove(engine, "before_cursor_execute", record)


async def test_list_answers_read_the_history_of_all_their_tasks_in_one_statement(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """Five tasks running without progress: the history answer and the task list each read
    the recent durations of all five at once, and every one of them gets its eta."""
    user_service.behaviour = no_progress_yet("warm")
    names = [f"warm-{n}" for n in range(5)]
    async with make_daemon([task(n, f"{user_service.url}/jobs/warm") for n in names]) as daemon:
        for name in names:
            await past_runs(daemon, name, timedelta(hours=1))
        eids = [await run_once(daemon, name) for name in names]

        async def running() -> bool:
            found = [await daemon.store.get_execution(eid) for eid in eids]
            return all(e is not None and e.status is Status.RUNNING for e in found)

        await wait_for(running, timeout=10)
        with duration_reads(daemon) as history_reads:
            page, _, _ = await get(daemon, "/executions?status=RUNNING")
        with duration_reads(daemon) as task_reads:
            tasks, _, _ = await get(daemon, "/tasks")
    assert len(history_reads) == 1 and len(task_reads) == 1
    assert sorted(item["id"] for item in page["items"]) == sorted(eids)
    for item in [*page["items"], *(t["last_execution"] for t in tasks["items"])]:
        assert item["eta"] == iso(parse(item["triggered_at"]) + timedelta(hours=1)), item
