"""Claims ahead are not executions yet, and runs asked for never collide (DESIGN.md,
"Claimed ahead is not started"; issue: manual runs in the same millisecond), on SQLite and
PostgreSQL, against a real user service."""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp

from ecron.core import Reason, Status
from tests.support.daemon import DaemonFactory, task
from tests.support.rig import FakeClock
from tests.support.service import UserService, wait_for

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)

ACTIVE = {"PENDING", "RUNNING"}


async def get(session: aiohttp.ClientSession, base: str, path: str) -> Any:
    async with session.get(f"{base}{path}") as response:
        assert response.status == 200, await response.text()
        return await response.json()


async def test_a_forbid_task_every_second_with_a_3s_job_never_shows_two_running(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """{every: 1s}, concurrency forbid, jobs of 3 s: however often the API is asked (the
    task's history, the lists of PENDING and RUNNING executions, the task), it never shows
    two active executions of the task, and never a fire time claimed ahead as one. The fire
    times that met a running job are SKIPPED overlap, naming it. (The daemon and the jobs
    run on a clock the test moves a second at a time; the API is asked four times each
    second, while the node works on it, until two jobs have succeeded.)"""
    user_service.duration = 3.0
    clock = FakeClock(T0 - timedelta(milliseconds=500))  # the first fire time is T0
    user_service.on_clock(clock)
    spec = task("every-second", f"{user_service.url}/jobs/x", schedule={"every": "1s"})
    samples: list[list[str]] = []
    async with (
        make_daemon([spec], clock=clock) as daemon,
        aiohttp.ClientSession() as session,
    ):
        base = f"http://127.0.0.1:{daemon.port}/api/v1"

        async def sample() -> bool:
            # Three answers are not one snapshot: each execution is taken as the last answer
            # showed it (an old run RUNNING in an earlier answer may have ended since).
            pending = await get(session, base, "/executions?status=PENDING")
            running = await get(session, base, "/executions?status=RUNNING")
            history = await get(session, base, "/executions?task=every-second&limit=50")
            shown = {i["id"]: i["status"] for i in pending["items"] + running["items"]}
            shown |= {i["id"]: i["status"] for i in history["items"]}
            samples.append([status for status in shown.values() if status in ACTIVE])
            assert "SCHEDULED" not in shown.values()
            done = [i for i in history["items"] if i["status"] == "SUCCESS"]
            return len(done) >= 2

        for second in range(20):
            clock.set(T0 + timedelta(seconds=second))
            two_done = [await sample() for _ in range(4)][-1]
            await wait_for(lambda: daemon.engine.settled(clock.now()), timeout=5)
            if two_done:
                break
        task_now = await get(session, base, "/tasks/every-second")
        claimed = await get(session, base, "/executions?status=SCHEDULED&task=every-second")
        history = await get(session, base, "/executions?task=every-second&limit=50")
    assert len(samples) > 20
    assert max(len(active) for active in samples) == 1
    skipped = [i for i in history["items"] if i["status"] == "SKIPPED"]
    assert skipped and all(i["reason"] == str(Reason.OVERLAP) for i in skipped)
    assert claimed["items"], "fire times are claimed ahead (and listed when asked for)"
    assert task_now["next_fire_at"] == min(i["scheduled_at"] for i in claimed["items"])


async def test_200_run_requests_at_once_on_an_allow_task_give_200_executions(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """200 POST /run at once (many in the same millisecond): 200 answers 202, 200 distinct
    executions with distinct fire-time keys, each triggered once and started once at the
    service; no 409."""
    user_service.duration = 0.2
    spec = task("burst", f"{user_service.url}/jobs/x", concurrency="allow")
    async with make_daemon([spec]) as daemon, aiohttp.ClientSession() as session:
        url = f"http://127.0.0.1:{daemon.port}/api/v1/tasks/burst/run"

        async def run() -> tuple[int, Any]:
            async with session.post(url, json={}) as response:
                return response.status, await response.json()

        answers = await asyncio.gather(*(run() for _ in range(200)))
        eids = [body["id"] for status, body in answers if status == 202]
        await wait_for(lambda: all(user_service.starts.get(e) for e in eids), timeout=30)
        page = await daemon.store.list_executions(task="burst", limit=500)
    assert Counter(status for status, _ in answers) == {202: 200}
    assert len(set(eids)) == 200
    assert len({e.scheduled_at for e in page.items}) == 200 == len(page.items)
    assert {user_service.starts[eid] for eid in eids} == {1}
    assert all([c.method for c in user_service.calls_for(eid)].count("POST") == 1 for eid in eids)


async def test_run_requests_at_once_on_a_forbid_task_start_one_and_answer_it_to_the_rest(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """50 POST /run at once under forbid: one execution starts (202), the others answer 200
    with that same execution, and the service saw one trigger."""
    user_service.duration = 5.0
    spec = task("single", f"{user_service.url}/jobs/x")
    async with make_daemon([spec]) as daemon, aiohttp.ClientSession() as session:
        url = f"http://127.0.0.1:{daemon.port}/api/v1/tasks/single/run"

        async def run() -> tuple[int, str]:
            async with session.post(url, json={}) as response:
                return response.status, (await response.json())["id"]

        answers = await asyncio.gather(*(run() for _ in range(50)))
        await wait_for(lambda: user_service.starts, timeout=10)
        page = await daemon.store.list_executions(task="single", limit=500)
    assert Counter(status for status, _ in answers) == {202: 1, 200: 49}
    assert len({eid for _, eid in answers}) == 1
    assert [e.status for e in page.items] in ([Status.RUNNING], [Status.PENDING])
    assert len(user_service.starts) == 1
