"""``GET /api/v1/openapi.json``: a valid OpenAPI 3.1 document, served without the token,
that describes exactly the routes the application serves, and whose schemas the answers of
a real daemon (SQLite, a real user service) match."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from openapi_spec_validator import validate

from ecron.api import dashboard, executions, health, openapi, pools
from ecron.api.app import make_app
from ecron.config.rules import PoolSpec
from ecron.core import Status
from ecron.signing import callback_token
from ecron.store.records import TaskState
from tests.protocol_support import ended
from tests.support.daemon import DaemonFactory, task
from tests.support.openapi import AUTH, TOKEN, Recorder, api_context, served_document
from tests.support.service import UserService, wait_for


@pytest.fixture
def database_url(tmp_path: Path) -> str:
    """The document does not depend on the database: SQLite here."""
    return f"sqlite+aiosqlite:///{tmp_path / 'ecron.db'}"


async def test_the_document_is_served_without_the_api_token_and_is_valid_openapi_3_1(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """With an API token configured, the document still answers 200 without one; it is a
    valid OpenAPI 3.1 document, the very one the module builds."""
    async with make_daemon([task("a", f"{user_service.url}/jobs/x")], api_token=TOKEN) as daemon:
        served = await served_document(daemon)
    validate(served)  # raises on an invalid document
    assert served["openapi"].startswith("3.1.")
    assert served == json.loads(json.dumps(openapi.document()))


async def test_every_route_served_is_documented_and_every_documented_operation_is_served(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """The daemon's application and the document agree on every method and path, the
    endpoints at the root and the document's own included."""
    async with make_daemon([task("a", f"{user_service.url}/jobs/x")]) as daemon:
        app = make_app(api_context(daemon))
    assert openapi.mismatches(app) == (set(), set())
    assert {("GET", "/healthz"), ("GET", openapi.PATH), ("GET", "/")} <= openapi.served(app)


