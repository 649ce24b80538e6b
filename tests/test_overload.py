"""Ten times more due work than a node can do (docs/performance.md, "Overload"): the API and
the health checks still answer, the node holds back its claims instead of queueing without
bound, what it could not do is recorded by the misfire policy, and when the load drops the
remaining tasks fire on time again. Latencies are measured and printed, not asserted
(beyond answering within the prober's 5 s timeout)."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from ecron.config.model import Config, DaemonSettings, TaskSpec
from ecron.core import Execution, Reason, Status
from ecron.daemon import Daemon
from tests.support.daemon import task
from tests.support.rig import Rig, rig
from tests.support.service import UserService, held_back, wait_for

#: Two workers and a service that answers each trigger after 0.2 s: about 10 fires a
#: second at most (less the state writes); a hundred tasks every second is ten times that.
WORKERS = 2
ANSWER_AFTER = 0.2
TASKS = 100
#: How long the node is kept overloaded (at least; and at most, waiting for the first
#: SKIPPED misfire record), and how often the prober asks.
OVERLOADED_FOR = 3.0
RECORDED_WITHIN = 20.0
PROBE_EVERY = 0.25
ENDPOINTS = ("/healthz", "/readyz", "/api/v1/tasks", "/api/v1/executions")
#: Held executions per task, at most: up to three fire times claimed ahead (prefetch 2 s),
#: a due one waiting while claims are held back, and the one running.
HELD_PER_TASK = 5


def tasks(service: UserService, count: int) -> dict[str, TaskSpec]:
    """``count`` tasks every second (late ones run_once after a 1 s grace)."""
    specs = [
        task(
            f"t{n}",
            f"{service.url}/jobs/x",
            schedule={"every": "1s"},
            misfire={"policy": "run_once", "grace": "1s"},
        )
        for n in range(count)
    ]
    return {spec.name: spec for spec in specs}


def config(tmp_path: Path, specs: dict[str, TaskSpec]) -> Config:
    settings = DaemonSettings(
        database=f"sqlite+aiosqlite:///{tmp_path / 'ecron.db'}",
        listen="127.0.0.1:0",
        tick="100ms",
        poll_workers=WORKERS,
    )
    return Config(directory=str(tmp_path), daemon=settings, tasks=specs)


async def probe(session: aiohttp.ClientSession, api: str) -> dict[str, float]:
    """Each endpoint once: its latency in seconds (failing the test if it does not answer
    200 within the session's 5 s timeout)."""
    latencies = {}
    for path in ENDPOINTS:
        started = time.monotonic()
        async with session.get(f"{api}{path}") as response:
            await response.read()
            assert response.status == 200, (path, response.status)
        latencies[path] = time.monotonic() - started
    return latencies


async def fire_lags(daemon: Daemon, name: str, after: float) -> list[float] | None:
    """The trigger lags (s) of the last three executions of ``name`` scheduled after
    ``after`` (epoch seconds), when all three succeeded; else None."""
    page = await daemon.store.list_executions(task=name, limit=20)
    done = [e for e in page.items if e.scheduled_at.timestamp() > after][:3]
    if len(done) < 3 or any(e.status is not Status.SUCCESS for e in done):
        return None
    return [(e.triggered_at - e.scheduled_at).total_seconds() for e in done if e.triggered_at]


@pytest.mark.timeout(40)
async def test_ten_times_too_much_work_keeps_the_api_answering_and_memory_bounded_then_recovers(
    tmp_path: Path, user_service: UserService
) -> None:
    """100 tasks every second on a node that can do about 10 fires a second: for 3 s, and
    until the first late fire time is recorded SKIPPED misfire, every probe of /healthz,
    /readyz, /api/v1/tasks and /api/v1/executions answers 200, the scheduler holds its claims
    back, the executions held stay within 5 per task, and nothing is triggered twice; after
    a reload down to two tasks, their fire times run again, each triggered before the next
    one is due."""
    user_service.duration = 0
    user_service.trigger_delay = ANSWER_AFTER
    latencies: dict[str, list[float]] = {path: [] for path in ENDPOINTS}
    held: list[int] = []
    saturated = False
    async with Daemon(config(tmp_path, tasks(user_service, TASKS))) as daemon:
        api = f"http://127.0.0.1:{daemon.port}"
        timeout = aiohttp.ClientTimeout(total=5)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            began = time.monotonic()
            recorded = False
            while time.monotonic() < began + OVERLOADED_FOR or not recorded:
                assert time.monotonic() < began + RECORDED_WITHIN, "no SKIPPED misfire record"
                for path, seconds in (await probe(session, api)).items():
                    latencies[path].append(seconds)
                held.append(len(daemon.parts.held))
                saturated = saturated or daemon.scheduler.saturated
                recorded = recorded or await misfire_recorded(daemon)
                await asyncio.sleep(PROBE_EVERY)
            rows = await outcomes(daemon)
            dropped = time.time()
            await daemon.reload(config(tmp_path, tasks(user_service, 2)))
            lags = await wait_for(lambda: fire_lags(daemon, "t0", dropped + 1), timeout=15)
    report(latencies, held, rows, lags)
    assert saturated, "the scheduler never held its claims back"
    assert max(held) <= HELD_PER_TASK * TASKS, held
    assert rows[(Status.SKIPPED, Reason.MISFIRE)] > 0, rows
    posts = Counter(c.eid for c in user_service.calls if c.method == "POST")
    assert posts and max(posts.values()) == 1
    assert all(lag < 1.0 for lag in lags), lags


async def misfire_recorded(daemon: Daemon) -> bool:
    """True once some fire time is recorded SKIPPED misfire."""
    page = await daemon.store.list_executions(status=Status.SKIPPED, limit=500)
    return any(e.reason is Reason.MISFIRE for e in page.items)


async def outcomes(daemon: Daemon) -> Counter[tuple[Status, Reason | None]]:
    """Every execution of every task, counted by status and reason."""
    found: Counter[tuple[Status, Reason | None]] = Counter()
    for n in range(TASKS):
        page = await daemon.store.list_executions(task=f"t{n}", limit=500)
        found.update((e.status, e.reason) for e in page.items)
    return found


def report(
    latencies: dict[str, list[float]], held: list[int], rows: Counter[Any], lags: list[float]
) -> None:
    """What was measured, for the reader of the test's output (nothing asserted here)."""
    for path, values in latencies.items():
        ordered = sorted(values)
        print(
            f"{path}: {len(values)} answers, median {ordered[len(ordered) // 2] * 1000:.0f} ms, "
            f"max {ordered[-1] * 1000:.0f} ms"
        )
    print(f"held executions: max {max(held)}, last {held[-1]}")
    print(f"rows: {dict(rows)}; lags after the drop: {[round(lag, 3) for lag in lags]}")


async def test_a_node_claims_no_more_late_fire_times_than_its_workers_can_take_up(
    database_url: str, user_service: UserService
) -> None:
    """40 tasks already due at once (late: not claimed ahead) on a node with 4 workers: each
    claim takes up no more tasks than the engine has room for at that moment (16 when none
    waits: four times its workers) and says whether there is more; every task is claimed
    once, in as many rounds as it takes."""
    now = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
    specs = list(tasks(user_service, 40).values())
    async with rig(database_url, specs, now) as r:
        first_room = r.engine.room_for_claims()
        rounds: list[tuple[int, int]] = []
        while sum(took for _, took in rounds) < 40 and len(rounds) < 40:
            await wait_for(lambda: r.engine.room_for_claims() > 0)  # rung when there is room
            room, before = r.engine.room_for_claims(), claims_made(r)
            await r.scheduler.claim_fires(now)
            rounds.append((room, claims_made(r) - before))
        await wait_for(lambda: r.engine.settled(now))  # every start decided and triggered
        claimed = Counter(e.task for e in await all_executions(r, 40))
    assert first_room == 16
    assert all(took <= room for room, took in rounds), rounds
    assert len([took for _, took in rounds if took]) >= 3, rounds  # 40 never fit in one room
    assert len(claimed) == 40 and set(claimed.values()) == {1}


def claims_made(r: Rig) -> int:
    """Fire times this node claimed so far (its ``ecron_claims_total{kind="fire"}``)."""
    registry = r.parts.metrics.registry
    return int(registry.get_sample_value("ecron_claims_total", {"kind": "fire"}) or 0)


async def all_executions(r: Rig, tasks: int) -> list[Execution]:
    """Every execution of tasks ``t0`` .. ``t{tasks-1}``, fire times claimed ahead too."""
    return [e for n in range(tasks) for e in await r.executions(f"t{n}")]


#: Past the polling ceiling: two workers, and a service that answers each poll after
#: 100 ms, can send about 20 polls a second; 90 executions polled every 2 s want 45.
CEILING_WORKERS, POLL_ANSWER_AFTER, POLLED_EVERY, IN_FLIGHT = 2, 0.1, 2.0, 90


async def slow_polls(request: web.Request) -> web.StreamResponse | None:
    """The user service answers polls only after ``POLL_ANSWER_AFTER``."""
    if request.method == "GET":
        await held_back(POLL_ANSWER_AFTER)
    return None


@pytest.mark.timeout(90)
async def test_past_the_polling_ceiling_the_api_answers_and_every_execution_is_still_polled(
    tmp_path: Path, user_service: UserService
) -> None:
    """90 executions created through the API, polled every 2 s, on a node that can send
    about 20 polls a second (2.25 times its ceiling): /readyz stays 200 and says the node is
    saturated; run requests made meanwhile are each answered 202 within a second, and their
    triggers go out ahead of the waiting polls; and no execution goes unpolled for more than
    three of its intervals: the polls stretch evenly (oldest due first)."""
    user_service.duration = 3600
    user_service.behaviour = slow_polls
    url = f"{user_service.url}/jobs/x"
    common = {"concurrency": "allow", "task_timeout": "1h"}
    specs = {
        "long": task("long", url, poll_interval=f"{POLLED_EVERY:g}s", **common),
        "quick": task("quick", url, poll_interval="1h", **common),
    }
    settings = DaemonSettings(
        database=f"sqlite+aiosqlite:///{tmp_path / 'ecron.db'}",
        listen="127.0.0.1:0",
        tick="100ms",
        poll_workers=CEILING_WORKERS,
    )
    config = Config(directory=str(tmp_path), daemon=settings, tasks=specs)
    async with Daemon(config) as daemon, aiohttp.ClientSession() as session:
        api = f"http://127.0.0.1:{daemon.port}"
        long_runs = [await run(session, api, "long") for _ in range(IN_FLIGHT)]
        await wait_for(lambda: ready_body(session, api, saturated=True), timeout=30)
        watched_from = time.monotonic()
        latencies, quick_runs = [], []
        for _ in range(10):
            started = time.monotonic()
            quick_runs.append(await run(session, api, "quick"))
            latencies.append(time.monotonic() - started)
        body = await ready_body(session, api, saturated=True)
        await wait_for(lambda: polled_twice_since(user_service, long_runs, watched_from), 30)
        gaps = poll_gaps(user_service, long_runs, watched_from)
    print(f"run latencies: {[round(s, 3) for s in latencies]}; readyz: {body}")
    print(f"largest gap between two polls of one execution: {max(gaps):.2f} s")
    assert body and body["saturated"] is True and body["polls_waiting"] > 0
    assert max(latencies) < 1.0, latencies
    assert all(user_service.calls_for(eid, "POST") for eid in quick_runs)
    assert max(gaps) <= 3 * POLLED_EVERY, sorted(gaps)[-5:]


async def run(session: aiohttp.ClientSession, api: str, task_name: str) -> str:
    """A run of ``task_name`` through the API (answered 202); its eid."""
    async with session.post(f"{api}/api/v1/tasks/{task_name}/run", json={}) as response:
        assert response.status == 202, await response.text()
        eid: str = (await response.json())["id"]
        return eid


async def ready_body(
    session: aiohttp.ClientSession, api: str, *, saturated: bool
) -> dict[str, Any] | None:
    """``/readyz``'s body when it answers 200 and says ``saturated`` as asked; else None."""
    async with session.get(f"{api}/readyz") as response:
        body: dict[str, Any] = await response.json()
        assert response.status == 200, body
        return body if body.get("saturated") is saturated else None


def polled_twice_since(service: UserService, eids: list[str], since: float) -> bool:
    """True once every execution in ``eids`` was polled at least twice after ``since``."""
    return all(
        sum(1 for call in service.calls_for(eid, "GET") if call.at >= since) >= 2 for eid in eids
    )


def poll_gaps(service: UserService, eids: list[str], since: float) -> list[float]:
    """For each execution, the longest time between two of its polls, counted from
    ``since`` (the first gap runs from ``since`` to its first poll after it)."""
    gaps = []
    for eid in eids:
        times = [since, *(call.at for call in service.calls_for(eid, "GET") if call.at >= since)]
        gaps.append(max(b - a for a, b in itertools.pairwise(times)))
    return gaps
