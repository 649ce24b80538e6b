"""Naming an execution by a unique prefix of its eid, on a live daemon: every endpoint
about one execution (snapshot, steps, cancel, resume) resolves it, an ambiguous prefix
answers 409 with the candidates, an unknown one 404; the callback wants the exact id."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp

from ecron.core import Execution, Reason, Status
from ecron.daemon import Daemon
from ecron.signing import callback_token
from tests.protocol_support import run_once
from tests.support.daemon import DaemonFactory, task
from tests.support.service import JSON_BODY, UserService

T0 = datetime(2026, 1, 1, tzinfo=UTC)
IDS = [
    "01a2276a-4480-73e8-967c-b18487cf0001",
    "01a2276a-4480-73e8-967c-b18487cf0002",
    "01a2276a-5e56-72c0-85ae-075f0d450003",
]


async def call(
    daemon: Daemon, method: str, path: str, headers: dict[str, str] | None = None
) -> tuple[int, Any]:
    url = f"http://127.0.0.1:{daemon.port}/api/v1{path}"
    async with (
        aiohttp.ClientSession() as session,
        session.request(method, url, headers=headers, json=JSON_BODY) as response,
    ):
        return response.status, await response.json()


async def history(daemon: Daemon, name: str) -> None:
    """Executions of ``name`` with the ``IDS``: two SUCCESS, the last one FAILED."""
    for n, eid in enumerate(IDS):
        at = T0 + timedelta(hours=n)
        failed = n == len(IDS) - 1
        execution = Execution(
            eid=eid,
            task=name,
            scheduled_at=at,
            created_at=at,
            status=Status.FAILED if failed else Status.SUCCESS,
            reason=Reason.REMOTE_FAILED if failed else None,
            triggered_at=at,
            finished_at=at + timedelta(minutes=1),
        )
        assert await daemon.store.create_execution(execution) is not None


async def test_a_unique_prefix_names_its_execution_on_every_endpoint_about_one(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """GET, steps and resume take a unique prefix (in any case) as they take the id; a
    prefix that ends on a dash or the whole id work too."""
    user_service.duration = 30
    async with make_daemon([task("a", f"{user_service.url}/jobs/x")]) as daemon:
        await history(daemon, "a")
        for name in ("01a2276a-5", "01A2276A-5E", IDS[2], IDS[2].upper()):
            status, body = await call(daemon, "GET", f"/executions/{name}")
            assert (status, body["id"]) == (200, IDS[2]), name
        status, body = await call(daemon, "GET", "/executions/01a2276a-4480-73e8-967c-b18487cf0001")
        assert (status, body["id"]) == (200, IDS[0])
        status, body = await call(daemon, "GET", "/executions/01a2276a-5e/steps")
        assert (status, body) == (200, {"items": []})
        status, body = await call(daemon, "POST", "/executions/01a2276a-5e/resume")
        assert status == 202 and body["resume_of"] == IDS[2]
        status, body = await call(daemon, "POST", f"/executions/{body['id'][:20]}/cancel")
    assert status == 200 and body["status"] == "CANCELLED" and body["resume_of"] == IDS[2]


async def test_an_ambiguous_prefix_answers_409_with_the_candidates_and_an_unknown_one_404(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """The start of several ids: 409, the error naming the prefix and how many, the detail
    listing each candidate (id, task, status, created_at), on every endpoint; nothing was
    cancelled or resumed. A prefix of no id, or text that no id can start with: 404."""
    async with make_daemon([task("a", f"{user_service.url}/jobs/x")]) as daemon:
        await history(daemon, "a")
        status, body = await call(daemon, "GET", "/executions/01a2276a-4480")
        assert status == 409
        assert (
            body["error"] == "'01a2276a-4480' is the start of 2 execution ids; give more of the id"
        )
        assert body["detail"] == [
            {
                "id": IDS[0],
                "task": "a",
                "status": "SUCCESS",
                "created_at": "2026-01-01T00:00:00.000Z",
            },
            {
                "id": IDS[1],
                "task": "a",
                "status": "SUCCESS",
                "created_at": "2026-01-01T01:00:00.000Z",
            },
        ]
        for method, path in (("GET", "/steps"), ("POST", "/cancel"), ("POST", "/resume")):
            status, body = await call(daemon, method, f"/executions/01a2{path}")
            assert status == 409 and [c["id"] for c in body["detail"]] == IDS, path
        for name in ("01a2276b", "zz", "01a2276a-4480-73e8-967c-b18487cf0001x"):
            status, body = await call(daemon, "GET", f"/executions/{name}")
            assert (status, body) == (404, {"error": f"no execution {name!r}", "detail": None})
        after = [await daemon.store.get_execution(eid) for eid in IDS]
        assert [e.status for e in after if e] == [Status.SUCCESS, Status.SUCCESS, Status.FAILED]
        assert await daemon.store.resumes_of(IDS) == {}


async def test_an_answer_of_409_lists_at_most_ten_candidates_and_says_there_are_more(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """Twelve executions of one task started together share their first characters: the
    answer names ten of them, in id order, and says more than ten ids start so."""
    spec = task("a", f"{user_service.url}/jobs/x", concurrency="allow")
    user_service.duration = 30
    async with make_daemon([spec]) as daemon:
        eids = sorted([await run_once(daemon, "a") for _ in range(12)])
        common = next(n for n in range(36, 0, -1) if len({e[:n] for e in eids}) == 1)
        status, body = await call(daemon, "GET", f"/executions/{eids[0][:common]}")
    assert status == 409 and "more than 10 execution ids" in body["error"]
    assert [c["id"] for c in body["detail"]] == eids[:10]


async def test_the_callback_wants_the_exact_id(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """A user service reports about the id it was given: a prefix of it is no execution
    (asked with the prefix's own token)."""
    user_service.duration = 30
    async with make_daemon([task("a", f"{user_service.url}/jobs/x")]) as daemon:
        eid = await run_once(daemon, "a")
        token = callback_token(daemon.callback_secret, eid[:20])
        headers = {"Authorization": f"Bearer {token}"}
        status, body = await call(daemon, "POST", f"/executions/{eid[:20]}/report", headers)
    assert (status, body["error"]) == (404, f"no execution or step {eid[:20]!r}")
