"""PROTOCOL.md, "How ecron reads each outcome", the trigger column and the unknown-outcome rule.

Each test runs a real daemon against a real user service on 127.0.0.1 that misbehaves on
purpose, and asserts the final status and reason and what the service received.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from ecron.core import Reason, Status
from tests.protocol_support import (
    ended,
    huge,
    reply,
    reset,
    run_once,
    slow,
    started_then_slow,
    times,
)
from tests.support.daemon import DaemonFactory, task
from tests.support.service import UserService

FAST_RETRY = {"attempts": 3, "backoff": "20ms", "max_backoff": "50ms"}


@pytest.fixture
def database_url(tmp_path: Path) -> str:
    """The protocol does not depend on the database: these tests use SQLite only."""
    return f"sqlite+aiosqlite:///{tmp_path / 'ecron.db'}"


def job(service: UserService, **keys: Any) -> list[Any]:
    # A generous request_timeout: under load a normal answer must never look lost. The tests
    # about lost answers set a short one and hold the answer back much longer.
    values: dict[str, Any] = {"trigger_retry": FAST_RETRY, "request_timeout": "2s"}
    values.update(keys)
    return [task("job", f"{service.url}/jobs/x", **values)]


async def test_a_trigger_answered_success_at_once_ends_the_execution_without_a_poll(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """2xx + SUCCESS on the trigger: final at once, progress 100, nothing polled."""
    user_service.script["POST"] = [reply(200, {"status": "SUCCESS", "result": {"n": 1}})]
    async with make_daemon(job(user_service)) as daemon:
        eid = await run_once(daemon, "job")
        execution = await ended(daemon, eid)
    assert (execution.status, execution.progress, execution.result) == (
        Status.SUCCESS,
        100.0,
        {"n": 1},
    )
    assert user_service.methods_for(eid) == ["POST"]


async def test_a_trigger_answered_failed_ends_remote_failed(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """2xx + FAILED on the trigger: FAILED remote_failed, with the service's message."""
    user_service.script["POST"] = [reply(200, {"status": "failed", "message": "no input"})]
    async with make_daemon(job(user_service)) as daemon:
        execution = await ended(daemon, await run_once(daemon, "job"))
    assert (execution.status, execution.reason, execution.message) == (
        Status.FAILED,
        Reason.REMOTE_FAILED,
        "no input",
    )


@pytest.mark.parametrize(
    "answer",
    [reply(404, {"status": "UNKNOWN"}), reply(200, {"status": "UNKNOWN"}), reply(404, text="no")],
    ids=["404", "2xx-unknown", "404-html"],
)
async def test_a_trigger_answered_404_or_unknown_is_rejected(
    make_daemon: DaemonFactory, user_service: UserService, answer: Any
) -> None:
    """404 or a report UNKNOWN on the trigger: FAILED rejected, one POST, no retry."""
    user_service.script["POST"] = [answer]
    async with make_daemon(job(user_service)) as daemon:
        eid = await run_once(daemon, "job")
        execution = await ended(daemon, eid)
    assert (execution.status, execution.reason) == (Status.FAILED, Reason.REJECTED)
    assert user_service.methods_for(eid) == ["POST"]


@pytest.mark.parametrize("status", [400, 401, 403, 405, 409, 422])
async def test_a_trigger_answered_another_4xx_is_rejected_without_a_retry(
    make_daemon: DaemonFactory, user_service: UserService, status: int
) -> None:
    """Other 4xx (not 408 or 429): the task is misconfigured; FAILED rejected after one POST."""
    user_service.script["POST"] = [reply(status, {"error": "no"})]
    async with make_daemon(job(user_service)) as daemon:
        eid = await run_once(daemon, "job")
        execution = await ended(daemon, eid)
    assert (execution.status, execution.reason) == (Status.FAILED, Reason.REJECTED)
    assert user_service.methods_for(eid) == ["POST"]


