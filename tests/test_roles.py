"""Callers and roles, and the audit log (DESIGN.md, "Roles", "Audit"), on SQLite and
PostgreSQL: each role against every endpoint of the OpenAPI document the daemon serves (so
an endpoint added later is in the table the day it is added), every refused and every
changing call in the audit log with its actor, and no token anywhere it could leak."""

from __future__ import annotations

import io
from typing import Any

import sqlalchemy as sa

from ecron.api.access import needed_role
from ecron.config.callers import RANK, Role
from ecron.daemon import Daemon
from tests.support.daemon import DaemonFactory, task
from tests.support.loopback import next_address, session_from
from tests.support.openapi import served_document
from tests.support.service import UserService
from tests.test_secrets import leaked

TOKENS = {
    Role.ADMIN: "adm1n-t0ken-4f9a",
    Role.OPERATOR: "0perat0r-t0ken-77c1",
    Role.VIEWER: "v1ewer-t0ken-0b3e",
}
NAMES = {Role.ADMIN: "admin", Role.OPERATOR: "ci", Role.VIEWER: "grafana"}
CALLERS = [
    {"name": NAMES[role], "token": TOKENS[role], "role": str(role)}
    for role in (Role.OPERATOR, Role.VIEWER)
]
#: Bodies for the operations that need one.
BODIES: dict[str, Any] = {
    "/api/v1/tasks/{name}/backfill": {
        "from": "2026-01-01T00:00:00Z",
        "to": "2026-01-01T00:00:01Z",
        "dry_run": True,
    },
}


def roled_daemon(make_daemon: DaemonFactory, user_service: UserService) -> Any:
    """A daemon with one caller of each role (``api_token`` as the admin)."""
    specs = [task("quick", f"{user_service.url}/jobs/quick", concurrency="allow")]
    return make_daemon(specs, api_token=TOKENS[Role.ADMIN], api_tokens=CALLERS)


async def call(
    daemon: Daemon,
    method: str,
    path: str,
    token: str | None,
    body: Any = None,
    address: str = "127.0.0.1",
) -> tuple[int, Any]:
    """One request from ``address``; the status and the answer (JSON when it is)."""
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    url = f"http://127.0.0.1:{daemon.port}{path}"
    async with (
        session_from(address) as session,
        session.request(method, url, headers=headers, json=body) as answer,
    ):
        if answer.content_type == "application/json":
            return answer.status, await answer.json()
        return answer.status, await answer.text()


