"""The daemon end to end: a real user service on 127.0.0.1, the API, SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from ecron.config.model import Config, DaemonSettings
from ecron.core import Status
from ecron.daemon import Daemon
from tests.protocol_support import ended
from tests.support.daemon import DaemonFactory, task
from tests.support.rig import rig
from tests.support.service import JSON_BODY, JSON_TYPE, UserService, wait_for

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)

PROTOCOL_HEADERS = {
    "X-Ecron-Execution-Id",
    "X-Ecron-Task",
    "X-Ecron-Scheduled-At",
    "X-Ecron-Deadline",
    "X-Ecron-Attempt",
}


async def api(daemon: Daemon, method: str, path: str, **kwargs: Any) -> tuple[int, Any]:
    if method == "POST" and "data" not in kwargs:
        kwargs.setdefault("json", JSON_BODY)
    async with (
        aiohttp.ClientSession() as session,
        session.request(method, f"http://127.0.0.1:{daemon.port}{path}", **kwargs) as response,
    ):
        return response.status, await response.json()


def ecron_tasks() -> int:
    """How many asyncio tasks ecron itself runs (they are all named ``ecron-...``)."""
    return sum(1 for t in asyncio.all_tasks() if t.get_name().startswith("ecron-"))


async def final(daemon: Daemon, eid: str, timeout: float = 10.0) -> dict[str, Any]:
    """Wait until execution ``eid`` is final; its snapshot."""

    async def done() -> dict[str, Any] | None:
        _, snapshot = await api(daemon, "GET", f"/api/v1/executions/{eid}")
        return snapshot if snapshot["finished_at"] else None

    result: dict[str, Any] = await wait_for(done, timeout=timeout)
    return result


async def test_a_scheduled_task_is_triggered_polled_to_success_and_stored(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """An {every: 1s} task fires on its own: one POST with every protocol header, GETs
    with rising progress, then SUCCESS with progress 100 and the result stored."""

    def polls_of_the_first() -> float:
        """The first job's time: its polls so far (it ends at its third, however slowly the
        polls come on a loaded machine)."""
        first_eid = user_service.calls[0].eid
        return float(sum(c.method == "GET" and c.eid == first_eid for c in user_service.calls))

    user_service.duration = 3
    user_service.job_time = polls_of_the_first
    spec = task(
        "every", f"{user_service.url}/jobs/report", schedule={"every": "1s"}, poll_interval="200ms"
    )
    async with make_daemon([spec]) as daemon:
        first = await wait_for(lambda: user_service.calls and user_service.calls[0], timeout=5)
        snapshot = await final(daemon, first.eid)
        seen_progress = [e.progress for e in [await daemon.store.get_execution(first.eid)]]
    assert snapshot["status"] == "SUCCESS"
    assert snapshot["progress"] == 100
    assert snapshot["result"] == {"eid": first.eid}
    assert snapshot["trigger_kind"] == "schedule"
    assert snapshot["scheduled_at"].endswith("Z") and snapshot["triggered_at"] is not None
    assert set(first.headers) >= PROTOCOL_HEADERS
    assert first.method == "POST" and first.headers["X-Ecron-Attempt"] == "1"
    assert first.headers["X-Ecron-Scheduled-At"] == snapshot["scheduled_at"]
    assert first.headers["X-Ecron-Deadline"] == snapshot["deadline"]
    methods = user_service.methods_for(first.eid)
    assert methods[0] == "POST" and methods.count("POST") == 1
    assert methods.count("GET") == 3  # 33.3 %, 66.7 %, SUCCESS
    assert seen_progress == [100.0]


async def test_progress_and_message_are_stored_while_the_execution_runs(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """While RUNNING, the stored execution shows the service's latest progress and message
    (a change of progress alone is written within PROGRESS_SETTLE, 2 s: the job runs 4 s)."""
    user_service.duration = 4
    spec = task("slow", f"{user_service.url}/jobs/report")
    async with make_daemon([spec]) as daemon:
        status, started = await api(daemon, "POST", "/api/v1/tasks/slow/run")
        assert status == 202
        eid = started["id"]

        async def midway() -> bool:
            e = await daemon.store.get_execution(eid)
            return e is not None and e.status is Status.RUNNING and 20 < e.progress < 100

        await wait_for(midway, timeout=8)
        running = await daemon.store.get_execution(eid)
        assert running is not None and running.message == f"{running.progress}%"
        await final(daemon, eid)


async def test_a_snapshot_read_as_the_node_lets_go_never_shows_an_older_progress(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """The node holds a progress not written yet (it settles for up to 2 s); the API reads
    the row (still 0 %), and the node lets go of the execution before the answer is made
    (it ended meanwhile, say). The answer shows the progress the node held when the read
    began, not the older row: progress seen through the API never goes back (seen as
    66 % then 0 % then 100 % on a loaded machine)."""
    user_service.duration = 60
    spec = task("slow", f"{user_service.url}/jobs/report", poll_interval="100ms")
    async with make_daemon([spec]) as daemon:
        status, started = await api(daemon, "POST", "/api/v1/tasks/slow/run")
        assert status == 202
        eid = started["id"]
        held = daemon.parts.held

        async def ahead() -> bool:
            mine, row = held.get(eid), await daemon.store.get_execution(eid)
            return mine is not None and row is not None and mine.progress > row.progress

        await wait_for(ahead, timeout=10, interval=0.02)
        shown = held[eid].progress
        read = daemon.store.get_execution

        async def read_then_let_go(name: str) -> Any:
            row = await read(name)
            held.forget(eid)  # the node lets go between the read and the answer
            return row

        daemon.store.get_execution = read_then_let_go  # type: ignore[method-assign]
        status, snapshot = await api(daemon, "GET", f"/api/v1/executions/{eid}")
    assert status == 200
    assert snapshot["progress"] >= shown > 0


async def test_the_run_endpoint_answers_at_once_while_the_trigger_is_still_unanswered(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """POST /run answers 202 with a PENDING snapshot before the user service has answered
    the trigger; the trigger goes on in the background and the execution then succeeds."""
    release = asyncio.Event()

    async def hold_trigger(request: web.Request) -> None:
        if request.method == "POST":
            await release.wait()
        return None

    user_service.behaviour = hold_trigger
    user_service.duration = 0.2
    async with make_daemon([task("held", f"{user_service.url}/jobs/x")]) as daemon:
        status, snapshot = await api(daemon, "POST", "/api/v1/tasks/held/run")
        assert status == 202
        assert snapshot["status"] == "PENDING" and snapshot["trigger_kind"] == "manual"
        await wait_for(lambda: user_service.calls_for(snapshot["id"], "POST"), timeout=5)
        assert not release.is_set()  # the answer above came while the trigger was held
        release.set()
        done = await final(daemon, snapshot["id"])
    assert done["status"] == "SUCCESS"


async def test_a_manual_run_of_a_forbid_task_that_is_running_answers_with_that_execution(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """concurrency: forbid: 200 and the active execution; nothing new starts."""
    user_service.duration = 1.0
    async with make_daemon([task("one", f"{user_service.url}/jobs/x")]) as daemon:
        first_status, first = await api(daemon, "POST", "/api/v1/tasks/one/run")
        second_status, second = await api(daemon, "POST", "/api/v1/tasks/one/run")
        await final(daemon, first["id"])
        _, page = await api(daemon, "GET", "/api/v1/executions", params={"task": "one"})
    assert (first_status, second_status) == (202, 200)
    assert second["id"] == first["id"]
    assert len(page["items"]) == 1


async def test_the_api_lists_tasks_and_executions_and_answers_json_errors(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """Task and execution snapshots carry DESIGN.md's fields; unknown names answer 404 JSON;
    a bad limit answers 400; pages chain through ``next``."""
    user_service.duration = 0.05
    spec = task("listed", f"{user_service.url}/jobs/x", concurrency="allow")
    async with make_daemon([spec]) as daemon:
        eids = []
        for _ in range(3):
            _, snapshot = await api(daemon, "POST", "/api/v1/tasks/listed/run")
            eids.append(snapshot["id"])
        for eid in eids:
            await final(daemon, eid)
        status, tasks = await api(daemon, "GET", "/api/v1/tasks")
        assert status == 200
        [item] = tasks["items"]
        for key in (
            "name",
            "schedule",
            "paused",
            "paused_reason",
            "next_fire_at",
            "last_execution",
        ):
            assert key in item
        assert item["last_execution"]["id"] == eids[-1]
        status, one = await api(daemon, "GET", "/api/v1/tasks/listed")
        assert status == 200 and one["name"] == "listed"
        assert (await api(daemon, "GET", "/api/v1/tasks/nope"))[0] == 404
        status, missing = await api(daemon, "GET", "/api/v1/executions/nope")
        assert status == 404 and "error" in missing
        assert (await api(daemon, "GET", "/api/v1/executions", params={"limit": "0"}))[0] == 400
        assert (await api(daemon, "GET", "/api/v1/executions", params={"limit": "501"}))[0] == 400
        _, page1 = await api(daemon, "GET", "/api/v1/executions", params={"limit": "2"})
        _, page2 = await api(
            daemon, "GET", "/api/v1/executions", params={"limit": "2", "before": page1["next"]}
        )
        _, steps = await api(daemon, "GET", f"/api/v1/executions/{eids[0]}/steps")
        _, by_status = await api(daemon, "GET", "/api/v1/executions", params={"status": "success"})
    assert [i["id"] for i in page1["items"] + page2["items"]] == list(reversed(eids))
    assert page2["next"] is None
    assert steps == {"items": []}
    assert len(by_status["items"]) == 3
    snapshot = page1["items"][0]
    for key in (
        "id",
        "task",
        "status",
        "reason",
        "progress",
        "message",
        "result",
        "trigger_kind",
        "attempt",
        "scheduled_at",
        "created_at",
        "triggered_at",
        "finished_at",
        "deadline",
        "resume_of",
        "resume_attempt",
        "cancel_acknowledged",
        "steps",
    ):
        assert key in snapshot


async def test_with_an_api_token_the_api_wants_it_but_health_does_not(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """api_token set: 401 without or with a wrong bearer token; /healthz stays open."""
    async with make_daemon(
        [task("a", f"{user_service.url}/jobs/x")], api_token="t0ken-0123456789abcdef"
    ) as daemon:
        assert (await api(daemon, "GET", "/api/v1/tasks"))[0] == 401
        wrong = {"Authorization": "Bearer nope"}
        assert (await api(daemon, "GET", "/api/v1/tasks", headers=wrong))[0] == 401
        right = {"Authorization": "Bearer t0ken-0123456789abcdef"}
        assert (await api(daemon, "GET", "/api/v1/tasks", headers=right))[0] == 200
        assert (await api(daemon, "GET", "/healthz"))[0] == 200
        status, ready = await api(daemon, "GET", "/readyz")
    assert status == 200 and ready["status"] == "ready"


async def test_polls_that_say_nothing_new_write_nothing(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """A service that repeats the same RUNNING report is polled many times; the execution
    row is written only when something changed."""
    polls = 0

    async def same_report(request: web.Request) -> web.Response | None:
        nonlocal polls
        if request.method == "GET":
            polls += 1
            if polls >= 30:
                return web.json_response({"status": "SUCCESS"})
            return web.json_response({"status": "RUNNING", "progress": 50, "message": "same"})
        return web.json_response({"status": "RUNNING", "progress": 0})

    user_service.behaviour = same_report
    spec = task("steady", f"{user_service.url}/jobs/x", poll_interval="10ms")
    async with make_daemon([spec]) as daemon:
        _, snapshot = await api(daemon, "POST", "/api/v1/tasks/steady/run")
        await final(daemon, snapshot["id"])
        writes = daemon.writer.writes
    # The run is inserted with its trigger leaving; then RUNNING 0, RUNNING 50 and SUCCESS,
    # which become one write when they fall in one flush: at most three writes for 30 polls.
    assert polls == 30
    assert 1 <= writes <= 3


async def test_thousands_of_waiting_polls_share_one_heap_and_a_bounded_worker_pool(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """300 executions in flight at once do not each get a coroutine, neither to be triggered
    nor to be polled: ecron's own asyncio tasks stay the dispatcher, the starter, the worker
    pool and the writers."""
    user_service.duration = 3600  # all in flight while counted; made to end below
    spec = task("many", f"{user_service.url}/jobs/x", concurrency="allow", poll_interval="300ms")
    async with make_daemon([spec], poll_workers=8) as daemon:
        for _ in range(300):
            await daemon.parts.commands.run_now("many")
        await wait_for(lambda: len(user_service.jobs) == 300, timeout=20)
        await wait_for(
            lambda: all(e.status is Status.RUNNING for e in daemon.parts.held.values()),
            timeout=20,
        )
        await wait_for(
            lambda: sum(1 for c in user_service.calls if c.method == "GET") >= 600, timeout=20
        )
        while_polling = ecron_tasks()
        names = sorted(t.get_name() for t in asyncio.all_tasks())
        in_flight = len(daemon.parts.held)
        writers = daemon.writer.concurrency
        for job in user_service.jobs.values():
            job.duration = 0.0  # every job ends at its next poll
        await wait_for(lambda: not daemon.parts.held, timeout=30)
        page = await daemon.store.list_executions(task="many", status=Status.SUCCESS, limit=500)
    assert len(page.items) == 300
    assert in_flight == 300
    # the five daemon loops, the dispatcher and the starter, 8 workers, one flush of the
    # successes, and the state writer's loop with its transactions in flight (one on
    # SQLite, up to four on PostgreSQL)
    assert while_polling <= 5 + 2 + 8 + 1 + 1 + writers, names


async def test_a_restarted_daemon_adopts_the_running_execution_without_triggering_it_again(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """Stopping releases leases; the next daemon on the same database polls the execution
    to SUCCESS and the service saw exactly one POST for it."""
    user_service.duration = 1.5
    spec = task("long", f"{user_service.url}/jobs/x")
    async with make_daemon([spec]) as daemon:
        _, snapshot = await api(daemon, "POST", "/api/v1/tasks/long/run")
        eid = snapshot["id"]
        await wait_for(lambda: user_service.calls_for(eid, "GET"), timeout=5)
    async with make_daemon([spec]) as second:
        done = await final(second, eid)
    assert done["status"] == "SUCCESS"
    assert done["owner"] == second.node_id
    assert user_service.methods_for(eid).count("POST") == 1


async def test_an_execution_that_reports_nothing_new_is_polled_once_per_poll_interval(
    database_url: str, user_service: UserService
) -> None:
    """A steady RUNNING execution with poll_interval 200ms gets five polls a second, not a
    poll loop that never rests: on the rig's clock, moved a second in steps of 100 ms, one
    poll each time another 200 ms have passed since the last, none in between."""
    user_service.duration = 3600
    spec = task("steady", f"{user_service.url}/jobs/x", poll_interval="200ms")
    async with rig(database_url, [spec], T0) as r:
        execution, _ = await r.commands.run_now("steady")
        await wait_for(lambda: r.status_is(execution.eid, Status.RUNNING), timeout=5)
        seen = []
        for step in range(1, 11):
            await r.start_due(T0 + step * timedelta(milliseconds=100))
            seen.append(len(user_service.calls_for(execution.eid, "GET")))
    assert seen == [0, 1, 1, 2, 2, 3, 3, 4, 4, 5]


async def test_a_task_is_paused_and_unpaused_through_the_api_with_a_reason_people_can_see(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """POST /pause with a reason: the snapshot shows it and nothing fires; POST /unpause:
    the schedule restarts from now; unknown tasks answer 404."""
    spec = task("hourly", f"{user_service.url}/jobs/x", schedule={"every": "1h"})
    async with make_daemon([spec]) as daemon:
        status, paused = await api(
            daemon, "POST", "/api/v1/tasks/hourly/pause", json={"reason": "vendor outage"}
        )
        assert (status, paused["paused"], paused["paused_reason"]) == (200, True, "vendor outage")
        _, shown = await api(daemon, "GET", "/api/v1/tasks/hourly")
        assert shown["paused_reason"] == "vendor outage"
        status, unpaused = await api(daemon, "POST", "/api/v1/tasks/hourly/unpause")
        assert (status, unpaused["paused"], unpaused["paused_reason"]) == (200, False, None)
        assert unpaused["next_fire_at"] is not None
        assert (await api(daemon, "POST", "/api/v1/tasks/nope/pause"))[0] == 404


async def next_fire(daemon: Daemon, name: str) -> datetime | None:
    state = await daemon.store.get_task(name)
    return None if state is None else state.next_fire_at


async def moved(daemon: Daemon, name: str, planned: datetime | None) -> bool:
    """True once task ``name``'s next fire time is no longer ``planned``."""
    return await next_fire(daemon, name) not in (planned, None)


