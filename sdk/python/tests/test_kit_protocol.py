"""The kit answers ecron's calls as PROTOCOL.md says, word for word, through each adapter
(ASGI under uvicorn, WSGI under a threaded wsgiref, aiohttp), each a real server on
127.0.0.1."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import Any

import aiohttp
import pytest
from kit_jobs import service_with_jobs
from kit_servers import ADAPTERS, call, serve, signed, until

pytestmark = pytest.mark.parametrize("adapter", ADAPTERS)


async def poll_until_final(session: aiohttp.ClientSession, url: str, eid: str) -> list[Any]:
    """Poll ``url`` until the report is final; every report seen, in order."""
    reports: list[Any] = []

    async def final() -> bool:
        status, report, _ = await call(session, "GET", url, eid)
        assert status == 200, report
        reports.append(report)
        return bool(report["status"] != "RUNNING")

    deadline = time.monotonic() + 5
    while not await final():
        assert time.monotonic() < deadline, reports[-1]
    return reports


@pytest.mark.parametrize("job", ["climb", "climb-thread"])
async def test_a_trigger_starts_one_run_whose_polls_show_rising_progress_then_the_result(
    adapter: str, job: str, session: aiohttp.ClientSession
) -> None:
    """A trigger starts the job and answers RUNNING at 0; the same trigger again starts
    nothing and answers the same run; polls show the progress rising, then SUCCESS at 100
    with the job's return value as the result. The run carries what the headers said."""
    service, seen = service_with_jobs()
    body = json.dumps({"steps": 8, "pause": 0.03}).encode()
    async with serve(service, adapter) as base:
        url = f"{base}/jobs/{job}"
        first = await call(session, "POST", url, "eid-1", body)
        again = await call(session, "POST", url, "eid-1", body)
        reports = await poll_until_final(session, f"{url}/eid-1", "eid-1")
    assert first[:2] == (200, {"status": "RUNNING", "progress": 0})
    assert again[0] == 200 and again[1]["status"] == "RUNNING"
    assert first[2]["Content-Type"].startswith("application/json")
    assert len(seen.started) == 1
    progress = [report["progress"] for report in reports[:-1]]
    assert progress == sorted(progress) and len(set(progress)) >= 2, reports
    assert reports[-1] == {
        "status": "SUCCESS",
        "progress": 100,
        "message": "step 8 of 8",
        "result": {"steps": 8},
    }
    run = seen.started[0]
    assert (run.execution_id, run.task, run.attempt, run.trigger_kind) == (
        "eid-1",
        "nightly",
        1,
        "manual",
    )
    assert run.scheduled_at == datetime(2026, 1, 1, 3, tzinfo=UTC)
    assert run.deadline == datetime(2099, 1, 1, 5, tzinfo=UTC)
    assert run.body == {"steps": 8, "pause": 0.03}
    assert run.resume_of is None and run.step is None and run.headers["x-ecron-attempt"] == "1"


@pytest.mark.parametrize("job", ["waits", "waits-thread"])
async def test_a_cancel_stops_the_job_and_answers_failed_cancelled_from_then_on(
    adapter: str, job: str, session: aiohttp.ClientSession
) -> None:
    """DELETE ends the run FAILED "cancelled" and stops its job (an async job at its next
    await, a thread once it sees ``run.cancelled``); polls and triggers then answer the
    same final report."""
    service, seen = service_with_jobs()
    async with serve(service, adapter) as base:
        url = f"{base}/jobs/{job}"
        await call(session, "POST", url, "eid-1")
        cancelled = await call(session, "DELETE", f"{url}/eid-1", "eid-1")
        await until(lambda: seen.stopped == ["eid-1"])
        polled = await call(session, "GET", f"{url}/eid-1", "eid-1")
        again = await call(session, "POST", url, "eid-1")
        await until(lambda: service.running == 0)
    final = {"status": "FAILED", "progress": 0, "message": "cancelled"}
    assert cancelled[:2] == polled[:2] == again[:2] == (200, final)
    assert len(seen.started) == 1


