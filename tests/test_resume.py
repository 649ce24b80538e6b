"""DESIGN.md, "Resume": multi-step tasks, resuming from the first step that did not succeed,
automatic resume of interrupted work (idempotent tasks only, a capped chain), the patrol."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import pytest
from aiohttp import web
from structlog.testing import capture_logs

from ecron.config.model import TaskSpec
from ecron.core import Execution, Reason, Status, TriggerKind
from ecron.daemon import Daemon
from ecron.signing import callback_token
from tests.protocol_support import ended, reply, run_once
from tests.support.daemon import DaemonFactory
from tests.support.rig import FakeClock
from tests.support.service import JSON_BODY, UserService, wait_for

T = TypeVar("T")
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def database_url(tmp_path: Path) -> str:
    """Resume rules do not depend on the database: SQLite (the store contract covers both)."""
    return f"sqlite+aiosqlite:///{tmp_path / 'ecron.db'}"


def three_steps(service: UserService, load: dict[str, Any] | None = None, **keys: Any) -> TaskSpec:
    """fetch, load, report: each a call to the service under its own path (``load``: keys
    step 2 sets for itself)."""
    values: dict[str, Any] = {
        "name": "init",
        "schedule": "manual",
        "poll_interval": "50ms",
        "steps": [
            {"name": "fetch", "url": f"{service.url}/jobs/fetch"},
            {"name": "load", "url": f"{service.url}/jobs/load", **(load or {})},
            {"name": "report", "url": f"{service.url}/jobs/report"},
        ],
    }
    values.update(keys)
    return TaskSpec.model_validate(values)


def interrupt_step(service: UserService, number: int, times: int = 1) -> None:
    """Step ``number``'s trigger answers FAILED interrupted, ``times`` times (then normally)."""
    left = {"n": times}

    async def behaviour(request: web.Request) -> web.StreamResponse | None:
        remote = request.headers.get("X-Ecron-Execution-Id", "")
        if request.method == "POST" and remote.endswith(f".{number}") and left["n"] > 0:
            left["n"] -= 1
            body = {"status": "FAILED", "interrupted": True, "message": "worker restarted"}
            return web.json_response(body)
        return None

    service.behaviour = behaviour


async def api(daemon: Daemon, method: str, path: str) -> tuple[int, Any]:
    async with (
        aiohttp.ClientSession() as session,
        session.request(
            method, f"http://127.0.0.1:{daemon.port}{path}", json=JSON_BODY
        ) as response,
    ):
        return response.status, await response.json()


async def resume_of(daemon: Daemon, eid: str, timeout: float = 10.0) -> Execution:
    """Wait for the execution that resumes ``eid`` to be final; it."""

    async def found() -> str | None:
        return (await daemon.store.resumes_of([eid])).get(eid)

    resumed: str = await wait_for(found, timeout=timeout)
    return await ended(daemon, resumed)


async def final(daemon: Daemon, eid: str) -> Execution | None:
    """Execution ``eid`` if it is final (None otherwise)."""
    execution = await daemon.store.get_execution(eid)
    return execution if execution is not None and execution.is_final else None


async def run_until(
    daemon: Daemon, clock: FakeClock, found: Callable[[], Awaitable[T | None]]
) -> T:
    """Move ``clock`` 50 ms at a time (each time until the engine has carried out what is due)
    until ``found()`` finds something; it. Up to a minute of the clock."""
    for _ in range(1200):
        if (value := await found()) is not None:
            return value
        now = clock.advance(timedelta(milliseconds=50))
        await wait_for(lambda: daemon.engine.settled(now), timeout=5)  # noqa: B023
    raise AssertionError("not found within a minute of the test's clock")


def posts(service: UserService, remote: str) -> int:
    return len(service.calls_for(remote, "POST"))


