"""PROTOCOL.md, "Deadline and cancel" and the cancel column: the cancel call leaves once,
its acknowledgement is recorded, nothing is polled after it; a person's cancel likewise."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import pytest

from ecron.core import Status
from ecron.daemon import Daemon
from tests.protocol_support import ended, reply, reset, run_once, slow, times
from tests.support.daemon import DaemonFactory, task
from tests.support.service import UserService, wait_for


@pytest.fixture
def database_url(tmp_path: Path) -> str:
    """The protocol does not depend on the database: these tests use SQLite only."""
    return f"sqlite+aiosqlite:///{tmp_path / 'ecron.db'}"


def never_ending(service: UserService, **keys: Any) -> list[Any]:
    """A task whose job runs far longer than its 1 s timeout."""
    service.duration = 3600
    values: dict[str, Any] = {"task_timeout": "1s", "request_timeout": "2s"}
    values.update(keys)
    return [task("job", f"{service.url}/jobs/x", **values)]


def witness(service: UserService) -> Any:
    """A never-ending task polled on the same interval as ``job``: while it is polled, the
    executor goes round, so its polls measure "long enough for a poll, had there been one"
    without a fixed sleep."""
    service.durations["w"] = 3600
    return task("witness", f"{service.url}/jobs/w", task_timeout="1h", request_timeout="2s")


async def witnessed(daemon: Daemon, service: UserService, eid: str, polls: int = 3) -> None:
    """Wait until execution ``eid`` (of ``witness``) has been polled ``polls`` more times."""
    before = len(service.calls_for(eid, "GET"))
    await wait_for(lambda: len(service.calls_for(eid, "GET")) >= before + polls, timeout=10)


def after_delete(service: UserService, eid: str) -> list[str]:
    methods = service.methods_for(eid)
    return methods[methods.index("DELETE") + 1 :]


async def api_cancel(daemon: Daemon, eid: str) -> tuple[int, Any]:
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            f"http://127.0.0.1:{daemon.port}/api/v1/executions/{eid}/cancel", json={}
        ) as response,
    ):
        return response.status, await response.json()


async def test_a_timed_out_execution_gets_exactly_one_delete_and_no_poll_after_it(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """Deadline = first trigger + task_timeout: then one DELETE, TIMED_OUT, acknowledged."""
    async with make_daemon([*never_ending(user_service), witness(user_service)]) as daemon:
        watcher = await run_once(daemon, "witness")
        eid = await run_once(daemon, "job")
        execution = await ended(daemon, eid)
        calls_at_end = len(user_service.calls_for(eid))
        await witnessed(daemon, user_service, watcher)  # several more polls, had there been any
    assert execution.status is Status.TIMED_OUT
    assert execution.cancel_acknowledged is True
    assert user_service.methods_for(eid).count("DELETE") == 1
    assert after_delete(user_service, eid) == []
    assert len(user_service.calls_for(eid)) == calls_at_end
    assert execution.deadline is not None and execution.finished_at is not None
    assert execution.finished_at >= execution.deadline


async def test_the_deadline_is_enforced_even_when_the_service_never_answers_again(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """Polls hang past request_timeout (and are not enough failures to end it): the
    scheduler itself times the execution out at its deadline."""
    user_service.script["GET"] = times(100, slow(5.0))
    spec = never_ending(user_service, max_probe_failures=100)
    async with make_daemon(spec) as daemon:
        eid = await run_once(daemon, "job")
        execution = await ended(daemon, eid)
    assert execution.status is Status.TIMED_OUT
    assert user_service.methods_for(eid).count("DELETE") == 1


@pytest.mark.parametrize(
    ("answer", "acknowledged"),
    [
        (reply(200, {"status": "FAILED", "message": "cancelled"}), True),
        (reply(404, {"status": "UNKNOWN"}), True),
        (reply(204), True),
        (reply(200, text="<html>bye</html>"), True),
        (reply(400, {"error": "no"}), False),
    ],
    ids=["report", "404", "204", "html", "400"],
)
async def test_the_cancel_answer_decides_whether_it_was_acknowledged(
    make_daemon: DaemonFactory, user_service: UserService, answer: Any, acknowledged: bool
) -> None:
    """2xx (with or without a report) and 404 acknowledge; another 4xx does not, and the
    execution's message then says what the service answered. One DELETE."""
    user_service.script["DELETE"] = [answer]
    async with make_daemon(never_ending(user_service)) as daemon:
        eid = await run_once(daemon, "job")
        execution = await ended(daemon, eid)
    assert execution.status is Status.TIMED_OUT
    assert execution.cancel_acknowledged is acknowledged
    assert user_service.methods_for(eid).count("DELETE") == 1
    said = '; cancel answered HTTP 400: {"error": "no"}'
    assert (execution.message or "").endswith(said) is not acknowledged, execution.message


