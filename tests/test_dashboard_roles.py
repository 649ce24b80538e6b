"""The dashboard shows each caller what its role allows, in a real headless Chromium against
a live daemon: a viewer no action buttons, an operator the actions, an admin also the audit
log (with its filters and pages); no one below admin ever asks for the audit log.

Skipped on a developer machine without chromium, chromium-driver or selenium; failed in CI.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ecron.core.audit import AuditQuery
from ecron.daemon import Daemon
from tests.protocol_support import ended, reply
from tests.support.browser import Page, WebDriver, browser_session, dashboard
from tests.support.daemon import DaemonFactory, task
from tests.support.loopback import next_address, session_from
from tests.support.service import UserService

ADMIN, OPERATOR, VIEWER = (
    "adm1n-t0ken-0123456789",
    "0perat0r-t0ken-0123456789",
    "v1ewer-t0ken-0123456789",
)
CALLERS = {
    "api_token": ADMIN,
    "api_tokens": [
        {"name": "ci", "token": OPERATOR, "role": "operator"},
        {"name": "grafana", "token": VIEWER, "role": "viewer"},
    ],
}
#: How many action buttons the page shows.
BUTTONS = "return document.querySelectorAll('button[data-action]').length"


@pytest.fixture
def database_url(tmp_path: Path) -> str:
    """The dashboard does not depend on the database: SQLite here."""
    return f"sqlite+aiosqlite:///{tmp_path / 'ecron.db'}"


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebDriver]:
    """One headless Chromium for the tests of this file."""
    yield from browser_session(tmp_path_factory)


async def api(
    daemon: Daemon, method: str, path: str, token: str, address: str = "127.0.0.1"
) -> tuple[int, Any]:
    """``method /api/v1{path}`` with ``token`` (a POST with an empty JSON body), from
    ``address``; the status and the JSON answer."""
    headers = {"Authorization": f"Bearer {token}"}
    body = {} if method == "POST" else None
    async with (
        session_from(address) as session,
        session.request(
            method, f"http://127.0.0.1:{daemon.port}/api/v1{path}", json=body, headers=headers
        ) as response,
    ):
        return response.status, await response.json()


async def signed_in(page: Page, token: str, shown: str) -> None:
    """Open the page, type ``token`` and save it, and wait until the page says it acts as
    ``shown``. Before, it asked who it was without a token (401), and nothing more."""
    await page.open()
    await page.wait_text("#problem", lambda text: "401" in text, "the token prompt")
    await page.type("#token", token)
    await page.click('#token-form button[type="submit"]')
    await page.wait_text("#caller", lambda text: text == shown, f"the caller {shown!r}")
    refused = await page.console_errors()
    assert all("/api/v1/caller " in line and "401" in line for line in refused), refused


async def saved_in(page: Page, token: str, fragment: str = "#/") -> None:
    """Load the page at ``fragment`` with ``token`` already saved in the browser (put there
    from another page of the daemon: the dashboard never loads without it, so it makes no
    refused request that would show in the audit log)."""
    await page.call(page.driver.get, f"{page.base}/healthz")
    await page.script("localStorage.setItem('ecron-token', arguments[0])", token)
    await page.call(page.driver.get_log, "browser")
    await page.call(page.driver.get, f"{page.base}/{fragment}")


async def go(page: Page, fragment: str) -> None:
    """Follow ``fragment`` in the page as a link would (the saved token kept)."""
    await page.script("location.hash = arguments[0]", fragment)


async def shown(page: Page, css: str) -> bool:
    """Whether the element at ``css`` is displayed (not hidden, nor inside something hidden)."""
    found: bool = await page.script(
        "const node = document.querySelector(arguments[0]); return !!(node && node.offsetParent)",
        css,
    )
    return found


async def actions(daemon: Daemon, user_service: UserService) -> tuple[str, str]:
    """A failed execution of ``report`` (resumable) and a running one (cancellable)."""
    user_service.durations["long"] = 60.0
    user_service.script["POST"] = [reply(200, {"status": "FAILED", "message": "disk full"})]
    failed = await run(daemon, "report")
    await ended(daemon, failed)
    return failed, await run(daemon, "sync")


async def run(daemon: Daemon, name: str) -> str:
    """Start task ``name`` through the API as the daemon's operator (or anyone, when it asks
    for no token); the new execution's id."""
    status, answer = await api(daemon, "POST", f"/tasks/{name}/run", OPERATOR)
    assert status == 202, answer
    return str(answer["id"])


