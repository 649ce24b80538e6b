"""What the API gives away or lets in (issue 34), against a live daemon on 127.0.0.1:
refusals cannot flood the audit log and an address past its bad tokens is answered 429
(N2), an out-of-range cursor is a 400 and not a 500 (N12), one preview of fire times does
not hold the node up (N11), and no answer names a version or lets a browser guess its
type."""

from __future__ import annotations

import asyncio
import io
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from ecron.api.audit import entry_json
from ecron.api.limits import MAX_BAD_TOKENS
from ecron.core.audit import AuditQuery
from ecron.daemon import Daemon
from tests.support.daemon import DaemonFactory, task
from tests.support.service import UserService

#: An admin's token (16 characters at least).
ADMIN = "admin-token-0123456789abcdef"


@pytest.fixture
def database_url(tmp_path: Path) -> str:
    """What the API answers here does not depend on the database: SQLite."""
    return f"sqlite+aiosqlite:///{tmp_path / 'ecron.db'}"


@pytest.fixture
async def daemon(make_daemon: DaemonFactory, user_service: UserService) -> AsyncIterator[Daemon]:
    """A daemon that asks for an admin token, with a task that fires on 29 February at
    midnight in Berlin (a zone with daylight saving time)."""
    callers = [{"name": "root", "token": ADMIN, "role": "admin"}]
    specs = [
        task("report", f"{user_service.url}/jobs/report"),
        task(
            "leap",
            f"{user_service.url}/jobs/leap",
            schedule="0 0 29 2 *",
            timezone="Europe/Berlin",
            calendar={"weekdays": ["mon"]},
        ),
    ]
    async with make_daemon(specs, api_tokens=callers) as running:
        yield running


def url(daemon: Daemon, path: str) -> str:
    return f"http://127.0.0.1:{daemon.port}{path}"


ADMIN_HEADERS = {"Authorization": f"Bearer {ADMIN}"}


async def test_300_bad_tokens_in_a_row_are_a_few_audit_entries_and_past_30_are_answered_429(
    daemon: Daemon,
) -> None:
    """One client sends 300 requests with a wrong token as fast as it can: the first 30
    are answered 401, the others 429 with a Retry-After of at most a minute, even one with
    the right token from that address; the audit log holds a few entries (at most 10)
    whose counts sum to the 300 refusals, and says once that the address was held back.
    Another request with the right token, once the log was read, is served."""
    statuses: list[int] = []
    retry_after: set[str] = set()
    async with aiohttp.ClientSession() as session:
        for n in range(300):
            wrong = {"Authorization": f"Bearer wrong-token-{n:04d}-xxxxxxxx"}
            async with session.post(url(daemon, "/api/v1/tasks/report/run"), headers=wrong) as r:
                statuses.append(r.status)
                if r.status == 429:
                    retry_after.add(r.headers["Retry-After"])
        async with session.get(url(daemon, "/api/v1/tasks"), headers=ADMIN_HEADERS) as held:
            held_status = held.status
    # the log as an admin reads it (from this address, held back for the minute: directly)
    page = [entry_json(e) for e in (await daemon.audit.page(AuditQuery(limit=500))).items]
    assert statuses == [401] * MAX_BAD_TOKENS + [429] * (300 - MAX_BAD_TOKENS)
    assert held_status == 429
    assert retry_after and all(1 <= int(value) <= 60 for value in retry_after)
    refusals = [e for e in page if e["status"] in (401, 429)]
    assert 2 <= len(refusals) <= 10, refusals
    assert sum(e["count"] for e in refusals) == 300 + 1  # and the right token held back
    assert {e["actor"] for e in refusals} == {"unknown"}
    said = [e for e in refusals if (e["detail"] or {}).get("retry_after")]
    assert len(said) == 1 and said[0]["status"] == 429


async def test_a_cursor_past_64_bits_is_the_newest_page_not_a_500(daemon: Daemon) -> None:
    """GET /audit?before=9223372036854775808 (2^63, one past the largest id a database
    holds, which its driver cannot bind) answers the newest page, as a cursor past every
    entry does (it was a 500); a cursor that is not digits (`-1`, `１`) answers 400 naming
    `before`."""
    answers = {}
    async with aiohttp.ClientSession(headers=ADMIN_HEADERS) as session:
        for before in ("9223372036854775808", "99999999999999999999999", "", "-1", "１"):
            async with session.get(url(daemon, "/api/v1/audit"), params={"before": before}) as r:
                answers[before] = (r.status, await r.json())
    newest = answers[""]
    assert newest[0] == 200 and newest[1]["items"]
    assert answers["9223372036854775808"] == newest
    assert answers["99999999999999999999999"] == newest
    for before in ("-1", "１"):
        status, body = answers[before]
        assert status == 400 and "before" in body["error"], (before, body)