async def test_each_role_against_every_documented_endpoint_and_the_audit_log_of_it(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """For every operation of the served document and every caller (none, an unknown token,
    viewer, operator, admin): a token-free operation answers without 401/403; otherwise a
    missing or unknown token answers 401, a role below the operation's `x-required-role`
    403, and a role at or above it neither. Every refused call and every call that changes
    something is in the audit log with its actor, action and status, newest first, read
    page by page."""
    user_service.durations = {"quick": 3600}
    async with roled_daemon(make_daemon, user_service) as daemon:
        document = await served_document(daemon)
        _, started = await call(daemon, "POST", "/api/v1/tasks/quick/run", TOKENS[Role.ADMIN])
        eid = started["id"]
        values = {"{name}": "quick", "{eid}": eid}
        # (actor, action, status, remote address), oldest first
        expected: list[tuple[str, str, int, str]] = []
        table = []
        for template, methods in sorted(document["paths"].items()):
            for method, operation in sorted(methods.items()):
                needed = operation.get("x-required-role")
                assert needed == (needed_role(method.upper(), template) or None)
                if needed is None or template.endswith(("/cancel", "/resume")):
                    continue  # open ones; the ones that end the execution come last
                path = template
                for key, value in values.items():
                    path = path.replace(key, value)
                table += await _row(daemon, method.upper(), template, path, Role(needed), expected)
        for template in ("/api/v1/executions/{eid}/cancel", "/api/v1/executions/{eid}/resume"):
            path = template.replace("{eid}", eid)
            table += await _row(daemon, "POST", template, path, Role.OPERATOR, expected)
        print("\n".join(table))  # the table of allowed and refused calls, for the record
        entries = await _whole_audit(daemon)
    requests = [e for e in entries if e["actor"] != "config"]
    got = [(e["actor"], e["action"], e["status"], e["remote"]) for e in reversed(requests)]
    assert got[0] == ("admin", "run", 202, "127.0.0.1")  # the run that made the execution
    assert got[1:] == expected
    assert [e["id"] for e in entries] == sorted((e["id"] for e in entries), reverse=True)
    assert all(e["count"] == 1 for e in requests)


async def _row(
    daemon: Daemon,
    method: str,
    template: str,
    path: str,
    needed: Role,
    expected: list[tuple[str, str, int, str]],
) -> list[str]:
    """Send ``method path`` as every caller, each request from an address of its own (as
    many clients: refusals of one address are counted into few entries, and past 30 bad
    tokens a minute it is answered 429); check each answer; note what the audit log must
    hold; the lines of the table."""
    lines = []
    changes = method != "GET"
    action = template.rpartition("/")[2] if changes else "read"
    for who, token in (("unknown", None), ("unknown", "n0t-a-t0ken"), *_callers()):
        address = next_address()
        status, answer = await call(daemon, method, path, token, BODIES.get(template), address)
        role = next((r for r, t in TOKENS.items() if t == token), None)
        if role is None:
            assert status == 401, (method, path, who, status, answer)
        elif RANK[role] < RANK[needed]:
            assert status == 403, (method, path, who, status, answer)
            assert str(needed) in answer["detail"]
        else:
            assert status not in (401, 403), (method, path, who, status, answer)
        if status in (401, 403) or changes:
            expected.append((who, action, status, address))
        lines.append(f"{method:4} {path:60} {who:8} {status}")
    return lines


def _callers() -> list[tuple[str, str]]:
    return [(NAMES[role], TOKENS[role]) for role in (Role.VIEWER, Role.OPERATOR, Role.ADMIN)]


async def _whole_audit(daemon: Daemon) -> list[dict[str, Any]]:
    """Every audit entry, newest first, read 7 at a time by following ``next``."""
    entries: list[dict[str, Any]] = []
    before = None
    while True:
        query = "limit=7" + (f"&before={before}" if before else "")
        status, page = await call(daemon, "GET", f"/api/v1/audit?{query}", TOKENS[Role.ADMIN])
        assert status == 200, page
        assert len(page["items"]) <= 7
        entries += page["items"]
        before = page["next"]
        if before is None:
            return entries


async def test_no_token_shows_in_any_log_line_or_table(
    make_daemon: DaemonFactory, user_service: UserService, json_logs: io.StringIO
) -> None:
    """Callers refused and allowed, audited, logged: no token string appears in any log
    line or in any column of any table of the database."""
    async with roled_daemon(make_daemon, user_service) as daemon:
        for token in (*TOKENS.values(), "n0t-a-t0ken"):
            await call(daemon, "POST", "/api/v1/tasks/quick/pause", token, {})
            await call(daemon, "GET", "/api/v1/audit", token)
        await daemon.audit.flush()
        dump = await _dump(daemon)
    log_text = json_logs.getvalue()
    assert '"api_audit"' in log_text
    assert leaked(log_text, list(TOKENS.values())) == []
    assert leaked(dump, list(TOKENS.values())) == []
    assert "grafana" in dump and "ci" in dump  # the names are there, the tokens are not


async def _dump(daemon: Daemon) -> str:
    """Every row of every table, as text."""
    lines = []
    async with daemon.store.engines.read() as conn:
        names = await conn.run_sync(lambda sync: sa.inspect(sync).get_table_names())
        for name in names:
            for row in await conn.execute(sa.text(f'SELECT * FROM "{name}"')):
                lines.append(f"{name}: {tuple(row)}")
    return "\n".join(lines)


async def test_the_caller_endpoint_names_the_token_and_its_role(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """GET /api/v1/caller answers who the token names and its role (the dashboard shows
    only what that role may do); without any token configured, `anonymous`, an admin."""
    async with roled_daemon(make_daemon, user_service) as daemon:
        for role, token in TOKENS.items():
            status, answer = await call(daemon, "GET", "/api/v1/caller", token)
            assert (status, answer) == (
                200,
                {"name": NAMES[role], "role": str(role), "token_required": True},
            )
    async with make_daemon([]) as daemon:
        status, answer = await call(daemon, "GET", "/api/v1/caller", None)
    assert (status, answer) == (
        200,
        {"name": "anonymous", "role": "admin", "token_required": False},
    )


async def test_a_reload_that_changes_a_schedule_is_in_the_audit_log_as_config(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """The first load adds the task (actor `config`, action `add`); a reload that changes
    its schedule is recorded as `change` with the field, old and new, and one that drops
    it as `retire`, newest first, filtered by actor and task."""
    url = f"{user_service.url}/jobs/quick"
    async with roled_daemon(make_daemon, user_service) as daemon:
        config = daemon.config
        changed = task("quick", url, schedule="0 3 * * *", concurrency="allow")
        await daemon.reload(config.model_copy(update={"tasks": {"quick": changed}}))
        await daemon.reload(config.model_copy(update={"tasks": {}}))
        query = "/api/v1/audit?actor=config&task=quick"
        status, page = await call(daemon, "GET", query, TOKENS[Role.ADMIN])
    assert status == 200
    got = [(e["action"], e["target"], e["status"]) for e in page["items"]]
    assert got == [("retire", "quick", None), ("change", "quick", None), ("add", "quick", None)]
    fields = page["items"][1]["detail"]["fields"]
    assert {"field": "schedule", "old": "manual", "new": "0 3 * * *"} in fields
