"""PROTOCOL.md, "Callbacks: the same reports, pushed": answers and their order, tokens,
PENDING executions, late reports, and callback mode's heartbeat."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from structlog.testing import capture_logs

from ecron.core import Reason, Status
from ecron.daemon import Daemon
from ecron.signing import callback_token
from tests.protocol_support import ended, reply, run_once, started_then_slow
from tests.support.daemon import DaemonFactory, task
from tests.support.rig import FakeClock
from tests.support.service import UserService, wait_for

PUBLIC = "http://ecron.example:8080"
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def database_url(tmp_path: Path) -> str:
    """The protocol does not depend on the database: these tests use SQLite only."""
    return f"sqlite+aiosqlite:///{tmp_path / 'ecron.db'}"


async def push(
    daemon: Daemon, remote_id: str, body: Any, token: str | None, raw: bytes | None = None
) -> tuple[int, Any]:
    """POST a callback report to the daemon, as a user service would."""
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    url = f"http://127.0.0.1:{daemon.port}/api/v1/executions/{remote_id}/report"
    async with aiohttp.ClientSession() as session:
        kwargs: dict[str, Any] = {"data": raw} if raw is not None else {"json": body}
        async with session.post(url, headers=headers, **kwargs) as response:
            return response.status, await response.json()


async def running(daemon: Daemon, eid: str) -> None:
    """Wait until the trigger's answer made ``eid`` RUNNING."""

    async def found() -> bool:
        execution = await daemon.store.get_execution(eid)
        return execution is not None and execution.status is Status.RUNNING

    await wait_for(found, timeout=5)


def token_of(service: UserService, eid: str) -> str:
    """The callback token ecron handed the service for ``eid``."""
    return service.calls_for(eid, "POST")[0].headers["X-Ecron-Callback-Token"]