@pytest.mark.parametrize("status", [408, 429, 500, 502, 503, 504])
async def test_a_trigger_answered_408_429_or_5xx_is_retried_with_the_same_execution_id(
    make_daemon: DaemonFactory, user_service: UserService, status: int
) -> None:
    """Two transient failures, then the service accepts: three POSTs, all for the same eid,
    and the execution goes on to SUCCESS."""
    user_service.duration = 0.1
    user_service.script["POST"] = times(2, reply(status, {"error": "busy"}))
    async with make_daemon(job(user_service)) as daemon:
        eid = await run_once(daemon, "job")
        execution = await ended(daemon, eid)
    assert execution.status is Status.SUCCESS
    posts = user_service.calls_for(eid, "POST")
    assert len(posts) == 3
    assert {call.headers["X-Ecron-Execution-Id"] for call in posts} == {eid}
    assert user_service.starts[eid] == 1


@pytest.mark.parametrize("status", [429, 503])
async def test_retry_after_on_429_and_503_is_honoured(
    make_daemon: DaemonFactory, user_service: UserService, status: int
) -> None:
    """Retry-After: 1 makes the next POST wait about a second, although the backoff is 20 ms."""
    user_service.duration = 0.1
    user_service.script["POST"] = [reply(status, {"error": "later"}, **{"Retry-After": "1"})]
    async with make_daemon(job(user_service)) as daemon:
        eid = await run_once(daemon, "job")
        await ended(daemon, eid)
    first, second = user_service.calls_for(eid, "POST")
    assert second.at - first.at >= 0.95