async def test_steps_run_in_order_each_under_its_own_remote_id_with_the_step_headers(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """Three steps: POSTs to fetch, load, report in order, as <eid>.1, .2, .3, each with
    X-Ecron-Step, X-Ecron-Step-Number and X-Ecron-Parent-Execution-Id; the steps are shown
    in the snapshot and at /steps; the execution's progress is the mean of its steps'."""
    user_service.duration = 0.2
    async with make_daemon([three_steps(user_service)]) as daemon:
        eid = await run_once(daemon, "init")

        async def midway() -> bool:
            e = await daemon.store.get_execution(eid)
            return e is not None and e.steps[0].status is Status.SUCCESS and not e.is_final

        await wait_for(midway, timeout=10)
        partial = await daemon.store.get_execution(eid)
        execution = await ended(daemon, eid)
        status, steps = await api(daemon, "GET", f"/api/v1/executions/{eid}/steps")
    assert partial is not None
    assert partial.progress == pytest.approx(sum(s.progress for s in partial.steps) / 3)
    assert partial.progress >= 100 / 3
    assert execution.status is Status.SUCCESS and execution.progress == 100
    posts_in_order = [c for c in user_service.calls if c.method == "POST"]
    assert [c.path for c in posts_in_order] == ["/jobs/fetch", "/jobs/load", "/jobs/report"]
    for number, call in enumerate(posts_in_order, start=1):
        assert call.headers["X-Ecron-Execution-Id"] == f"{eid}.{number}"
        assert call.headers["X-Ecron-Step-Number"] == str(number)
        assert call.headers["X-Ecron-Step"] == ["fetch", "load", "report"][number - 1]
        assert call.headers["X-Ecron-Parent-Execution-Id"] == eid
    first_get = user_service.calls_for(f"{eid}.1", "GET")[0]
    assert first_get.path == f"/jobs/fetch/{eid}.1"
    assert status == 200
    assert [(s["number"], s["name"], s["status"], s["remote_id"]) for s in steps["items"]] == [
        (1, "fetch", "SUCCESS", f"{eid}.1"),
        (2, "load", "SUCCESS", f"{eid}.2"),
        (3, "report", "SUCCESS", f"{eid}.3"),
    ]


async def test_a_step_failure_fails_the_execution_with_that_reason_and_stops_the_steps(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """Step 2 reports FAILED interrupted: step 2 and the execution end FAILED interrupted,
    step 3 is never called."""
    user_service.duration = 0.1
    interrupt_step(user_service, 2)
    async with make_daemon([three_steps(user_service)]) as daemon:
        eid = await run_once(daemon, "init")
        execution = await ended(daemon, eid)
    assert (execution.status, execution.reason) == (Status.FAILED, Reason.INTERRUPTED)
    assert [s.status for s in execution.steps] == [Status.SUCCESS, Status.FAILED, Status.PENDING]
    assert execution.steps[1].reason is Reason.INTERRUPTED
    assert posts(user_service, f"{eid}.3") == 0


async def test_an_interrupted_idempotent_task_is_resumed_by_itself_from_the_failed_step(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """idempotent + resume.auto: within one patrol interval a resume appears by itself; step 1
    is not called again (it stays SUCCESS under its old remote id); steps 2 and 3 run with
    X-Ecron-Resume-Of; the resume ends SUCCESS; the first execution keeps its failure and
    names its resume."""
    user_service.duration = 0.1
    interrupt_step(user_service, 2)
    clock = FakeClock(T0)
    user_service.on_clock(clock)
    spec = three_steps(user_service, idempotent=True, resume={"auto": True})
    async with make_daemon([spec], patrol_interval="300ms", clock=clock) as daemon:
        eid = await run_once(daemon, "init")
        first = await run_until(daemon, clock, lambda: final(daemon, eid))

        async def resumed() -> Execution | None:
            found = (await daemon.store.resumes_of([eid])).get(eid)
            return None if found is None else await final(daemon, found)

        second = await run_until(daemon, clock, resumed)
        _, old_snapshot = await api(daemon, "GET", f"/api/v1/executions/{eid}")
    assert (first.status, first.reason) == (Status.FAILED, Reason.INTERRUPTED)
    assert first.finished_at is not None and second.finished_at is not None
    waited = second.finished_at - first.finished_at
    assert waited < timedelta(seconds=0.3 + 1.0)  # one patrol interval, and the resume's run
    assert second.status is Status.SUCCESS
    assert (second.trigger_kind, second.resume_of, second.resume_attempt) == (
        TriggerKind.RESUME,
        eid,
        1,
    )
    assert (second.scheduled_at, second.attempt) == (first.scheduled_at, first.attempt)
    assert second.steps[0].remote_id == f"{eid}.1" and second.steps[0].status is Status.SUCCESS
    assert posts(user_service, f"{eid}.1") == 1
    assert posts(user_service, f"{second.eid}.1") == 0
    for number in (2, 3):
        [call] = user_service.calls_for(f"{second.eid}.{number}", "POST")
        assert call.headers["X-Ecron-Resume-Of"] == eid
    assert old_snapshot["status"] == "FAILED" and old_snapshot["resumed_by"] == second.eid


async def patrol_rounds(logs: list[dict[str, Any]], count: int) -> None:
    """Wait until the patrol has finished ``count`` more rounds (``patrol_done`` lines)
    after this call: a round started before it does not count."""
    seen = sum(1 for e in logs if e["event"] == "patrol_done") + 1
    await wait_for(
        lambda: sum(1 for e in logs if e["event"] == "patrol_done") >= seen + count, timeout=20
    )


async def test_a_task_that_writes_waits_for_a_person_and_is_resumed_once_only(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """idempotent: false: no automatic resume, even with resume.auto (and no "chain
    exhausted" either: there is no chain); the API's resume answers 202 and continues from
    step 2; a second resume of the same execution answers 409 naming the existing one."""
    user_service.duration = 0.1
    interrupt_step(user_service, 2)
    spec = three_steps(user_service, idempotent=False, resume={"auto": True})
    with capture_logs() as logs:
        async with make_daemon([spec], patrol_interval="200ms") as daemon:
            eid = await run_once(daemon, "init")
            await ended(daemon, eid)
            await patrol_rounds(logs, 3)  # three full rounds after the end: none resumed it
            assert await daemon.store.resumes_of([eid]) == {}
            status, created = await api(daemon, "POST", f"/api/v1/executions/{eid}/resume")
            again, refused = await api(daemon, "POST", f"/api/v1/executions/{eid}/resume")
            resumed = await ended(daemon, created["id"])
            success, not_resumable = await api(
                daemon, "POST", f"/api/v1/executions/{created['id']}/resume"
            )
            unknown, _ = await api(daemon, "POST", "/api/v1/executions/nope/resume")
    assert status == 202 and created["resume_of"] == eid
    assert again == 409 and created["id"] in refused["error"]
    assert resumed.status is Status.SUCCESS
    assert posts(user_service, f"{created['id']}.1") == 0
    assert (success, unknown) == (409, 404) and "SUCCESS" in not_resumable["error"]
    assert not any(e["event"] == "resume_chain_exhausted" for e in logs)


async def test_a_chain_that_keeps_failing_stops_after_resume_max_attempts(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """Step 2 is interrupted every time: the first execution and resume.max_attempts (2)
    resumes, then no more; the exhausted chain is logged."""
    user_service.duration = 0.1
    interrupt_step(user_service, 2, times=100)
    spec = three_steps(user_service, idempotent=True, resume={"auto": True, "max_attempts": 2})
    with capture_logs() as logs:
        async with make_daemon([spec], patrol_interval="200ms") as daemon:
            eid = await run_once(daemon, "init")
            first_resume = await resume_of(daemon, eid)
            second_resume = await resume_of(daemon, first_resume.eid)
            await ended(daemon, second_resume.eid)
            await patrol_rounds(logs, 5)  # five full rounds after its end: no third resume
            page = await daemon.store.list_executions(task="init")
    assert [e.resume_attempt for e in reversed(page.items)] == [0, 1, 2]
    assert second_resume.status is Status.FAILED
    assert any(e["event"] == "resume_chain_exhausted" for e in logs)


async def test_a_one_call_task_is_resumed_under_a_new_id_with_resume_of(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """A one-call task's resume makes the call again under a new execution id, with
    X-Ecron-Resume-Of naming the old one."""
    user_service.duration = 0.1
    user_service.script["POST"] = [reply(200, {"status": "FAILED", "interrupted": True})]
    spec = TaskSpec.model_validate(
        {
            "name": "one",
            "schedule": "manual",
            "url": f"{user_service.url}/jobs/x",
            "poll_interval": "100ms",  # not the default 5 s: the resumed job ends at once
        }
    )
    async with make_daemon([spec]) as daemon:
        eid = await run_once(daemon, "one")
        await ended(daemon, eid)
        status, created = await api(daemon, "POST", f"/api/v1/executions/{eid}/resume")
        resumed = await ended(daemon, created["id"])
    assert status == 202 and resumed.status is Status.SUCCESS
    [call] = user_service.calls_for(created["id"], "POST")
    assert call.headers["X-Ecron-Resume-Of"] == eid


async def test_a_callback_moves_the_step_it_names(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """Callbacks address a step by its remote id (and its own token); a callback naming a
    finished step answers 409 and changes nothing."""
    user_service.duration = 3600
    spec = three_steps(user_service, poll_interval="1h")
    async with make_daemon([spec], public_url="http://ecron.test") as daemon:
        eid = await run_once(daemon, "init")
        await wait_for(lambda: user_service.calls_for(f"{eid}.1", "POST"), timeout=5)
        token = user_service.calls_for(f"{eid}.1", "POST")[0].headers["X-Ecron-Callback-Token"]
        url = f"http://127.0.0.1:{daemon.port}/api/v1/executions/{eid}.1/report"
        headers = {"Authorization": f"Bearer {token}"}
        async with aiohttp.ClientSession() as session:
            async with session.post(url, json={"status": "SUCCESS"}, headers=headers) as r:
                first = r.status
            await wait_for(lambda: user_service.calls_for(f"{eid}.2", "POST"), timeout=5)
            async with session.post(url, json={"status": "FAILED"}, headers=headers) as r:
                late = r.status
            bad = f"http://127.0.0.1:{daemon.port}/api/v1/executions/{eid}.9/report"
            ninth = {
                "Authorization": f"Bearer {callback_token(daemon.callback_secret, f'{eid}.9')}"
            }
            async with session.post(bad, json={"status": "SUCCESS"}, headers=ninth) as r:
                missing = r.status
        execution = await daemon.store.get_execution(eid)
    assert (first, late, missing) == (200, 409, 404)
    assert execution is not None
    assert [s.status for s in execution.steps][:2] == [Status.SUCCESS, Status.RUNNING]


async def test_a_steps_deadline_is_the_earlier_of_the_executions_and_its_own(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """Step 2 with task_timeout 300ms under a task timeout of 1h: step 2 times out after
    300ms, gets its DELETE under its own remote id, and the execution ends TIMED_OUT."""
    user_service.duration = 0.05

    async def long_load(request: web.Request) -> web.StreamResponse | None:
        if request.method == "POST" and request.path == "/jobs/load":
            user_service.duration = 3600  # step 2 never finishes by itself
        return None

    user_service.behaviour = long_load
    spec = three_steps(user_service, load={"task_timeout": "300ms"}, task_timeout="1h")
    async with make_daemon([spec]) as daemon:
        eid = await run_once(daemon, "init")
        execution = await ended(daemon, eid)
    assert execution.status is Status.TIMED_OUT
    [post] = user_service.calls_for(f"{eid}.2", "POST")
    deadline = execution.deadline
    assert deadline is not None and execution.steps[1].started_at is not None
    assert deadline - execution.steps[1].started_at == timedelta(milliseconds=300)
    assert post.headers["X-Ecron-Deadline"].endswith("Z")
    assert len(user_service.calls_for(f"{eid}.2", "DELETE")) == 1
    assert [s.status for s in execution.steps] == [Status.SUCCESS, Status.TIMED_OUT, Status.PENDING]