async def test_callback_url_and_token_come_with_every_call_when_public_url_is_set(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """POST, GET and DELETE all carry X-Ecron-Callback-Url ({public_url}/api/v1/executions/
    {id}/report) and X-Ecron-Callback-Token; without public_url neither is sent."""
    user_service.duration = 3600
    spec = task("job", f"{user_service.url}/jobs/x", task_timeout="700ms")
    async with make_daemon([spec], public_url=PUBLIC) as daemon:
        eid = await run_once(daemon, "job")
        await ended(daemon, eid)
        secret = daemon.callback_secret
    calls = user_service.calls_for(eid)
    assert {c.method for c in calls} == {"POST", "GET", "DELETE"}
    for call in calls:
        assert call.headers["X-Ecron-Callback-Url"] == f"{PUBLIC}/api/v1/executions/{eid}/report"
        assert call.headers["X-Ecron-Callback-Token"] == callback_token(secret, eid)
    user_service.calls.clear()
    async with make_daemon([task("other", f"{user_service.url}/jobs/x")]) as daemon:
        other = await run_once(daemon, "other")
        await wait_for(lambda: user_service.calls_for(other), timeout=5)
    assert "X-Ecron-Callback-Url" not in user_service.calls_for(other)[0].headers


async def test_callback_answers_come_in_the_order_404_401_400_409_200(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """Unknown id: 404 even without a token. Known id: 401 without or with a wrong token
    before the body is looked at; 400 for a body that is not a report; 200 and the snapshot
    when applied; 409 and nothing changed once final."""
    user_service.duration = 3600
    spec = task("job", f"{user_service.url}/jobs/x", poll_interval="1h")
    async with make_daemon([spec], public_url=PUBLIC) as daemon:
        eid = await run_once(daemon, "job")
        await wait_for(lambda: user_service.calls_for(eid), timeout=5)
        token = token_of(user_service, eid)
        assert (await push(daemon, "no-such-id", {"status": "RUNNING"}, None))[0] == 404
        assert (await push(daemon, eid, {"bad": 1}, None))[0] == 401
        assert (await push(daemon, eid, {"bad": 1}, "not-the-token"))[0] == 401
        assert (await push(daemon, eid, None, token, raw=b"<html>"))[0] == 400
        assert (await push(daemon, eid, {"status": "DONE"}, token))[0] == 400
        assert (await push(daemon, eid, {"status": "UNKNOWN"}, token))[0] == 400
        nested = b"[" * 100_000 + b"]" * 100_000
        assert (await push(daemon, eid, None, token, raw=nested))[0] == 400
        status, snapshot = await push(daemon, eid, {"status": "running", "progress": 60}, token)
        assert (status, snapshot["status"], snapshot["progress"]) == (200, "RUNNING", 60)
        status, snapshot = await push(daemon, eid, {"status": "SUCCESS", "result": [1]}, token)
        assert (status, snapshot["status"], snapshot["result"]) == (200, "SUCCESS", [1])
        status, body = await push(daemon, eid, {"status": "FAILED"}, token)
        execution = await daemon.store.get_execution(eid)
    assert status == 409 and body["detail"]["status"] == "SUCCESS"
    assert execution is not None and execution.status is Status.SUCCESS


async def test_a_token_opens_only_its_own_execution(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """Execution A's callback token is refused (401) for execution B."""
    user_service.duration = 3600
    spec = task("job", f"{user_service.url}/jobs/x", concurrency="allow", poll_interval="1h")
    async with make_daemon([spec], public_url=PUBLIC) as daemon:
        first = await run_once(daemon, "job")
        second = await run_once(daemon, "job")
        await wait_for(lambda: user_service.calls_for(second), timeout=5)
        forged = token_of(user_service, first)
        status, _ = await push(daemon, second, {"status": "SUCCESS"}, forged)
        execution = await daemon.store.get_execution(second)
    assert status == 401
    assert execution is not None and execution.status is not Status.SUCCESS


async def test_a_callback_may_overtake_the_trigger_answer_while_the_execution_is_pending(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """The service reports RUNNING 30% by callback before answering the trigger: 200, the
    execution moves, and the trigger answer that follows does not undo it."""
    user_service.duration = 0.2
    release = asyncio.Event()

    async def held(request: web.Request) -> web.StreamResponse:
        await release.wait()
        return await user_service.start(request.headers["X-Ecron-Execution-Id"])

    user_service.script["POST"] = [held]
    spec = task("job", f"{user_service.url}/jobs/x")
    async with make_daemon([spec], public_url=PUBLIC) as daemon:
        eid = await run_once(daemon, "job")
        await wait_for(lambda: user_service.calls_for(eid), timeout=5)
        pending = await daemon.store.get_execution(eid)
        status, snapshot = await push(
            daemon, eid, {"status": "RUNNING", "progress": 30}, token_of(user_service, eid)
        )
        release.set()
        execution = await ended(daemon, eid)
    assert pending is not None and pending.status is Status.PENDING
    assert (status, snapshot["status"], snapshot["progress"]) == (200, "RUNNING", 30)
    assert execution.status is Status.SUCCESS
    assert user_service.methods_for(eid).count("POST") == 1


async def test_a_callback_after_the_deadline_sends_the_cancel_and_changes_nothing_else(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """A callback that finds the deadline passed: the cancel call leaves (once), the
    execution ends TIMED_OUT, and the callback gets 409 with that snapshot. (On a clock the
    test moves past the 500 ms deadline before the node's loops look at it: the callback is
    the first to find it passed.)"""
    user_service.duration = 3600
    spec = task("job", f"{user_service.url}/jobs/x", task_timeout="500ms", poll_interval="1h")
    clock = FakeClock(T0)
    async with make_daemon([spec], public_url=PUBLIC, clock=clock) as daemon:
        eid = await run_once(daemon, "job")
        await running(daemon, eid)
        await wait_for(lambda: daemon.engine.settled(clock.now()), timeout=5)  # all quiet
        clock.advance_unseen(timedelta(milliseconds=600))
        status, body = await push(daemon, eid, {"status": "SUCCESS"}, token_of(user_service, eid))
        execution = await ended(daemon, eid)
    assert status == 409 and body["detail"]["status"] == "TIMED_OUT"
    assert execution.status is Status.TIMED_OUT
    assert user_service.methods_for(eid).count("DELETE") == 1


async def test_callback_mode_is_never_polled_and_silence_past_the_heartbeat_ends_it_unreachable(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """mode: callback with heartbeat_timeout 400ms: callbacks keep it alive; when they stop,
    it ends FAILED unreachable. No GET is ever sent. (On a clock the test moves: a callback
    every 200 ms for 800 ms, then 500 ms of silence.)"""
    user_service.duration = 3600
    spec = task("job", f"{user_service.url}/jobs/x", mode="callback", heartbeat_timeout="400ms")
    clock = FakeClock(T0)
    async with make_daemon([spec], public_url=PUBLIC, clock=clock) as daemon:
        eid = await run_once(daemon, "job")
        await running(daemon, eid)
        token = token_of(user_service, eid)
        for progress in (10, 20, 30, 40):
            clock.advance(timedelta(milliseconds=200))
            status, _ = await push(daemon, eid, {"status": "RUNNING", "progress": progress}, token)
            assert status == 200
        alive = await daemon.store.get_execution(eid)
        clock.advance(timedelta(milliseconds=500))
        execution = await ended(daemon, eid)
    assert alive is not None and alive.status is Status.RUNNING and alive.progress == 40
    assert (execution.status, execution.reason) == (Status.FAILED, Reason.UNREACHABLE)
    assert "GET" not in user_service.methods_for(eid)


async def test_callback_mode_follows_pushed_reports_to_success(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """mode: callback: the trigger answer and the callbacks move the execution to SUCCESS."""
    user_service.duration = 3600
    user_service.script["POST"] = [reply(202, {"status": "RUNNING"})]
    spec = task("job", f"{user_service.url}/jobs/x", mode="callback", heartbeat_timeout="5s")
    async with make_daemon([spec], public_url=PUBLIC) as daemon:
        eid = await run_once(daemon, "job")
        await wait_for(lambda: user_service.calls_for(eid), timeout=5)
        token = token_of(user_service, eid)
        await push(daemon, eid, {"status": "RUNNING", "progress": 50}, token)
        await push(daemon, eid, {"status": "SUCCESS", "message": "pushed"}, token)
        execution = await ended(daemon, eid)
    assert (execution.status, execution.message, execution.progress) == (
        Status.SUCCESS,
        "pushed",
        100.0,
    )
    assert user_service.methods_for(eid) == ["POST"]


async def test_callback_mode_resolves_an_unknown_trigger_outcome_by_sending_it_again_not_by_polling(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """mode: callback is never polled, not even after a lost trigger answer: the trigger is sent
    again with the same id, and the (deduping) service answers with the running job's report."""
    user_service.duration = 3600
    user_service.script["POST"] = [started_then_slow(user_service, 1.0)]
    spec = task(
        "job",
        f"{user_service.url}/jobs/x",
        mode="callback",
        request_timeout="300ms",
        trigger_retry={"attempts": 3, "backoff": "20ms"},
    )
    async with make_daemon([spec], public_url=PUBLIC) as daemon:
        eid = await run_once(daemon, "job")

        async def running() -> bool:
            e = await daemon.store.get_execution(eid)
            return e is not None and e.status is Status.RUNNING

        await wait_for(running, timeout=5)
    assert user_service.methods_for(eid) == ["POST", "POST"]
    assert user_service.starts[eid] == 1


async def test_a_request_whose_caller_hangs_up_before_it_is_read_is_a_warning_not_an_error(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """A request that announces a 100-byte body and hangs up after one byte, as a caller
    (the callback balancer of the pause loops) that gave up waiting on a paused node does:
    the node logs ``api_caller_gone`` at warning, not ``api_error`` with a traceback, and
    goes on answering."""
    head = (
        b"POST /api/v1/tasks/job/pause HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"
    )
    async with make_daemon([task("job", f"{user_service.url}/jobs/x")]) as daemon:
        with capture_logs() as logs:
            _, writer = await asyncio.open_connection("127.0.0.1", daemon.port)
            writer.write(head)
            await writer.drain()
            writer.close()
            await writer.wait_closed()
            await wait_for(lambda: any(e["event"] == "api_caller_gone" for e in logs), timeout=5)
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"http://127.0.0.1:{daemon.port}/healthz") as response,
        ):
            assert response.status == 200
    [gone] = [e for e in logs if e["event"] == "api_caller_gone"]
    assert gone["log_level"] == "warning" and gone["path"] == "/api/v1/tasks/job/pause"
    assert not [e for e in logs if e["event"] == "api_error"]
