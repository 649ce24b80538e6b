"""PROTOCOL.md, "How ecron reads each outcome", the poll column: failed probes, lost ids,
report fields; against a real user service on 127.0.0.1 that misbehaves on purpose."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from ecron.core import Reason, Status
from tests.protocol_support import ended, huge, reply, reset, run_once, slow, times
from tests.support.daemon import DaemonFactory, task
from tests.support.service import UserService, wait_for

RUNNING = reply(200, {"status": "RUNNING", "progress": 10})


@pytest.fixture
def database_url(tmp_path: Path) -> str:
    """The protocol does not depend on the database: these tests use SQLite only."""
    return f"sqlite+aiosqlite:///{tmp_path / 'ecron.db'}"


def job(service: UserService, **keys: Any) -> list[Any]:
    # Generous: under load a normal answer must never count as a failed probe.
    values: dict[str, Any] = {"request_timeout": "2s", "max_probe_failures": 3}
    values.update(keys)
    return [task("job", f"{service.url}/jobs/x", **values)]


@pytest.mark.parametrize(
    "answer",
    [reply(404, {"status": "UNKNOWN"}), reply(200, {"status": "unknown"}), reply(404, text="?")],
    ids=["404", "2xx-unknown", "404-html"],
)
async def test_a_service_that_forgets_an_accepted_execution_ends_it_lost(
    make_daemon: DaemonFactory, user_service: UserService, answer: Any
) -> None:
    """404 or UNKNOWN while RUNNING: FAILED lost at once (it counts as interrupted)."""
    user_service.duration = 60
    user_service.script["GET"] = [answer]
    async with make_daemon(job(user_service)) as daemon:
        eid = await run_once(daemon, "job")
        execution = await ended(daemon, eid)
    assert (execution.status, execution.reason) == (Status.FAILED, Reason.LOST)
    assert user_service.methods_for(eid) == ["POST", "GET"]


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        (reply(403, {"error": "no"}), 'poll answered HTTP 403: {"error": "no"}'),
        (reply(500, {"message": "disk full"}), 'poll answered HTTP 500: {"message": "disk full"}'),
        (reply(503, text="<h1>Service Unavailable</h1>"), "poll answered HTTP 503: <h1>Service"),
        (reply(429), "poll answered HTTP 429"),
        (slow(1.0), "the poll was sent, but not answered: no answer within 0.3s"),
        (reset(), "the poll was sent, but not answered"),
    ],
    ids=["403", "500", "503", "429", "timeout", "reset"],
)
async def test_polls_that_keep_failing_end_it_unreachable_after_max_probe_failures(
    make_daemon: DaemonFactory, user_service: UserService, answer: Any, said: str
) -> None:
    """Any failed poll (4xx, 5xx, timeout, reset) counts; 3 in a row end it FAILED
    unreachable, its message saying what became of the last poll and what the service said
    (``poll answered HTTP 500: {"message": "disk full"}``)."""
    user_service.duration = 60
    user_service.script["GET"] = times(3, answer)
    async with make_daemon(job(user_service, request_timeout="300ms")) as daemon:
        eid = await run_once(daemon, "job")
        execution = await ended(daemon, eid)
    assert (execution.status, execution.reason) == (Status.FAILED, Reason.UNREACHABLE)
    assert user_service.methods_for(eid) == ["POST", "GET", "GET", "GET"]
    assert execution.probe_failures == 3
    assert (execution.message or "").startswith(f"3 failed probes in a row; last: {said}")


async def test_a_service_that_is_down_altogether_ends_it_unreachable(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """Polls that cannot even be sent (connection refused) count as failed probes too."""
    user_service.duration = 60
    spec = job(user_service, poll_url="http://127.0.0.1:9/{execution_id}")
    async with make_daemon(spec) as daemon:
        execution = await ended(daemon, await run_once(daemon, "job"))
    assert (execution.status, execution.reason) == (Status.FAILED, Reason.UNREACHABLE)


@pytest.mark.parametrize(
    "answer",
    [reply(200, text="<html>busy</html>"), reply(200, [1, 2]), huge()],
    ids=["html", "not-an-object", "10MiB"],
)
async def test_polls_answered_2xx_without_a_report_end_it_protocol_error(
    make_daemon: DaemonFactory, user_service: UserService, answer: Any
) -> None:
    """2xx bodies that are not reports are failed probes of kind protocol error: 3 in a row
    end it FAILED protocol_error."""
    user_service.duration = 60
    user_service.script["GET"] = times(3, answer)
    async with make_daemon(job(user_service)) as daemon:
        eid = await run_once(daemon, "job")
        execution = await ended(daemon, eid)
    assert (execution.status, execution.reason) == (Status.FAILED, Reason.PROTOCOL_ERROR)
    assert user_service.methods_for(eid).count("GET") == 3


async def test_the_reason_follows_the_last_failed_probe(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """Two bad 2xx bodies then a 500: the last failure decides, FAILED unreachable."""
    user_service.duration = 60
    user_service.script["GET"] = [reply(200, text="x"), reply(200, text="y"), reply(500)]
    async with make_daemon(job(user_service)) as daemon:
        execution = await ended(daemon, await run_once(daemon, "job"))
    assert (execution.status, execution.reason) == (Status.FAILED, Reason.UNREACHABLE)


async def test_a_good_poll_resets_the_count_of_failed_probes(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """Failures that are not in a row never reach max_probe_failures: 2 bad, 1 good, 2 bad,
    then the job finishes SUCCESS after 5 failed polls in all."""
    user_service.duration = 0.1
    bad = reply(500)
    user_service.script["GET"] = [bad, bad, RUNNING, bad, bad]
    async with make_daemon(job(user_service)) as daemon:
        eid = await run_once(daemon, "job")
        execution = await ended(daemon, eid)
    assert execution.status is Status.SUCCESS
    assert execution.probe_failures == 0
    assert user_service.methods_for(eid).count("GET") >= 6


async def test_status_is_read_without_regard_to_case(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """ "running" and " Success " are RUNNING and SUCCESS."""
    user_service.script["POST"] = [reply(200, {"status": "running"})]
    user_service.script["GET"] = [reply(200, {"status": " Success ", "message": "ok"})]
    async with make_daemon(job(user_service)) as daemon:
        execution = await ended(daemon, await run_once(daemon, "job"))
    assert (execution.status, execution.message) == (Status.SUCCESS, "ok")


async def test_a_progress_that_is_not_a_number_is_ignored_with_a_warning(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """{"progress": "half"}: the report still counts (the message is stored), progress stays,
    and a warning names the field."""
    user_service.duration = 60
    user_service.script["GET"] = [
        reply(200, {"status": "RUNNING", "progress": 40}),
        reply(200, {"status": "RUNNING", "progress": "half", "message": "still going"}),
        reply(200, {"status": "SUCCESS"}),
    ]
    with capture_logs() as logs:
        async with make_daemon(job(user_service)) as daemon:
            eid = await run_once(daemon, "job")
            execution = await ended(daemon, eid)
    assert execution.status is Status.SUCCESS
    warnings = [e for e in logs if e["event"] == "report_field_ignored"]
    assert len(warnings) == 1 and "'half'" in warnings[0]["detail"]
    assert warnings[0]["execution_id"] == eid


async def test_progress_outside_0_to_100_is_clamped_and_long_messages_are_cut(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """progress 250 is stored as 100 while RUNNING; a 5,000-character message keeps 1,000.
    (Every poll says so: a change of progress alone is written once it settled, as the
    latest report says it.)"""
    user_service.duration = 60
    user_service.script["GET"] = times(
        1000, reply(200, {"status": "RUNNING", "progress": 250, "message": "m" * 5000})
    )
    async with make_daemon(job(user_service)) as daemon:
        eid = await run_once(daemon, "job")

        async def clamped() -> bool:
            e = await daemon.store.get_execution(eid)
            return e is not None and e.progress == 100.0

        await wait_for(clamped, timeout=5)
        execution = await daemon.store.get_execution(eid)
    assert execution is not None and execution.status is Status.RUNNING
    assert execution.message == "m" * 1000


async def test_poll_and_cancel_urls_follow_their_templates_and_default_to_the_url_path(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """Without templates the eid is appended to the path of url, keeping its query string."""
    user_service.duration = 0.1
    spec = [task("job", f"{user_service.url}/jobs/x?team=data")]
    async with make_daemon(spec) as daemon:
        eid = await run_once(daemon, "job")
        await ended(daemon, eid)
    post, get = user_service.calls_for(eid)[:2]
    assert post.path == "/jobs/x?team=data"
    assert get.path == f"/jobs/x/{eid}?team=data"


async def test_poll_and_cancel_templates_fill_in_url_execution_id_and_task(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """poll_url and cancel_url templates get {url}, {execution_id} and {task} filled in."""
    user_service.duration = 3600
    spec = [
        task(
            "job",
            f"{user_service.url}/jobs/x",
            poll_url="{url}/{execution_id}?view=status&task={task}",
            cancel_url=user_service.url + "/jobs/{task}/{execution_id}",
            task_timeout="600ms",
        )
    ]
    async with make_daemon(spec) as daemon:
        eid = await run_once(daemon, "job")
        await ended(daemon, eid)
    calls = user_service.calls_for(eid)
    assert calls[1].path == f"/jobs/x/{eid}?view=status&task=job"
    assert calls[-1].method == "DELETE" and calls[-1].path == f"/jobs/job/{eid}"


async def test_the_task_headers_are_sent_and_the_protocol_headers_win_over_them(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """headers: from the task are on every call; a task header named like a protocol header
    does not replace the protocol's value."""
    user_service.duration = 0.1
    headers = {"Authorization": "Bearer t0k", "x-ecron-task": "spoofed"}
    async with make_daemon(job(user_service, headers=headers)) as daemon:
        eid = await run_once(daemon, "job")
        await ended(daemon, eid)
    for call in user_service.calls_for(eid):
        assert call.headers["Authorization"] == "Bearer t0k"
        assert [v for k, v in call.headers.items() if k.lower() == "x-ecron-task"] == ["job"]