def specs(user_service: UserService) -> list[Any]:
    return [
        task("report", f"{user_service.url}/jobs/report"),
        task("sync", f"{user_service.url}/jobs/long"),
    ]


async def test_a_viewer_sees_no_action_buttons_and_no_audit_log_and_never_asks_for_it(
    make_daemon: DaemonFactory, user_service: UserService, driver: WebDriver
) -> None:
    """A viewer's token: the page says "as grafana (viewer)" and shows the tasks, the running
    execution and the failed one, but no run, pause, cancel or resume button, neither on the
    front page nor on an execution's page; no link to the audit log, #/audit shows the front
    page, and the audit log records no request of the viewer (none was sent, not even one
    refused)."""
    async with make_daemon(specs(user_service), **CALLERS) as daemon:
        failed, running = await actions(daemon, user_service)
        page = dashboard(driver, daemon)
        await signed_in(page, VIEWER, "as grafana (viewer)")
        await page.element(f'#running tr[data-key="{running}"]', "the running execution")
        await page.element(f'#history tr[data-key="{failed}"]', "the failed execution")
        await page.element('#tasks tr[data-key="report"]', "the task")
        assert await page.script(BUTTONS) == 0
        assert not await shown(page, "#audit-link")

        await go(page, f"#/executions/{running}")
        await page.wait_text("#execution-title", lambda text: running in text, "its page")
        await page.wait_text(
            '#execution-details dd[data-field="status"]', lambda t: t == "RUNNING", "status"
        )
        assert await page.script(BUTTONS) == 0
        assert await page.text("#execution-actions") == ""

        await go(page, "#/audit")
        await page.wait_text("#summary", lambda text: "task" in text, "the front page")
        assert not await shown(page, "#audit-log")
        assert await shown(page, "#tasks")
        assert await page.console_errors() == []
        entries = await daemon.audit.page(AuditQuery(actor="grafana"))
    assert entries.items == []


async def test_an_operator_sees_the_action_buttons_but_no_audit_log(
    make_daemon: DaemonFactory, user_service: UserService, driver: WebDriver
) -> None:
    """An operator's token: the page says "as ci (operator)" and shows run now and pause on
    each task, cancel on the running execution and resume on the failed one; pressing run
    now starts an execution; there is no link to the audit log and the page never asks it
    (the operator's only entries are its three runs: no refused read)."""
    async with make_daemon(specs(user_service), **CALLERS) as daemon:
        failed, running = await actions(daemon, user_service)
        page = dashboard(driver, daemon)
        await signed_in(page, OPERATOR, "as ci (operator)")
        for name in ("report", "sync"):
            for action in ("run", "pause"):
                await page.element(f'#tasks button[data-action="{action}"][data-target="{name}"]')
        await page.element(f'#running button[data-action="cancel"][data-target="{running}"]')
        await page.element(f'#history button[data-action="resume"][data-target="{failed}"]')
        assert not await shown(page, "#audit-link")

        await page.click('#tasks tr[data-key="report"] button[data-action="run"]')
        await page.wait_text("#notice", lambda t: t.startswith("report: started "), "the run")
        await go(page, "#/audit")
        await page.wait_text("#summary", lambda text: "task" in text, "the front page")
        assert not await shown(page, "#audit-log")
        assert await page.console_errors() == []
        entries = await daemon.audit.page(AuditQuery(actor="ci"))
    done = [(e.action, e.target, e.status) for e in entries.items]
    assert done == [("run", "report", 202), ("run", "sync", 202), ("run", "report", 202)]