@pytest.mark.parametrize(
    "answer", [reply(500), reply(503), slow(1.0), reset()], ids=["500", "503", "timeout", "reset"]
)
async def test_a_cancel_that_fails_in_transport_is_tried_once_more_then_not_acknowledged(
    make_daemon: DaemonFactory, user_service: UserService, answer: Any
) -> None:
    """5xx, timeout or reset: a second DELETE, then TIMED_OUT not acknowledged; no third."""
    user_service.script["DELETE"] = times(5, answer)
    async with make_daemon(never_ending(user_service, request_timeout="300ms")) as daemon:
        eid = await run_once(daemon, "job")
        execution = await ended(daemon, eid)
    assert execution.status is Status.TIMED_OUT
    assert execution.cancel_acknowledged is False
    methods = user_service.methods_for(eid)
    assert methods.count("DELETE") == 2
    assert methods[methods.index("DELETE") :] == ["DELETE", "DELETE"]


async def test_a_person_cancels_through_the_api_and_the_execution_ends_cancelled(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """POST /api/v1/executions/{eid}/cancel: one DELETE, CANCELLED, no poll after it; a
    second cancel answers 409 and an unknown id 404."""
    spec = [*never_ending(user_service, task_timeout="1h"), witness(user_service)]
    async with make_daemon(spec) as daemon:
        watcher = await run_once(daemon, "witness")
        eid = await run_once(daemon, "job")
        await wait_for(lambda: user_service.calls_for(eid, "GET"), timeout=5)
        status, snapshot = await api_cancel(daemon, eid)
        again, _ = await api_cancel(daemon, eid)
        unknown, _ = await api_cancel(daemon, "no-such-id")
        await witnessed(daemon, user_service, watcher)  # several more polls, had there been any
    assert status == 200
    assert (snapshot["status"], snapshot["cancel_acknowledged"]) == ("CANCELLED", True)
    assert (again, unknown) == (409, 404)
    assert user_service.methods_for(eid).count("DELETE") == 1
    assert after_delete(user_service, eid) == []


async def test_reports_after_a_cancel_change_nothing(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """Once TIMED_OUT, a late SUCCESS (here from the cancel's own answer) does not move it."""
    user_service.script["DELETE"] = [reply(200, {"status": "SUCCESS", "progress": 100})]
    async with make_daemon(never_ending(user_service)) as daemon:
        eid = await run_once(daemon, "job")
        execution = await ended(daemon, eid)
    assert execution.status is Status.TIMED_OUT


async def test_a_cancel_that_cannot_be_sent_is_tried_once_more_then_not_acknowledged(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """cancel_url on a port where nothing listens: two tries, TIMED_OUT, not acknowledged."""
    spec = never_ending(user_service, cancel_url="http://127.0.0.1:9/stop/{execution_id}")
    async with make_daemon(spec) as daemon:
        eid = await run_once(daemon, "job")
        execution = await ended(daemon, eid)
    assert (execution.status, execution.cancel_acknowledged) == (Status.TIMED_OUT, False)
    assert "DELETE" not in user_service.methods_for(eid)
