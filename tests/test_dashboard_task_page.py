"""A task's page (``/#/tasks/NAME``) and the front page's strips of recent runs, in a real
headless Chromium (Selenium through Debian's chromedriver) against a live daemon whose runs
go to a real user service on 127.0.0.1: the strip of the last 100 executions links each
cell to its execution, the chart's points are the API's durations, and the front page's
small strips hold one cell per recent run.

Skipped on a developer machine without chromium, chromium-driver or selenium; failed in CI.
"""

from __future__ import annotations

import itertools
import os
import shutil
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from ecron.clock import iso
from ecron.config.rules import PoolSpec
from ecron.daemon import Daemon
from tests.conftest import DaemonFactory, task
from tests.protocol_support import ended, run_once
from tests.support.browser import Page, WebDriver, browser_session, dashboard
from tests.support.service import JSON_BODY, Job, UserService, wait_for

#: Where the screenshot is copied when ECRON_SAVE_SCREENSHOT=1 (README and docs/api.md link it).
DOCS_SCREENSHOT = Path(__file__).resolve().parent.parent / "docs" / "images" / "task-page.png"
FINAL = {"SUCCESS", "FAILED", "TIMED_OUT", "CANCELLED", "SKIPPED"}
OPERATOR, VIEWER = "0perat0r-t0ken", "v1ewer-t0ken"
CALLERS = {
    "api_token": "adm1n-t0ken",
    "api_tokens": [
        {"name": "ci", "token": OPERATOR, "role": "operator"},
        {"name": "grafana", "token": VIEWER, "role": "viewer"},
    ],
}
#: The cells of the strip inside ``arguments[0]``: [eid, status, the rect's class], left to right.
CELLS = (
    "return [...document.querySelectorAll(arguments[0] + ' a[data-eid]')].map(a =>"
    " [a.dataset.eid, a.dataset.status, a.querySelector('rect').getAttribute('class')])"
)
#: The chart's points: [eid, seconds], left to right.
POINTS = (
    "return [...document.querySelectorAll('#task-chart circle[data-eid]')].map(c =>"
    " [c.dataset.eid, Number(c.dataset.seconds)])"
)
BUTTONS = "return [...document.querySelectorAll('#task-actions button')].map(b => b.textContent)"


@pytest.fixture
def database_url(tmp_path: Path) -> str:
    """The dashboard does not depend on the database: SQLite here."""
    return f"sqlite+aiosqlite:///{tmp_path / 'ecron.db'}"


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebDriver]:
    """One headless Chromium for the tests of this file."""
    yield from browser_session(tmp_path_factory)