async def test_unknown_ids_jobs_paths_and_methods_get_the_protocols_answers(
    adapter: str, session: aiohttp.ClientSession
) -> None:
    """A poll or cancel of an id never triggered is 404 UNKNOWN; a trigger of a job the
    service does not run is 404 naming it; a trigger without an eid, with a body that is
    not JSON or with a bad header is 400 saying so; another path 404, another method 405."""
    service, seen = service_with_jobs()
    async with serve(service, adapter) as base:
        url = f"{base}/jobs/climb"
        unknown_poll = await call(session, "GET", f"{url}/never", "never")
        unknown_cancel = await call(session, "DELETE", f"{url}/never", "never")
        no_job = await call(session, "POST", f"{base}/jobs/nope", "eid-1")
        no_eid = await call(session, "POST", url)
        not_json = await call(session, "POST", url, "eid-2", b"{not json")
        bad_attempt = await call(session, "POST", url, "eid-3", **{"X-Ecron-Attempt": "two"})
        elsewhere = await call(session, "GET", f"{base}/elsewhere")
        put = await call(session, "PUT", url, "eid-4")
    assert unknown_poll[:2] == unknown_cancel[:2] == (404, {"status": "UNKNOWN"})
    assert no_job[0] == 404 and "no job named 'nope'" in no_job[1]["error"]
    assert no_eid[0] == 400 and "X-Ecron-Execution-Id" in no_eid[1]["error"]
    assert not_json[0] == 400 and "not JSON" in not_json[1]["error"]
    assert bad_attempt[0] == 400 and "X-Ecron-Attempt" in bad_attempt[1]["error"]
    assert elsewhere[0] == 404 and "/jobs/{name}" in elsewhere[1]["error"]
    assert put[0] == 405 and put[2]["Allow"] == "GET, POST"
    assert seen.started == []


async def test_the_batch_poll_answers_the_ids_it_knows_and_leaves_the_others_out(
    adapter: str, session: aiohttp.ClientSession
) -> None:
    """GET /jobs/{name}?ids=a,b answers {"reports": {...}} with the report of each id it
    knows, exactly as a poll of it would, and leaves out an id it does not know; without
    ``ids`` it answers 400."""
    service, _ = service_with_jobs()
    async with serve(service, adapter) as base:
        url = f"{base}/jobs/waits"
        await call(session, "POST", url, "eid-1")
        await call(session, "POST", url, "eid-2.1")
        await call(session, "DELETE", f"{url}/eid-2.1", "eid-2.1")
        status, batch, _ = await call(session, "GET", f"{url}?ids=eid-1,eid-2.1,never")
        single = await call(session, "GET", f"{url}/eid-2.1", "eid-2.1")
        missing = await call(session, "GET", url)
    assert status == 200
    assert batch == {
        "reports": {
            "eid-1": {"status": "RUNNING", "progress": 0},
            "eid-2.1": single[1],
        }
    }
    assert missing[0] == 400 and "ids" in missing[1]["error"]


async def test_a_raising_job_is_failed_with_its_message_and_an_interrupted_one_says_so(
    adapter: str, session: aiohttp.ClientSession
) -> None:
    """A job that raises ends FAILED with the exception's message; one that raises
    ``Interrupted`` ends FAILED with ``interrupted: true``, which ecron may resume."""
    service, _ = service_with_jobs()
    async with serve(service, adapter) as base:
        body = json.dumps({"message": "disk full on /var"}).encode()
        await call(session, "POST", f"{base}/jobs/raises", "eid-1", body)
        await call(session, "POST", f"{base}/jobs/interrupted", "eid-2")
        raised = await poll_until_final(session, f"{base}/jobs/raises/eid-1", "eid-1")
        stopped = await poll_until_final(session, f"{base}/jobs/interrupted/eid-2", "eid-2")
    assert raised[-1] == {"status": "FAILED", "progress": 0, "message": "disk full on /var"}
    assert stopped[-1] == {
        "status": "FAILED",
        "progress": 0,
        "message": "the session to the warehouse was lost",
        "interrupted": True,
    }