async def test_a_route_added_without_documentation_is_reported(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """A route nobody described shows up as undocumented; an application that lacks the
    task routes shows them as documented but not served."""

    async def stray(_request: web.Request) -> web.Response:
        return web.json_response({})

    async with make_daemon([task("a", f"{user_service.url}/jobs/x")]) as daemon:
        app = make_app(api_context(daemon))
    app.router.add_post("/api/v1/tasks/{name}/archive", stray)
    undocumented, unserved = openapi.mismatches(app)
    assert (undocumented, unserved) == ({("POST", "/api/v1/tasks/{name}/archive")}, set())
    partial = web.Application()
    for part in (health, executions, dashboard, openapi, pools):
        partial.add_routes(part.routes)
    undocumented, unserved = openapi.mismatches(partial)
    assert undocumented == set()
    assert ("POST", "/api/v1/tasks/{name}/run") in unserved and ("GET", "/api/v1/audit") in unserved
    assert len(unserved) == 11  # the 7 task operations, the 3 of the audit module, short ids


def test_the_snapshot_schemas_name_every_field_the_design_names() -> None:
    """DESIGN.md's execution snapshot fields, eta (RFC 3339 or null) and upstream among
    them, its step fields and its task snapshot fields are all described."""
    components = openapi.document()["components"]["schemas"]
    execution = components["ExecutionSnapshot"]["properties"]
    assert set(execution) >= {
        "id", "task", "status", "reason", "progress", "message", "result", "trigger_kind",
        "attempt", "scheduled_at", "created_at", "triggered_at", "finished_at", "deadline",
        "resume_of", "resume_attempt", "cancel_acknowledged", "eta", "upstream", "steps",
    }  # fmt: skip
    eta = execution["eta"]["anyOf"]
    assert {"type": "null"} in eta and any(s.get("format") == "date-time" for s in eta)
    assert {"type": "null"} in execution["upstream"]["anyOf"]
    step = components["StepSnapshot"]["properties"]
    assert set(step) >= {"number", "name", "status", "progress", "message", "remote_id"}
    assert set(components["TaskSnapshot"]["properties"]) >= {
        "name", "schedule", "paused", "paused_reason", "next_fire_at", "last_execution",
    }  # fmt: skip


async def test_answers_of_a_live_daemon_match_their_documented_schemas(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """Every endpoint, answering success and its usual errors (401, 404, 409, 400), gives
    an answer whose status, content type and body the document describes."""
    user_service.durations = {"quick": 0.2, "push": 3600}
    specs = [
        task("quick", f"{user_service.url}/jobs/quick"),
        task("etl", None, steps=[{"name": "one", "url": f"{user_service.url}/jobs/quick"},
                                 {"name": "two", "url": f"{user_service.url}/jobs/quick"}]),
        task("push", f"{user_service.url}/jobs/push", mode="callback",
             pool=PoolSpec(name="p", max_running=2, max_per_second=3)),
        task("yearly", f"{user_service.url}/jobs/quick", schedule="0 0 1 1 *"),
        task("berlin", f"{user_service.url}/jobs/quick", schedule="30 2 * * *",
             timezone="Europe/Berlin", dst={"gap": "skip", "fold": "both"}),
    ]  # fmt: skip
    async with make_daemon(specs, api_token=TOKEN) as daemon:
        api = Recorder(daemon, await served_document(daemon))
        _, quick = await api.send("POST", "/api/v1/tasks/{name}/run", "/api/v1/tasks/quick/run")
        _, etl = await api.send("POST", "/api/v1/tasks/{name}/run", "/api/v1/tasks/etl/run")
        _, push = await api.send("POST", "/api/v1/tasks/{name}/run", "/api/v1/tasks/push/run")
        await api.send("POST", "/api/v1/tasks/{name}/run", "/api/v1/tasks/push/run")  # 200
        await ended(daemon, quick["id"])
        await ended(daemon, etl["id"])
        await api.send("GET", "/api/v1/tasks")
        await api.send("GET", "/api/v1/tasks", headers={})  # 401
        await api.send("GET", "/api/v1/pools")
        await api.send("GET", "/api/v1/tasks/{name}", "/api/v1/tasks/quick")
        await api.send("GET", "/api/v1/tasks/{name}", "/api/v1/tasks/nope")  # 404
        upcoming = "/api/v1/tasks/{name}/upcoming"
        await api.send("GET", upcoming, "/api/v1/tasks/quick/upcoming", params={"count": "3"})
        await api.send("GET", upcoming, "/api/v1/tasks/quick/upcoming", params={"count": "0"})
        berlin = "/api/v1/tasks/berlin/upcoming"
        for start in ("2027-03-27T00:00:00Z", "2027-10-30", "2027-10-30T00:00"):  # 400 last
            await api.send("GET", upcoming, berlin, params={"from": start, "count": "3"})
        backfill, yearly = "/api/v1/tasks/{name}/backfill", "/api/v1/tasks/yearly/backfill"
        period = {"from": "2024-01-01T00:00:00Z", "to": "2026-01-01T00:00:00Z"}
        await api.send("POST", backfill, yearly, json={**period, "dry_run": True})
        _, backfilled = await api.send("POST", backfill, yearly, json=period)
        await api.send("POST", backfill, yearly, json={**period, "to": "2999-01-01T00:00:00Z"})
        await api.send("POST", backfill, "/api/v1/tasks/quick/backfill", json=period)  # manual
        for eid in backfilled["executions"]:
            await ended(daemon, eid)
        pause = "/api/v1/tasks/{name}/pause"
        await api.send("POST", pause, "/api/v1/tasks/quick/pause", json={"reason": "why"})
        await api.send("POST", pause, "/api/v1/tasks/quick/pause", json=["not", "an object"])
        await api.send("POST", "/api/v1/tasks/{name}/unpause", "/api/v1/tasks/quick/unpause")
        await api.send("GET", "/api/v1/executions", params={"limit": "2"})
        await api.send("GET", "/api/v1/executions", params={"limit": "0"})  # 400
        await api.send("GET", "/api/v1/audit", params={"limit": "3"})
        await api.send("GET", "/api/v1/audit", params={"limit": "x"})  # 400
        await api.send("GET", "/api/v1/caller")
        await api.send("GET", "/api/v1/about")
        ids = [("id", quick["id"]), ("id", etl["id"]), ("id", "nope")]
        await api.send("GET", "/api/v1/short-ids", params=ids)
        await api.send("GET", "/api/v1/short-ids", params=[("id", str(n)) for n in range(101)])
        one = f"/api/v1/executions/{etl['id']}"
        await api.send("GET", "/api/v1/executions/{eid}", one)
        await api.send("GET", "/api/v1/executions/{eid}/steps", one + "/steps")
        await api.send("GET", "/api/v1/executions/{eid}", "/api/v1/executions/nope")  # 404
        report = "/api/v1/executions/{eid}/report"
        callback = {"Authorization": f"Bearer {callback_token(daemon.callback_secret, push['id'])}"}
        at = f"/api/v1/executions/{push['id']}/report"
        running = {"status": "RUNNING", "progress": 40}
        await wait_for(lambda: user_service.calls_for(push["id"]), timeout=5)
        await api.send("POST", report, at, headers=callback, json=running)
        await api.send("POST", report, at, headers=AUTH, json=running)  # 401: not its token
        await api.send("POST", report, at, headers=callback, json={"status": "DONE"})  # 400
        cancel = "/api/v1/executions/{eid}/cancel"
        await api.send("POST", cancel, f"/api/v1/executions/{push['id']}/cancel")
        await api.send("POST", cancel, f"/api/v1/executions/{push['id']}/cancel")  # 409
        await api.send("POST", report, at, headers=callback, json=running)  # 409
        resume = "/api/v1/executions/{eid}/resume"
        await api.send("POST", resume, f"/api/v1/executions/{push['id']}/resume")
        await api.send("POST", resume, f"/api/v1/executions/{push['id']}/resume")  # 409
        await api.send("GET", "/healthz", headers={})
        await wait_for(lambda: daemon.scheduler.last_tick is not None, timeout=5)
        await api.send("GET", "/readyz", headers={})
        await api.send("GET", "/metrics", headers={})
        await api.send("GET", "/", headers={})
        await api.send("GET", "/static/{name}", "/static/dashboard.js", headers={})
        await api.send("GET", "/static/{name}", "/static/no-such.js", headers={})
    assert api.problems == []
    statuses = {(method, path): set() for method, path, _ in api.seen}
    for method, path, status in api.seen:
        statuses[method, path].add(status)
    assert statuses["POST", "/api/v1/tasks/{name}/run"] == {200, 202}
    assert statuses["POST", report] == {200, 400, 401, 409}
    assert statuses["POST", cancel] == {200, 409} and statuses["POST", resume] == {202, 409}
    assert statuses["GET", "/api/v1/tasks"] == {200, 401}
    assert statuses["POST", pause] == {200, 400}
    assert statuses["POST", backfill] == {200, 202, 400}
    assert statuses["GET", upcoming] == {200, 400}
    assert statuses["GET", "/static/{name}"] == {200, 404}
    assert statuses["GET", "/api/v1/short-ids"] == {200, 400}
    assert len(statuses) == len(openapi.OPERATIONS) - 1  # all but the document itself


async def test_a_cancel_asked_while_another_cancel_of_it_waits_answers_a_documented_409(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """Two cancels of one running execution: the first sends the cancel call and, once the
    user service answers it, gets the CANCELLED snapshot; the second, asked while that call
    is unanswered, gets 409 saying the execution is already being stopped, with `detail`
    null. Both answers match the document, and only one cancel call is sent."""
    answer_cancel = asyncio.Event()

    async def held(_request: web.Request) -> None:
        await answer_cancel.wait()  # then the service answers the cancel as usual

    user_service.durations = {"slow": 3600}
    user_service.script["DELETE"] = [held]
    async with make_daemon([task("slow", f"{user_service.url}/jobs/slow")]) as daemon:
        api = Recorder(daemon, await served_document(daemon))
        _, run = await api.send("POST", "/api/v1/tasks/{name}/run", "/api/v1/tasks/slow/run")
        cancel, at = "/api/v1/executions/{eid}/cancel", f"/api/v1/executions/{run['id']}/cancel"

        async def running() -> bool:
            execution = await daemon.store.get_execution(run["id"])
            return execution is not None and execution.status is Status.RUNNING

        await wait_for(running, timeout=5)
        first = asyncio.create_task(api.send("POST", cancel, at))
        await wait_for(lambda: user_service.calls_for(run["id"], "DELETE"), timeout=5)
        second_status, second = await api.send("POST", cancel, at)
        answer_cancel.set()
        first_status, first_body = await first
    assert (second_status, second["detail"]) == (409, None)
    assert second["error"] == f"execution {run['id']} is already being stopped (still RUNNING)"
    assert (first_status, first_body["status"]) == (200, "CANCELLED")
    assert len(user_service.calls_for(run["id"], "DELETE")) == 1
    assert api.problems == []


async def test_a_pause_that_loses_every_race_for_the_task_row_answers_a_documented_409(
    make_daemon: DaemonFactory, user_service: UserService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When another write of the task's row comes first before each of pause's tries (the
    real store, each rival a real write), pause answers 409 "kept changing; try again" as
    the document describes, and the task is left unpaused."""
    async with make_daemon([task("a", f"{user_service.url}/jobs/x")]) as daemon:
        store, api = daemon.store, Recorder(daemon, await served_document(daemon))
        real = store.set_paused

        async def rival_first(
            name: str, paused: bool, reason: str | None, following: Any, *, version: int
        ) -> TaskState | None:
            now = await store.get_task(name)
            assert now is not None
            await real(name, now.paused, now.paused_reason, now.next_fire_at, version=now.version)
            return await real(name, paused, reason, following, version=version)

        monkeypatch.setattr(store, "set_paused", rival_first)
        status, body = await api.send("POST", "/api/v1/tasks/{name}/pause", "/api/v1/tasks/a/pause")
        monkeypatch.undo()
        after = await store.get_task("a")
    assert (status, body) == (409, {"error": "task 'a' kept changing; try again", "detail": None})
    assert after is not None and not after.paused
    assert api.problems == []