async def api(daemon: Daemon, method: str, path: str, token: str | None = None) -> Any:
    """``method /api/v1{path}`` (a POST with an empty JSON body); the JSON answer (2xx)."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    body = JSON_BODY if method == "POST" else None
    async with (
        aiohttp.ClientSession() as session,
        session.request(
            method, f"http://127.0.0.1:{daemon.port}/api/v1{path}", json=body, headers=headers
        ) as response,
    ):
        assert response.status < 300, await response.text()
        return await response.json()


def mixed_outcomes(service: UserService) -> set[str]:
    """Make ``service`` end the n-th job it is asked to start (n from 0) by n: every 9th
    (n % 9 == 4) runs for an hour (the test cancels it), every 4th (n % 4 == 1) fails, the
    others succeed, each after 0.05 to 0.65 s. The set that the hour-long jobs' eids go
    into."""
    long: set[str] = set()
    numbers = itertools.count()

    async def start(request: web.Request) -> None:
        eid = request.headers.get("X-Ecron-Execution-Id", "")
        if request.method != "POST" or not eid or eid in service.jobs:
            return
        n = next(numbers)
        seconds = 3600.0 if n % 9 == 4 else 0.05 + (n * 7 % 11) * 0.06
        service.jobs[eid] = Job(eid, service.job_time(), seconds, fail=n % 4 == 1)
        if n % 9 == 4:
            long.add(eid)

    service.behaviour = start  # then the usual handling answers for the job made here
    return long


async def settled(daemon: Daemon, name: str, count: int, long: set[str]) -> list[dict[str, Any]]:
    """The task's ``count`` executions (newest first) once all are final, cancelling the
    hour-long ones (through the API) as they start."""
    cancelled: set[str] = set()

    async def final() -> list[dict[str, Any]] | None:
        for eid in sorted(long - cancelled):
            await api(daemon, "POST", f"/executions/{eid}/cancel")
            cancelled.add(eid)
        items: list[dict[str, Any]] = (
            await api(daemon, "GET", f"/executions?task={name}&limit={count}")
        )["items"]
        done = len(items) == count and all(e["status"] in FINAL for e in items)
        return items if done else None

    found: list[dict[str, Any]] = await wait_for(final, timeout=90, interval=0.2)
    return found


def seconds(execution: dict[str, Any]) -> float | None:
    """The API's duration of an execution: finished_at − triggered_at, when both are known."""
    start, end = execution["triggered_at"], execution["finished_at"]
    if not start or not end:
        return None
    return (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()


async def test_a_task_page_strips_its_last_100_runs_charts_their_durations_and_links_each_cell(
    make_daemon: DaemonFactory, user_service: UserService, driver: WebDriver, tmp_path: Path
) -> None:
    """100 runs of one task, started through the API, that succeed, fail or are cancelled:
    its page shows 100 cells, oldest left, each coloured by its execution's status; the
    chart has one point per execution with a trigger and an end, whose data-seconds is the
    API's finished_at − triggered_at; clicking a failed execution's cell opens its page."""
    long = mixed_outcomes(user_service)
    pool = PoolSpec(name="reports-api", max_running=20)
    spec = task(
        "sales-export",
        f"{user_service.url}/jobs/export",
        schedule="0 3 * * *",
        concurrency="allow",
        pool=pool,
    )
    async with make_daemon([spec], pools={"reports-api": pool}) as daemon:
        for _ in range(100):
            await api(daemon, "POST", "/tasks/sales-export/run")
        newest = await settled(daemon, "sales-export", 100, long)
        statuses = {e["status"] for e in newest}
        assert statuses == {"SUCCESS", "FAILED", "CANCELLED"}, statuses
        page = dashboard(driver, daemon)
        await page.open("#/tasks/sales-export")
        oldest = newest[::-1]
        wanted = [[e["id"], e["status"], f"cell {e['status']}"] for e in oldest]
        await page.wait(
            lambda d: d.execute_script(CELLS, "#task-strip") == wanted, "the strip of 100 cells"
        )
        durations = [[e["id"], seconds(e)] for e in oldest if seconds(e) is not None]
        assert len(durations) >= 90  # a run cancelled before its trigger was recorded has none
        points = await page.wait(lambda d: d.execute_script(POINTS), "the chart's points")
        assert [eid for eid, _ in points] == [eid for eid, _ in durations]
        for (eid, shown), (_, api_seconds) in zip(points, durations, strict=True):
            assert shown == pytest.approx(api_seconds, abs=0.0005), eid
        await page.wait_text("#task-pool", lambda t: "0 of 20 running" in t, "the pool's use")
        await page.wait_text("#task-upcoming", lambda t: t.count("\n") >= 4, "5 fire times")
        await page.call(driver.set_window_size, 1280, 1280)  # the whole page, its pool too
        try:
            shot = await page.screenshot(tmp_path / "task-page.png")
        finally:
            await page.call(driver.set_window_size, 1280, 1000)
        if os.environ.get("ECRON_SAVE_SCREENSHOT") == "1":
            DOCS_SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(shot, DOCS_SCREENSHOT)
        assert shot.read_bytes().startswith(b"\x89PNG")

        failed = next(e["id"] for e in oldest if e["status"] == "FAILED")
        await page.click(f'#task-strip a[data-eid="{failed}"]', "the failed run's cell")
        await page.wait_text("#execution-title", lambda text: failed in text, "its page")
        status = await page.wait_text(
            '#execution-details dd[data-field="status"]', lambda t: t != "", "its status"
        )
        assert status.startswith("FAILED")
        assert await page.script("return location.hash") == f"#/executions/{failed}"
        assert await page.console_errors() == []


async def test_the_front_page_strips_each_tasks_last_20_runs_and_links_its_name_to_its_page(
    make_daemon: DaemonFactory, user_service: UserService, driver: WebDriver
) -> None:
    """A task run 23 times shows its newest 20 runs, oldest left, one cell each; a task run
    twice shows 2 cells; a task never run shows none. Each task's name links to its page."""
    user_service.duration = 0.0
    url = f"{user_service.url}/jobs/x"
    specs = [task("many", url, concurrency="allow"), task("few", url), task("none", url)]
    async with make_daemon(specs) as daemon:
        many = [await run_once(daemon, "many") for _ in range(23)]
        few = [await run_once(daemon, "few")]
        await ended(daemon, few[0])
        few.append(await run_once(daemon, "few"))
        for eid in [*many, *few]:
            await ended(daemon, eid)
        page = dashboard(driver, daemon)
        await page.open()
        expected = {"many": many[-20:], "few": few, "none": []}

        def strips(driver: WebDriver) -> bool:
            shown = {
                name: [
                    cell[0]
                    for cell in driver.execute_script(CELLS, f'#tasks tr[data-key="{name}"]')
                ]
                for name in expected
            }
            return shown == expected

        await page.wait(strips, "one cell per recent run of each task")
        cells = await page.script(CELLS, '#tasks tr[data-key="few"]')
        assert [cell[1:] for cell in cells] == [["SUCCESS", "cell SUCCESS"]] * 2
        await page.click('#tasks tr[data-key="few"] a[href="#/tasks/few"]', "the task's name")
        await page.wait_text("#task-title", lambda text: text == "Task few", "its page")
        await page.wait(lambda d: len(d.execute_script(CELLS, "#task-strip")) == 2, "its strip")
        assert await page.console_errors() == []


async def signed_in(page: Page, token: str, fragment: str) -> None:
    """Load the page at ``fragment`` with ``token`` saved in the browser."""
    await page.call(page.driver.get, f"{page.base}/healthz")
    await page.script("localStorage.setItem('ecron-token', arguments[0])", token)
    await page.call(page.driver.get_log, "browser")
    await page.call(page.driver.get, f"{page.base}/{fragment}")


async def test_a_task_page_shows_its_fire_times_its_pool_and_the_buttons_the_role_allows(
    make_daemon: DaemonFactory, user_service: UserService, driver: WebDriver
) -> None:
    """The page lists the API's next 5 fire times and the pool's use; a viewer sees no
    button; an operator sees run now and pause, and pausing shows unpause and says that
    none of the fire times runs while paused."""
    pool = PoolSpec(name="exports", max_running=2)
    spec = task("nightly", f"{user_service.url}/jobs/x", schedule="0 3 * * *", pool=pool)
    async with make_daemon([spec], pools={"exports": pool}, **CALLERS) as daemon:
        upcoming = await api(daemon, "GET", "/tasks/nightly/upcoming?count=5", VIEWER)
        page = dashboard(driver, daemon)
        await signed_in(page, VIEWER, "#/tasks/nightly")
        times = "return [...document.querySelectorAll('#task-upcoming time')].map(t => t.dateTime)"
        await page.wait(lambda d: d.execute_script(times) == upcoming["items"], "the fire times")
        pool_text = await page.wait_text("#task-pool", lambda t: "exports" in t, "the pool")
        assert "0 of 2 running" in pool_text
        assert await page.script(BUTTONS) == []
        assert "no executions yet" in await page.text("#task-strip")

        await signed_in(page, OPERATOR, "#/tasks/nightly")
        await page.wait(lambda d: d.execute_script(BUTTONS) == ["run now", "pause"], "buttons")
        await page.click('#task-actions button[data-action="pause"]')
        await page.wait(lambda d: d.execute_script(BUTTONS) == ["run now", "unpause"], "unpause")
        await page.wait_text("#task-upcoming", lambda t: t.startswith("paused"), "paused")
        stored = await daemon.store.get_task("nightly")
        assert stored is not None and stored.paused
        assert await page.console_errors() == []


#: Sets the datetime-local input ``arguments[0]`` to the instant ``arguments[1]`` (RFC 3339)
#: as a wall time of the browser's time zone, as a person would type it.
SET_LOCAL = (
    "const input = document.querySelector(arguments[0]); const at = new Date(arguments[1]);"
    " input.valueAsNumber = at.getTime() - at.getTimezoneOffset() * 60000;"
    " input.dispatchEvent(new Event('input', {bubbles: true}));"
)
PREVIEWED = (
    "return [...document.querySelectorAll('#task-backfill .backfill-result time')]"
    ".map(t => t.dateTime)"
)


async def test_an_operator_previews_and_backfills_a_past_period_a_viewer_has_no_form(
    make_daemon: DaemonFactory, user_service: UserService, driver: WebDriver
) -> None:
    """Every hour: an operator enters a past period of 3 hours (in the browser's local
    time), previews it (3 fire times, none already run, each listed) and backfills it after
    confirming: the page says 3 executions were created and the API lists 3 executions of
    trigger_kind backfill at those fire times; a period ending in the future shows the API's
    400, naming the field. A viewer's page has no backfill form."""
    user_service.duration = 0.0
    spec = task("hourly", f"{user_service.url}/jobs/x", schedule={"every": "1h"})
    start = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=5)
    fire_times = [iso(start + timedelta(hours=n)) for n in range(3)]
    async with make_daemon([spec], **CALLERS) as daemon:
        page = dashboard(driver, daemon)
        await signed_in(page, VIEWER, "#/tasks/hourly")
        await page.wait_text("#task-title", lambda t: t == "Task hourly", "the page")
        await page.wait_text("#task-upcoming", lambda t: t != "", "the fire times")
        assert await page.script("return document.querySelectorAll('#task-backfill *').length") == 0

        await signed_in(page, OPERATOR, "#/tasks/hourly")
        await page.wait(
            lambda d: d.execute_script("return !!document.querySelector('#task-backfill form')"),
            "the backfill form",
        )
        await page.script(SET_LOCAL, "#task-backfill input[name=from]", iso(start))
        await page.script(
            SET_LOCAL, "#task-backfill input[name=to]", iso(start + timedelta(hours=3))
        )
        await page.click('#task-backfill button[data-backfill="preview"]', "preview")
        said = await page.wait_text(
            "#task-backfill .backfill-result", lambda t: "fire time" in t, "the preview"
        )
        assert said.startswith("3 fire times, 0 already run"), said
        assert await page.script(PREVIEWED) == fire_times
        assert (await daemon.store.list_executions(task="hourly")).items == []

        await page.click('#task-backfill button[data-backfill="run"]', "backfill")
        assert "hourly" in await page.accept_confirm()
        said = await page.wait_text(
            "#task-backfill .backfill-result", lambda t: "created" in t, "the backfill"
        )
        assert said == "3 fire times, 0 already run: 3 executions created", said
        future = iso(datetime.now(UTC) + timedelta(days=1))
        await page.script(SET_LOCAL, "#task-backfill input[name=to]", future)
        await page.click('#task-backfill button[data-backfill="preview"]', "preview again")
        said = await page.wait_text(
            "#task-backfill .backfill-result.error", lambda t: "400" in t, "the API's error"
        )
        assert "to" in said.split("400", 1)[1], said  # the API's text, naming the field
        listed = await api(daemon, "GET", "/executions?task=hourly&limit=100", OPERATOR)
        backfilled = [e for e in listed["items"] if e["trigger_kind"] == "backfill"]
        assert sorted(e["scheduled_at"] for e in backfilled) == fire_times
        errors = await page.console_errors()  # the browser logs the refused request, only it
        assert all("/backfill" in error and "400" in error for error in errors), errors