async def test_no_answer_names_a_version_and_every_one_says_nosniff(daemon: Daemon) -> None:
    """Health, metrics, the dashboard and its files, the document, JSON answers, errors
    (401, 404, 405, 413) and an HTTP request that cannot be read all send `Server: ecron`
    (no version of ecron, Python or aiohttp); every answer of the application also sends
    `X-Content-Type-Options: nosniff`."""
    seen: dict[str, tuple[int, str | None, str | None]] = {}
    asks = [
        ("GET", "/healthz", {}),
        ("GET", "/readyz", {}),
        ("GET", "/metrics", {}),
        ("GET", "/", {}),
        ("GET", "/static/dashboard.js", {}),
        ("GET", "/api/v1/openapi.json", {}),
        ("GET", "/api/v1/tasks", ADMIN_HEADERS),
        ("GET", "/api/v1/tasks", {}),
        ("GET", "/api/v1/nothing", ADMIN_HEADERS),
        ("DELETE", "/api/v1/tasks/report", ADMIN_HEADERS),
    ]
    async with aiohttp.ClientSession() as session:
        for method, path, headers in asks:
            async with session.request(method, url(daemon, path), headers=headers) as r:
                seen[f"{method} {path} {bool(headers)}"] = (
                    r.status,
                    r.headers.get("Server"),
                    r.headers.get("X-Content-Type-Options"),
                )
        big = b"x" * (2 * 1024 * 1024)
        run = url(daemon, "/api/v1/tasks/report/run")
        async with session.post(run, data=io.BytesIO(big), headers=ADMIN_HEADERS) as r:
            seen["POST 2 MiB"] = (
                r.status,
                r.headers.get("Server"),
                r.headers.get("X-Content-Type-Options"),
            )
    reader, writer = await asyncio.open_connection("127.0.0.1", daemon.port)
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nBad Header\r\n\r\n")
    await writer.drain()
    head = (await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)).decode()
    writer.close()
    await writer.wait_closed()
    lines = {
        line.partition(":")[0].lower(): line.partition(":")[2].strip()
        for line in head.split("\r\n")[1:]
        if line
    }
    seen["malformed"] = (
        int(head.split()[1]),
        lines.get("server"),
        lines.get("x-content-type-options"),
    )
    statuses = {key: status for key, (status, _, _) in seen.items()}
    assert statuses["GET /api/v1/tasks False"] == 401 and statuses["POST 2 MiB"] == 413
    assert statuses["malformed"] == 400 and statuses["DELETE /api/v1/tasks/report True"] == 405
    for key, (_, server, nosniff) in seen.items():
        assert server == "ecron", key
        # aiohttp's own answer to a request it cannot read (text, before any handler) is
        # the one without nosniff: it quotes no caller's text that a browser could run
        assert nosniff == ("nosniff" if key != "malformed" else None), key


async def test_a_preview_of_100_leap_days_on_mondays_does_not_hold_up_other_requests(
    daemon: Daemon,
) -> None:
    """`/upcoming?count=100` of a task that fires on 29 February when it is a Monday in
    Berlin walks about 2,800 years of fire times and daylight saving changes; while it
    does, the node goes on answering: no /healthz waits as long as a tenth of that
    preview (it was all of it, the loop held)."""
    async with aiohttp.ClientSession(headers=ADMIN_HEADERS) as session:

        async def preview() -> float:
            started = time.monotonic()
            async with session.get(url(daemon, "/api/v1/tasks/leap/upcoming?count=100")) as r:
                assert r.status == 200, await r.text()
                assert len((await r.json())["items"]) == 100
            return time.monotonic() - started

        waits: list[float] = []
        previewing = asyncio.ensure_future(preview())
        while not previewing.done():
            started = time.monotonic()
            async with session.get(url(daemon, "/healthz")) as r:
                assert r.status == 200
            waits.append(time.monotonic() - started)
        took = await previewing
    assert took > 0.5, f"the preview took {took:.2f} s: too short to show anything"
    assert max(waits) < took / 10, (max(waits), took)