async def test_past_max_running_a_new_trigger_is_429_with_retry_after_and_a_known_one_200(
    adapter: str, session: aiohttp.ClientSession
) -> None:
    """With ``max_running=2`` and two jobs running, a third eid is answered 429 with
    ``Retry-After`` (ecron's back-pressure), a repeated trigger of a running eid still 200
    with its report; once one job has ended, the third is started."""
    service, seen = service_with_jobs(max_running=2, retry_after=3)
    async with serve(service, adapter) as base:
        url = f"{base}/jobs/waits-thread"
        await call(session, "POST", url, "eid-1")
        await call(session, "POST", url, "eid-2")
        busy = await call(session, "POST", url, "eid-3")
        known = await call(session, "POST", url, "eid-2")
        await call(session, "DELETE", f"{url}/eid-1", "eid-1")
        await until(lambda: service.running == 1)
        later = await call(session, "POST", url, "eid-3")
    assert busy[0] == 429 and busy[2]["Retry-After"] == "3"
    assert "max_running is 2" in busy[1]["error"]
    assert known[:2] == (200, {"status": "RUNNING", "progress": 0})
    assert later[0] == 200
    assert [run.execution_id for run in seen.started] == ["eid-1", "eid-2", "eid-3"]


async def test_without_a_valid_v2_signature_every_call_is_refused_401(
    adapter: str, session: aiohttp.ClientSession
) -> None:
    """With a secret, a call signed as ecron signs it (the raw target with its query, the
    eid, the body) is answered; an unsigned one, a trigger signed for another eid (a
    replay), a stale one and a batch poll signed with an eid are 401."""
    service, seen = service_with_jobs(secret="s3cret")
    now = int(time.time())
    body = b'{"steps": 1}'

    def sig(method: str, target: str, eid: str, t: int = now, data: bytes = b"") -> str:
        return signed("s3cret", method, target, eid, data, t)

    async with serve(service, adapter) as base:
        url, target = f"{base}/jobs/climb?region=eu", "/jobs/climb?region=eu"
        good = await call(session, "POST", url, "e1", body, **{
            "X-Ecron-Signature": sig("POST", target, "e1", data=body)})  # fmt: skip
        unsigned = await call(session, "POST", url, "e2", body)
        replayed = await call(session, "POST", url, "e3", body, **{
            "X-Ecron-Signature": sig("POST", target, "e1", data=body)})  # fmt: skip
        stale = await call(session, "POST", url, "e4", body, **{
            "X-Ecron-Signature": sig("POST", target, "e4", now - 301, body)})  # fmt: skip
        poll_target = "/jobs/climb/e1?region=eu"
        polled = await call(session, "GET", f"{base}{poll_target}", "e1", **{
            "X-Ecron-Signature": sig("GET", poll_target, "e1")})  # fmt: skip
        batch_target = "/jobs/climb?ids=e1"
        batch = await call(session, "GET", f"{base}{batch_target}", **{
            "X-Ecron-Signature": sig("GET", batch_target, "")})  # fmt: skip
        batch_with_eid = await call(session, "GET", f"{base}{batch_target}", **{
            "X-Ecron-Signature": sig("GET", batch_target, "e1")})  # fmt: skip
    assert good[0] == polled[0] == batch[0] == 200
    assert "e1" in batch[1]["reports"]
    for refused in (unsigned, replayed, stale, batch_with_eid):
        assert refused[0] == 401 and "X-Ecron-Signature" in refused[1]["error"]
    assert [run.execution_id for run in seen.started] == ["e1"]


async def test_an_ended_run_is_forgotten_once_keep_ended_has_passed(
    adapter: str, session: aiohttp.ClientSession
) -> None:
    """An ended run's report is answered for ``keep_ended`` seconds, then the id is
    unknown (404 UNKNOWN), and a trigger of it would start a new run."""
    service, _ = service_with_jobs(keep_ended=0.3)
    async with serve(service, adapter) as base:
        url = f"{base}/jobs/climb"
        await call(session, "POST", url, "eid-1", b'{"steps": 1}')
        ended = await poll_until_final(session, f"{url}/eid-1", "eid-1")

        async def forgotten() -> bool:
            status, _, _ = await call(session, "GET", f"{url}/eid-1", "eid-1")
            return status == 404

        deadline = time.monotonic() + 5
        while not await forgotten():
            assert time.monotonic() < deadline
    assert ended[-1]["status"] == "SUCCESS"
