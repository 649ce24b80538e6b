"""The example user service (examples/job_service.py) follows the HTTP task protocol."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from yarl import URL

from ecron.signing import verify
from tests.support.examples import load_example
from tests.support.service import wait_for

SECRET = "example-secret"
WAIT = 5.0  # the longest any test waits for the service, seconds


job_service = load_example("job_service.py")

Client = TestClient[web.Request, web.Application]


@pytest.fixture
async def client() -> AsyncIterator[Client]:
    """A client of the example service, unsigned, whose jobs last 0.3 s by default."""
    async with TestClient(TestServer(job_service.make_app(default_duration=0.3))) as client:
        yield client


@pytest.fixture
async def signed_client() -> AsyncIterator[Client]:
    """A client of the example service that verifies signatures with SECRET."""
    app = job_service.make_app(secret=SECRET, default_duration=0.3)
    async with TestClient(TestServer(app)) as client:
        yield client


def ecron_headers(eid: str, **extra: str) -> dict[str, str]:
    """The headers ecron sends on a call for ``eid``."""
    return {
        "X-Ecron-Execution-Id": eid,
        "X-Ecron-Task": "nightly-report",
        "X-Ecron-Scheduled-At": "2026-01-01T03:00:00.000Z",
        "X-Ecron-Deadline": "2099-01-01T05:00:00Z",
        "X-Ecron-Attempt": "1",
        **extra,
    }


def signature(secret: str, t: int, method: str, target: str, body: bytes, eid: str = "") -> str:
    """An X-Ecron-Signature value computed straight from PROTOCOL.md (v1, and v2 over
    ``eid``, the call's X-Ecron-Execution-Id)."""
    v1 = hmac.new(secret.encode(), f"{t}.{method}.{target}.".encode() + body, hashlib.sha256)
    v2 = hmac.new(secret.encode(), f"{t}.{method}.{target}.{eid}.".encode() + body, hashlib.sha256)
    return f"t={t},v1={v1.hexdigest()},v2={v2.hexdigest()}"


async def trigger(client: Client, eid: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    """Send the trigger for ``eid`` and answer its report, checking for a 200."""
    response = await client.post("/jobs/report", json=body or {}, headers=ecron_headers(eid))
    assert response.status == 200, await response.text()
    report: dict[str, Any] = await response.json()
    return report


async def poll(client: Client, eid: str) -> dict[str, Any]:
    """One poll of ``eid``, checking for a 200; its report."""
    response = await client.get(f"/jobs/report/{eid}", headers=ecron_headers(eid))
    assert response.status == 200, await response.text()
    report: dict[str, Any] = await response.json()
    return report


async def poll_until(
    client: Client, eid: str, done: Callable[[dict[str, Any]], bool]
) -> list[dict[str, Any]]:
    """Poll ``eid`` until a report satisfies ``done``; every report seen."""
    reports: list[dict[str, Any]] = []

    async def seen() -> bool:
        reports.append(await poll(client, eid))
        return done(reports[-1])

    await wait_for(seen, timeout=WAIT)
    return reports


async def poll_until_final(client: Client, eid: str) -> list[dict[str, Any]]:
    """Poll ``eid`` until it is no longer RUNNING; every report seen."""
    return await poll_until(client, eid, lambda report: report["status"] != "RUNNING")


def started(report: dict[str, Any]) -> bool:
    """True once a running job's progress has moved past 0."""
    return bool(report["progress"] > 0)


async def test_a_triggered_job_runs_to_success_with_rising_progress(client: Client) -> None:
    """A trigger answers RUNNING at 0; polls then show progress rising to a SUCCESS at 100."""
    first = await trigger(client, "eid-success")
    assert first["status"] == "RUNNING"
    assert first["progress"] == 0
    assert isinstance(first["message"], str)

    reports = await poll_until_final(client, "eid-success")

    progress = [report["progress"] for report in reports]
    assert progress == sorted(progress)
    assert any(0 < value < 100 for value in progress)
    assert reports[-1]["status"] == "SUCCESS"
    assert reports[-1]["progress"] == 100
    assert reports[-1]["result"] == {"kind": "report", "seconds": 0.3}


async def test_a_batch_poll_answers_the_known_jobs_of_its_kind_and_leaves_others_out(
    client: Client,
) -> None:
    """`GET /jobs/{kind}?ids=a,b,c` answers `{"reports": ...}` with the report a poll of
    each known job would answer; an eid never triggered, or triggered under another kind,
    is left out. Without `ids` it answers 400."""
    await trigger(client, "eid-batch", {"duration": "1h"})  # no step before the end
    other = await client.post("/jobs/sync", json={}, headers=ecron_headers("eid-other"))
    assert other.status == 200

    response = await client.get("/jobs/report?ids=eid-batch,eid-never,eid-other")
    assert response.status == 200
    answer = await response.json()
    single = await (await client.get("/jobs/report/eid-batch")).json()
    assert answer == {"reports": {"eid-batch": single}}
    missing = await client.get("/jobs/report")
    assert missing.status == 400
    assert "ids is missing" in (await missing.json())["error"]


async def test_a_duration_may_be_written_with_a_unit_or_as_seconds(client: Client) -> None:
    """``{"duration": "200ms"}`` and ``{"duration": 0.2}`` both give a job of 0.2 s."""
    await trigger(client, "eid-text", {"duration": "200ms"})
    await trigger(client, "eid-number", {"duration": 0.2})

    for eid in ("eid-text", "eid-number"):
        final = (await poll_until_final(client, eid))[-1]
        assert final["result"]["seconds"] == pytest.approx(0.2)


async def test_a_second_trigger_with_the_same_eid_starts_nothing_new(client: Client) -> None:
    """A repeated trigger answers the execution's current report, whatever its body says."""
    await trigger(client, "eid-twice", {"duration": "400ms"})
    await poll_until(client, "eid-twice", started)

    again = await trigger(client, "eid-twice", {"duration": "10s", "fail": True})
    assert again["status"] == "RUNNING"
    assert again["progress"] > 0  # the same job, not a new one started at 0

    final = (await poll_until_final(client, "eid-twice"))[-1]
    assert final["status"] == "SUCCESS"
    assert final["result"]["seconds"] == pytest.approx(0.4)
    assert await trigger(client, "eid-twice", {"duration": "10s"}) == final


async def test_two_triggers_with_the_same_eid_at_once_start_one_job(client: Client) -> None:
    """Two triggers for one eid whose bodies arrive slowly, side by side, start one job."""
    both_started = asyncio.Barrier(2)

    async def slow_body() -> AsyncIterator[bytes]:
        yield b'{"duration": '
        async with asyncio.timeout(WAIT):
            await both_started.wait()  # the rest of each body once both are half sent
        yield b'"1s"}'

    async def send() -> int:
        headers = ecron_headers("eid-racing")
        response = await client.post("/jobs/report", data=slow_body(), headers=headers)
        return response.status

    assert await asyncio.gather(send(), send()) == [200, 200]
    runners = [task for task in asyncio.all_tasks() if task.get_name() == "job report/eid-racing"]
    assert len(runners) == 1


async def test_an_unknown_eid_is_answered_404_unknown_by_poll_and_cancel(client: Client) -> None:
    """Polling or cancelling an eid the service never saw answers 404 with status UNKNOWN."""
    headers = ecron_headers("eid-never-seen")
    poll = await client.get("/jobs/report/eid-never-seen", headers=headers)
    cancel = await client.delete("/jobs/report/eid-never-seen", headers=headers)

    for response in (poll, cancel):
        assert response.status == 404
        assert await response.json() == {"status": "UNKNOWN"}


async def test_an_eid_is_known_only_under_the_kind_that_triggered_it(client: Client) -> None:
    """A job started at /jobs/report is unknown at /jobs/other."""
    await trigger(client, "eid-kind")

    response = await client.get("/jobs/other/eid-kind", headers=ecron_headers("eid-kind"))

    assert response.status == 404
    assert await response.json() == {"status": "UNKNOWN"}


async def test_a_cancel_stops_a_running_job_and_answers_its_final_report() -> None:
    """DELETE ends a running job FAILED "cancelled"; its progress moves no further after that
    (the job's work has stopped: nothing is left that could move it)."""
    service = job_service.JobService(default_duration=0.3)
    app = job_service.make_app(service=service)
    async with TestClient(TestServer(app)) as client:
        await trigger(client, "eid-cancel", {"duration": "5s"})
        await poll_until(client, "eid-cancel", started)

        response = await client.delete(
            "/jobs/report/eid-cancel", headers=ecron_headers("eid-cancel")
        )
        assert response.status == 200
        cancelled = await response.json()
        job = service.jobs["report", "eid-cancel"]
        assert job.runner is not None and job.runner.done()
        assert (await poll_until_final(client, "eid-cancel")) == [cancelled]
    assert cancelled["status"] == "FAILED"
    assert cancelled["message"] == "cancelled"
    assert 0 < cancelled["progress"] < 100


async def test_a_job_asked_to_fail_ends_failed_with_a_message(client: Client) -> None:
    """``{"fail": true}`` makes the job end FAILED, with a message saying so, and no result."""
    await trigger(client, "eid-fail", {"fail": True})

    final = (await poll_until_final(client, "eid-fail"))[-1]

    assert final["status"] == "FAILED"
    assert "fail" in final["message"]
    assert final["progress"] < 100
    assert "result" not in final


async def test_a_trigger_without_an_execution_id_is_refused_400(client: Client) -> None:
    """A trigger that lacks X-Ecron-Execution-Id is a 400, which ecron reads as rejected."""
    response = await client.post("/jobs/report", json={}, headers={"X-Ecron-Task": "x"})

    assert response.status == 400
    assert "X-Ecron-Execution-Id" in (await response.json())["error"]


@pytest.mark.parametrize(
    "body",
    [b"[1, 2]", b"{not json", b'{"duration": "soon"}', b'{"duration": -1}'],
)
async def test_a_trigger_with_a_body_it_cannot_read_is_refused_400(
    client: Client, body: bytes
) -> None:
    """A body that is not a JSON object, or whose duration makes no sense, is a 400."""
    response = await client.post("/jobs/report", data=body, headers=ecron_headers("eid-bad"))

    assert response.status == 400
    poll = await client.get("/jobs/report/eid-bad", headers=ecron_headers("eid-bad"))
    assert poll.status == 404  # nothing was started


async def test_a_correctly_signed_trigger_and_poll_are_accepted(signed_client: Client) -> None:
    """Signatures over method, raw path with query and exact body bytes pass verification."""
    body = json.dumps({"duration": "100ms"}).encode()
    target = "/jobs/report?region=eu"
    headers = ecron_headers(
        "eid-signed",
        **{"Content-Type": "application/json"},
        **{
            "X-Ecron-Signature": signature(
                SECRET, int(time.time()), "POST", target, body, "eid-signed"
            )
        },
    )
    response = await signed_client.post(target, data=body, headers=headers)
    assert response.status == 200, await response.text()

    # The target is signed as sent, before any decoding: %2F stays %2F.
    poll_target = "/jobs/report/eid-signed?region=eu&next=%2Fa%20b"
    poll_signature = signature(SECRET, int(time.time()) - 60, "GET", poll_target, b"", "eid-signed")
    headers = ecron_headers("eid-signed", **{"X-Ecron-Signature": poll_signature})
    url = URL(f"http://{signed_client.host}:{signed_client.port}{poll_target}", encoded=True)
    async with signed_client.session.get(url, headers=headers) as poll:
        assert poll.status == 200, await poll.text()
        assert (await poll.json())["status"] in {"RUNNING", "SUCCESS"}


#: (secret, seconds from now, method, target) of signatures that must not pass for
#: ``POST /jobs/report?q=1`` with the body ``{}``; None sends no signature at all.
BAD_SIGNATURES: dict[str, tuple[str, int, str, str] | None] = {
    "missing": None,
    "wrong secret": ("not-the-secret", 0, "POST", "/jobs/report?q=1"),
    "other method": (SECRET, 0, "PUT", "/jobs/report?q=1"),
    "query left out": (SECRET, 0, "POST", "/jobs/report"),
    "stale t": (SECRET, -301, "POST", "/jobs/report?q=1"),
    "future t": (SECRET, 400, "POST", "/jobs/report?q=1"),
}


WHYS = [*BAD_SIGNATURES, "other body", "other execution id", "garbled", "huge t", "endless t"]


@pytest.mark.parametrize("why", WHYS)
async def test_a_request_with_a_bad_or_stale_signature_is_refused_401(
    signed_client: Client, why: str
) -> None:
    """A missing, wrong or stale X-Ecron-Signature is a 401, and starts nothing."""
    headers = ecron_headers("eid-forged")
    now = int(time.time())
    if why == "other body":
        headers["X-Ecron-Signature"] = signature(
            SECRET, now, "POST", "/jobs/report?q=1", b"[]", "eid-forged"
        )
    elif why == "other execution id":  # a trigger captured and replayed under another eid
        headers["X-Ecron-Signature"] = signature(
            SECRET, now, "POST", "/jobs/report?q=1", b"{}", "eid-captured"
        )
    elif why == "garbled":
        headers["X-Ecron-Signature"] = "t=abc,v1=zz"
    elif why in ("huge t", "endless t"):  # too large for a float; past int()'s digit limit
        digits = 400 if why == "huge t" else 5000
        headers["X-Ecron-Signature"] = f"t={'9' * digits},v1={'0' * 64}"
    elif (bad := BAD_SIGNATURES[why]) is not None:
        secret, offset, method, target = bad
        headers["X-Ecron-Signature"] = signature(
            secret, now + offset, method, target, b"{}", "eid-forged"
        )

    response = await signed_client.post("/jobs/report?q=1", data=b"{}", headers=headers)

    assert response.status == 401
    fresh = signature(SECRET, now, "GET", "/jobs/report/eid-forged", b"", "eid-forged")
    headers = ecron_headers("eid-forged", **{"X-Ecron-Signature": fresh})
    poll = await signed_client.get("/jobs/report/eid-forged", headers=headers)
    assert poll.status == 404


#: The worked example of docs/protocol.md: secret ``s3cret``, 2026-01-01T03:00:00Z.
WORKED_T = 1767236400
WORKED_TRIGGER = "71ff5c65c790f1fb9c75201ddaad67072e146bdedaab35c15d9b795607bbe29b"
WORKED_POLL = "d02195920d118418ca9a75c8ade436b07e689f84acf9f159ee1b2064f9da1dd8"


def test_the_worked_signing_example_in_the_docs_verifies() -> None:
    """ecron.signing.verify, which the example uses, accepts docs/protocol.md's worked
    example, and nothing close to it."""
    trigger = ("/jobs/nightly?region=eu", b'{"kind":"full"}')
    poll = ("/jobs/nightly/01JGZ3V8Q4N2B6C9D0E1F2G3H4?region=eu", b"")
    header = f"t={WORKED_T},v1={WORKED_TRIGGER}"

    assert signature("s3cret", WORKED_T, "POST", *trigger).startswith(header + ",v2=")
    assert verify("s3cret", header, "POST", *trigger, now=WORKED_T + 300)
    assert verify("s3cret", f"t={WORKED_T},v1={WORKED_POLL}", "GET", *poll, now=WORKED_T)
    assert not verify("s3cret", header, "POST", *trigger, now=WORKED_T + 301)
    assert not verify("s3cret", header, "GET", *trigger, now=WORKED_T)
    assert not verify("s3cret", header.upper(), "POST", *trigger, now=WORKED_T)


async def test_shutting_the_service_down_stops_its_running_jobs() -> None:
    """Cleaning up the application cancels running jobs, leaving no task behind."""
    app = job_service.make_app(default_duration=30.0)
    async with TestClient(TestServer(app)) as client:
        await trigger(client, "eid-long")
        assert [task for task in asyncio.all_tasks() if task.get_name() == "job report/eid-long"]

    leftover = [task for task in asyncio.all_tasks() if task.get_name().startswith("job ")]
    assert leftover == []