async def test_an_admin_reads_the_audit_log_filtered_by_actor_and_task(
    make_daemon: DaemonFactory, user_service: UserService, driver: WebDriver
) -> None:
    """An admin's token: the page links to the audit log, which lists the run an operator
    made through the API (actor ci, action run, target the task, status 202, its address)
    and a config change's fields; the actor filter leaves the operator's entries, the task
    filter the entries about that task, both in the fragment (#/audit?actor=ci)."""
    async with make_daemon(specs(user_service), **CALLERS) as daemon:
        status, started = await api(daemon, "POST", "/tasks/report/run", OPERATOR)
        assert status == 202, started
        fields = [{"field": "schedule", "old": "manual", "new": "every 10m"}]
        daemon.audit.record("config", "change", "sync", task="sync", detail={"fields": fields})
        page = dashboard(driver, daemon)
        await saved_in(page, ADMIN)
        await page.wait_text("#caller", lambda text: text == "as admin (admin)", "the caller")
        await page.click("#audit-link", "the link to the audit log")
        await page.wait_text("#audit-log tbody", lambda t: "ci run report 202" in t, "the run")
        rows = await audit_rows(page)
        assert ["ci", "run", "report", "202", "127.0.0.1"] in [row[1:] for row in rows], rows
        change = next(row for row in rows if row[2] == "change")
        assert change[3] == 'sync\nschedule: "manual" → "every 10m"', change
        assert {"ci", "config"} <= {row[1] for row in rows}

        await page.type("#audit-actor", "ci")
        await page.click('#audit-filters button[type="submit"]')
        await page.wait(
            lambda d: d.execute_script("return location.hash") == "#/audit?actor=ci",
            "the actor in the fragment",
        )
        await wait_audit(page, lambda rows: {row[1] for row in rows} == {"ci"}, "ci's entries")
        await page.click("#audit-clear")
        await page.type("#audit-task", "sync")
        await page.click('#audit-filters button[type="submit"]')
        await wait_audit(
            page,
            lambda rows: [row[2] for row in rows] == ["change", "add"],
            "the entries about sync: its change and its addition",
        )
        assert await page.console_errors() == []


async def test_the_audit_log_pages_through_next_with_older_and_newer(
    make_daemon: DaemonFactory, user_service: UserService, driver: WebDriver
) -> None:
    """A viewer's 60 refused runs, each from an address of its own (those of one address
    within a minute would be counted into two entries), filtered by its name: the audit log
    shows the newest 50, "Older" the other 10 (following the answer's next, the filter
    kept) and "Newer" the first page again."""
    async with make_daemon(specs(user_service), **CALLERS) as daemon:
        for _ in range(60):
            status, _ = await api(daemon, "POST", "/tasks/report/run", VIEWER, next_address())
            assert status == 403
        page = dashboard(driver, daemon)
        await saved_in(page, ADMIN, "#/audit?actor=grafana")
        await wait_audit(page, lambda rows: len(rows) == 50, "the newest 50 entries")
        first = await audit_rows(page)
        assert {tuple(row[1:5]) for row in first} == {("grafana", "run", "report", "403")}
        assert await page.text("#audit-page-number") == "page 1"
        await page.click("#audit-page-older")
        await wait_audit(page, lambda rows: len(rows) == 10, "the oldest 10 entries")
        assert {row[1] for row in await audit_rows(page)} == {"grafana"}
        assert await page.text("#audit-page-number") == "page 2"
        assert await page.script("return document.getElementById('audit-page-older').disabled")
        await page.click("#audit-page-newer")
        await wait_audit(page, lambda rows: rows == first, "the newest 50 again")


async def test_without_any_token_the_anonymous_admin_sees_every_action_and_the_audit_log(
    make_daemon: DaemonFactory, user_service: UserService, driver: WebDriver
) -> None:
    """A daemon that asks for no token: the page needs none, names no caller, and shows run
    now and pause on each task, cancel and resume, and the link to the audit log."""
    async with make_daemon(specs(user_service)) as daemon:
        failed, running = await actions(daemon, user_service)
        page = dashboard(driver, daemon)
        await page.open()
        await page.element('#tasks button[data-action="run"][data-target="report"]')
        await page.element('#tasks button[data-action="pause"][data-target="sync"]')
        await page.element(f'#running button[data-action="cancel"][data-target="{running}"]')
        await page.element(f'#history button[data-action="resume"][data-target="{failed}"]')
        assert await page.text("#caller") == ""
        assert await page.text("#problem") == ""
        await page.click("#audit-link", "the link to the audit log")
        await page.wait_text("#audit-log tbody", lambda t: "anonymous run" in t, "the runs")
        assert await page.console_errors() == []


#: The audit table's rows, each as its cells' texts.
ROWS = (
    "return [...document.querySelectorAll('#audit-log tbody tr[data-key]')]"
    ".map(row => [...row.cells].map(cell => cell.innerText))"
)


async def audit_rows(page: Page) -> list[list[str]]:
    """The rows the audit log shows: when, actor, action, target, status, remote."""
    rows: list[list[str]] = await page.script(ROWS)
    return rows


async def wait_audit(page: Page, condition: Any, what: str) -> None:
    """Until the audit log's rows satisfy ``condition``."""
    await page.wait(lambda d: condition(d.execute_script(ROWS)), what)