async def test_odd_requests_get_clear_answers_not_errors(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """A bearer token that is not ASCII is refused (401), for the API and for callbacks;
    empty filters mean no filter; a pause reason that is not text is refused (400);
    unpausing a task that is not paused changes nothing (its next fire time stays)."""
    spec = task("h", f"{user_service.url}/jobs/x", schedule={"after": "1h"})
    async with make_daemon([spec], api_token="t0k-0123456789abcdef") as daemon:
        user_service.duration = 0.05
        auth = {"Authorization": "Bearer t0k-0123456789abcdef"}
        odd = {"Authorization": "Bearer té"}
        assert (await api(daemon, "GET", "/api/v1/tasks", headers=odd))[0] == 401
        planned = await next_fire(daemon, "h")  # 1 h from the task's creation
        _, run = await api(daemon, "POST", "/api/v1/tasks/h/run", headers=auth)
        await ended(daemon, run["id"])
        # The end moves the next fire time (after: 1h, from the end) just after the row is
        # final; what follows reads it once moved.
        await wait_for(lambda: moved(daemon, "h", planned), timeout=10)
        report = f"/api/v1/executions/{run['id']}/report"
        assert (await api(daemon, "POST", report, headers=odd, json={"status": "RUNNING"}))[
            0
        ] == 401
        status, page = await api(
            daemon, "GET", "/api/v1/executions", headers=auth, params={"status": "", "task": ""}
        )
        _, everything = await api(daemon, "GET", "/api/v1/executions", headers=auth)
        assert status == 200 and run["id"] in [e["id"] for e in page["items"]]
        assert [e["id"] for e in page["items"]] == [e["id"] for e in everything["items"]]
        bad = {"reason": 5}
        assert (await api(daemon, "POST", "/api/v1/tasks/h/pause", headers=auth, json=bad))[
            0
        ] == 400
        _, before = await api(daemon, "GET", "/api/v1/tasks/h", headers=auth)
        status, after = await api(daemon, "POST", "/api/v1/tasks/h/unpause", headers=auth)
    assert status == 200 and after["next_fire_at"] == before["next_fire_at"]


async def test_a_loop_that_dies_stops_the_node_with_its_error(
    database_url: str, tmp_path: Path
) -> None:
    """The parts exist before the daemon starts; when one loop dies of an error its rounds
    do not catch, the others are stopped, ``async with`` raises that error and no ecron
    task is left running."""
    config = Config(
        directory=str(tmp_path),
        daemon=DaemonSettings.model_validate({"database": database_url, "listen": "127.0.0.1:0"}),
        tasks={},
    )
    daemon = Daemon(config)
    died = asyncio.Event()

    async def broken_patrol() -> None:
        died.set()
        raise RuntimeError("patrol bug")

    daemon.patrol.run = broken_patrol  # type: ignore[method-assign]
    with pytest.raises(BaseExceptionGroup) as raised:
        async with daemon:
            await asyncio.wait_for(asyncio.Event().wait(), timeout=30)  # ended by the death
    assert died.is_set()
    assert raised.group_contains(RuntimeError, match="patrol bug")
    assert ecron_tasks() == 0


async def test_a_pause_body_that_is_not_a_json_object_is_refused_with_400(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """A JSON array, text or null, and JSON nested too deep to read (which used to answer
    500), are refused with 400 and leave the task unpaused; no body at all pauses it."""
    spec = task("h", f"{user_service.url}/jobs/x", schedule={"every": "1h"})
    async with make_daemon([spec]) as daemon:
        for body in (b'["a reason"]', b'"a reason"', b"null", b"[" * 100_000):
            status, answer = await api(
                daemon, "POST", "/api/v1/tasks/h/pause", data=body, headers=JSON_TYPE
            )
            assert status == 400, (body[:20], answer)
            assert answer["error"].startswith("the body must be")
        _, shown = await api(daemon, "GET", "/api/v1/tasks/h")
        assert shown["paused"] is False
        status, paused = await api(daemon, "POST", "/api/v1/tasks/h/pause")
    assert (status, paused["paused_reason"]) == (200, "paused through the API")


async def test_a_nul_character_in_a_path_a_filter_a_reason_or_a_report_gets_a_clear_answer(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """On every database (PostgreSQL's text cannot hold NUL; these answered 500 there): a
    task or execution id with NUL is unknown (404), a task filter with NUL matches nothing, a
    before cursor with NUL is refused (400), and a NUL in a pause reason or in a report's
    message is stored as U+FFFD (a poll report with one used to leave the execution PENDING)."""

    async def nul_message(request: web.Request) -> web.Response | None:
        if request.method == "DELETE":
            return None
        return web.json_response({"status": "RUNNING", "progress": 10, "message": "a\x00b"})

    user_service.behaviour = nul_message
    spec = task("n", f"{user_service.url}/jobs/x", mode="poll")
    async with make_daemon([spec]) as daemon:
        for method, path in [
            ("GET", "/api/v1/tasks/n%00"),
            ("POST", "/api/v1/tasks/n%00/run"),
            ("GET", "/api/v1/executions/%00"),
            ("POST", "/api/v1/executions/x%00.1/report"),
        ]:
            status, answer = await api(daemon, method, path, json={"status": "RUNNING"})
            assert (status, answer["error"][:3]) == (404, "no "), (path, answer)
        assert await api(daemon, "GET", "/api/v1/executions", params={"task": "n\x00"}) == (
            200,
            {"items": [], "next": None},
        )
        status, answer = await api(daemon, "GET", "/api/v1/executions?before=%00")
        assert status == 400 and "NUL" in answer["error"]
        status, paused = await api(
            daemon, "POST", "/api/v1/tasks/n/pause", json={"reason": "x\x00y"}
        )
        assert (status, paused["paused_reason"]) == (200, "x\ufffdy")
        _, run = await api(daemon, "POST", "/api/v1/tasks/n/run")

        async def reported() -> dict[str, Any] | None:
            _, shown = await api(daemon, "GET", f"/api/v1/executions/{run['id']}")
            return shown if shown["status"] == "RUNNING" else None

        shown = await wait_for(reported, timeout=5)
        assert (shown["progress"], shown["message"]) == (10.0, "a\ufffdb")
        await api(daemon, "POST", f"/api/v1/executions/{run['id']}/cancel")