async def test_a_trigger_that_keeps_failing_transiently_ends_trigger_failed_after_its_attempts(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """503 every time: trigger_retry.attempts POSTs, then FAILED trigger_failed."""
    user_service.script["POST"] = times(10, reply(503, {"error": "down"}))
    async with make_daemon(job(user_service)) as daemon:
        eid = await run_once(daemon, "job")
        execution = await ended(daemon, eid)
    assert (execution.status, execution.reason) == (Status.FAILED, Reason.TRIGGER_FAILED)
    assert user_service.methods_for(eid) == ["POST", "POST", "POST"]


async def test_a_trigger_that_cannot_be_sent_is_retried_then_ends_trigger_failed(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """Connection refused (nothing sent): retried under trigger_retry, then trigger_failed."""
    spec = task("job", "http://127.0.0.1:9/jobs/x", trigger_retry=FAST_RETRY)
    async with make_daemon([spec]) as daemon:
        execution = await ended(daemon, await run_once(daemon, "job"))
    assert (execution.status, execution.reason) == (Status.FAILED, Reason.TRIGGER_FAILED)
    assert "could not be delivered" in (execution.message or "")


async def test_a_trigger_answer_lost_after_the_work_started_is_found_by_polling_not_reposted(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """The service starts the job but answers after request_timeout: ecron polls the same id,
    finds it RUNNING, and follows it to SUCCESS. Exactly one POST; the work started once."""
    user_service.duration = 0.3
    user_service.script["POST"] = [started_then_slow(user_service, 2.0)]
    async with make_daemon(job(user_service, request_timeout="300ms")) as daemon:
        eid = await run_once(daemon, "job")
        execution = await ended(daemon, eid)
    assert execution.status is Status.SUCCESS
    methods = user_service.methods_for(eid)
    assert methods[:2] == ["POST", "GET"]
    assert methods.count("POST") == 1
    assert user_service.starts[eid] == 1


async def test_a_trigger_lost_before_it_started_anything_is_sent_again_with_the_same_id(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """The first POST times out without starting the job; the poll answers 404, so the trigger
    is sent again with the same eid (counted as a retry) and the execution succeeds."""
    user_service.duration = 0.1
    user_service.script["POST"] = [slow(1.0, reply(503))]
    async with make_daemon(job(user_service, request_timeout="300ms")) as daemon:
        eid = await run_once(daemon, "job")
        execution = await ended(daemon, eid)
    assert execution.status is Status.SUCCESS
    assert user_service.methods_for(eid)[:3] == ["POST", "GET", "POST"]
    assert user_service.methods_for(eid).count("POST") == 2
    assert user_service.starts[eid] == 1


async def test_a_connection_reset_after_the_trigger_was_sent_counts_as_an_unknown_outcome(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """A reset with no answer: the same id is polled before anything else."""
    user_service.duration = 0.1
    user_service.script["POST"] = [reset()]
    async with make_daemon(job(user_service)) as daemon:
        eid = await run_once(daemon, "job")
        execution = await ended(daemon, eid)
    assert execution.status is Status.SUCCESS
    assert user_service.methods_for(eid)[:3] == ["POST", "GET", "POST"]


async def test_an_outcome_still_unknown_when_the_retries_are_spent_is_polled_until_known(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """The POST times out and every poll fails: while the outcome is unknown no second POST
    is sent (each retry only polls); after the retries the execution stays PENDING and is
    polled, and max_probe_failures failed polls end it FAILED unreachable."""
    user_service.script["POST"] = times(10, slow(1.0))
    user_service.script["GET"] = times(50, reply(500))
    async with make_daemon(
        job(user_service, request_timeout="300ms", max_probe_failures=3)
    ) as daemon:
        eid = await run_once(daemon, "job")
        execution = await ended(daemon, eid)
    assert (execution.status, execution.reason) == (Status.FAILED, Reason.UNREACHABLE)
    # the POST, its probe, one probe for each of the 2 retries, then 3 polls
    assert user_service.methods_for(eid) == ["POST"] + ["GET"] * 6


async def test_an_unknown_outcome_that_the_service_then_denies_ends_trigger_failed(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """Retries spent with the outcome unknown, then the service answers 404: it never
    started, and there is no budget to send it again: FAILED trigger_failed."""
    user_service.script["POST"] = times(10, slow(1.0))
    user_service.script["GET"] = times(3, reply(500))
    spec = job(
        user_service, request_timeout="300ms", trigger_retry={"attempts": 1, "backoff": "10ms"}
    )
    async with make_daemon(spec) as daemon:
        eid = await run_once(daemon, "job")
        execution = await ended(daemon, eid)
    assert (execution.status, execution.reason) == (Status.FAILED, Reason.TRIGGER_FAILED)
    assert user_service.methods_for(eid).count("POST") == 1


@pytest.mark.parametrize(
    "answer",
    [
        reply(200, text="<html>ok</html>"),
        reply(200, {"progress": 5}),
        huge(),
        reply(200, text="[" * 100_000 + "]" * 100_000),
    ],
    ids=["html", "no-status", "10MiB", "nested-200000-deep"],
)
async def test_a_trigger_answered_2xx_without_a_valid_report_ends_protocol_error(
    make_daemon: DaemonFactory, user_service: UserService, answer: Any
) -> None:
    """2xx with HTML, a report without status, or a body over 1 MiB: FAILED protocol_error."""
    user_service.script["POST"] = [answer]
    async with make_daemon(job(user_service)) as daemon:
        eid = await run_once(daemon, "job")
        execution = await ended(daemon, eid)
    assert (execution.status, execution.reason) == (Status.FAILED, Reason.PROTOCOL_ERROR)
    assert user_service.methods_for(eid) == ["POST"]


async def test_every_call_carries_the_protocol_headers_and_the_deadline_of_the_first_trigger(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """POSTs (including retries) and GETs carry the same execution id, task, fire time,
    attempt, trigger kind and deadline; the deadline is the first trigger's time plus
    task_timeout."""
    user_service.duration = 0.2
    user_service.script["POST"] = [reply(503)]
    async with make_daemon(job(user_service, task_timeout="1h")) as daemon:
        eid = await run_once(daemon, "job")
        execution = await ended(daemon, eid)
    assert execution.triggered_at is not None and execution.deadline is not None
    assert execution.deadline - execution.triggered_at == timedelta(hours=1)
    calls = user_service.calls_for(eid)
    assert len({c.headers["X-Ecron-Deadline"] for c in calls}) == 1
    for call in calls:
        assert call.headers["X-Ecron-Execution-Id"] == eid
        assert call.headers["X-Ecron-Task"] == "job"
        assert call.headers["X-Ecron-Attempt"] == "1"
        assert call.headers["X-Ecron-Trigger-Kind"] == "manual"
        assert call.headers["X-Ecron-Scheduled-At"].endswith("Z")
        assert "X-Ecron-Resume-Of" not in call.headers
    assert calls[0].body == b"{}" and calls[0].headers["Content-Type"] == "application/json"
