"""A task's page (``/#/tasks/NAME``) and the front page's strips of recent runs, in a real
headless Chromium (Selenium through Debian's chromedriver) against a live daemon whose runs
go to a real user service on 127.0.0.1: the strip of the last 100 executions links each
cell to its execution, the chart's points are the API's durations, and the front page's
small strips hold one cell per recent run.

Skipped on a developer machine without chromium, chromium-driver or selenium; failed in CI.
"""

from __future__ import annotations

import itertools
import math
import os
import re
import shutil
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from ecron.clock import iso
from ecron.config.rules import PoolSpec
from ecron.core import Status
from ecron.daemon import Daemon
from ecron.wall import took, wall
from tests.protocol_support import ended, run_once
from tests.support.browser import Page, WebDriver, browser_session, dashboard
from tests.support.daemon import DaemonFactory, task
from tests.support.rig import FakeClock
from tests.support.service import JSON_BODY, Job, UserService, wait_for

#: Where the screenshot is copied when ECRON_SAVE_SCREENSHOT=1 (README and docs/api.md link it).
DOCS_SCREENSHOT = Path(__file__).resolve().parent.parent / "docs" / "images" / "task-page.png"
FINAL = {"SUCCESS", "FAILED", "TIMED_OUT", "CANCELLED", "SKIPPED"}
OPERATOR, VIEWER = "0perat0r-t0ken-0123456789", "v1ewer-t0ken-0123456789"
CALLERS = {
    "api_token": "adm1n-t0ken-0123456789",
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
    hour-long ones (through the API) as they start (each once: it leaves ``long``)."""

    async def final() -> list[dict[str, Any]] | None:
        for eid in sorted(long):
            await api(daemon, "POST", f"/executions/{eid}/cancel")
            long.discard(eid)
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
    """100 runs of one task and 6 of another, started through the API, that succeed, fail
    or are cancelled: a page shows one cell per run, oldest left, coloured by its
    execution's status, each cell as wide with 6 runs as with 100 (a fixed size) over a
    labelled time axis; the chart has one point per execution with a trigger and an end,
    whose data-seconds is the API's finished_at − triggered_at, a labelled time axis and
    duration scale, the p50 and p95 of those durations as labelled lines, and a cross on
    each failure; each cell's and point's tooltip shows the API's status, trigger time (in
    the task's zone) and duration; clicking a failed execution's cell opens its page."""
    long = mixed_outcomes(user_service)
    pool = PoolSpec(name="reports-api", max_running=20)
    url = f"{user_service.url}/jobs/export"
    specs = [
        task("sales-export", url, schedule="0 3 * * *", concurrency="allow", pool=pool),
        task("sales-digest", url, schedule="0 4 * * *", concurrency="allow"),
    ]
    async with make_daemon(specs, pools={"reports-api": pool}) as daemon:
        for n in range(106):
            await api(daemon, "POST", f"/tasks/sales-{'digest' if n % 18 == 5 else 'export'}/run")
        newest = await settled(daemon, "sales-export", 100, long)
        few = (await settled(daemon, "sales-digest", 6, long))[::-1]
        statuses = {e["status"] for e in newest}
        assert statuses == {"SUCCESS", "FAILED", "CANCELLED"}, statuses
        page = dashboard(driver, daemon)
        await page.open("#/tasks/sales-digest")
        await page.wait(lambda d: len(d.execute_script(CELLS, "#task-strip")) == 6, "6 cells")
        six = await page.script(CELL_BOXES)
        await check_chart(page, few)
        await page.open("#/tasks/sales-export")
        oldest = newest[::-1]
        wanted = [[e["id"], e["status"], f"cell {e['status']}"] for e in oldest]
        await page.wait(
            lambda d: d.execute_script(CELLS, "#task-strip") == wanted, "the strip of 100 cells"
        )
        hundred = await page.script(CELL_BOXES)
        assert {tuple(box) for box in six} == {tuple(box) for box in hundred} == {(9, 24)}
        strip_width = await page.script(
            "return document.querySelector('#task-strip svg').width.baseVal.value"
        )
        assert strip_width == 100 * 11 - 2  # 100 cells of 9 with gaps of 2: not squeezed
        labels = await page.script(AXIS_LABELS, "#task-strip")
        assert len(labels) >= 8 and all(re.fullmatch(CLOCK, label) for label in labels), labels
        await check_chart(page, oldest)
        await page.wait_text("#task-pool", lambda t: "0 of 20 running" in t, "the pool's use")
        await page.wait_text("#task-upcoming", lambda t: t.count("\n") >= 4, "5 fire times")
        await page.call(driver.set_window_size, 1280, 1500)  # the whole page, its pool too
        try:
            shot = await page.screenshot(tmp_path / "task-page.png")
        finally:
            await page.call(driver.set_window_size, 1280, 1000)
        keep(shot, DOCS_SCREENSHOT)

        failed = next(e["id"] for e in oldest if e["status"] == "FAILED")
        await page.click(f'#task-strip a[data-eid="{failed}"]', "the failed run's cell")
        await page.wait_text("#execution-title", lambda text: failed in text, "its page")
        status = await page.wait_text(
            '#execution-details dd[data-field="status"]', lambda t: t != "", "its status"
        )
        assert status.startswith("FAILED")
        assert await page.script("return location.hash") == f"#/executions/{failed}"
        assert await page.console_errors() == []


#: Each cell's drawn size, [width, height] in CSS pixels, as the page lays it out.
CELL_BOXES = (
    "return [...document.querySelectorAll('#task-strip rect.cell')].map(r =>"
    " [Math.round(r.getBoundingClientRect().width), Math.round(r.getBoundingClientRect().height)])"
)
#: The labels of the axes under ``arguments[0]`` (or of one of them: ``.x-axis``, ``.y-axis``).
AXIS_LABELS = (
    "return [...document.querySelectorAll(arguments[0] + ' .tick text')].map(t => t.textContent)"
)
#: [eid, the tooltip's text] of each cell of the strip and each point of the chart.
TOOLTIPS = (
    "return [...document.querySelectorAll(arguments[0])].map(n =>"
    " [n.closest('[data-eid]').dataset.eid, n.querySelector('title').textContent])"
)
#: A tick label of a time axis: ``14:05``, ``14:05:09``, with its date when it changes.
CLOCK = r"(\d\d-\d\d )?\d\d:\d\d(:\d\d)?"


def tooltip(execution: dict[str, Any], zone: str = "UTC") -> str:
    """What a run's tooltip says (drawings.js, ``about``), from the API's snapshot: its id,
    status, first trigger call in the task's zone (to the second) and duration."""
    took_s = seconds(execution)
    return (
        f"{execution['id']}\n{execution['status']}"
        + (f" ({execution['reason']})" if execution["reason"] else "")
        + f" · {wall(datetime.fromisoformat(execution['triggered_at']), zone)} · "
        + ("not finished" if took_s is None else f"took {took(took_s)}")
    )


def percentile(values: list[float], share: float) -> float:
    """Nearest rank, as the page computes it."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]


async def check_chart(page: Page, oldest: list[dict[str, Any]]) -> None:
    """The task page shows ``oldest``: the chart's points are the API's durations, left to
    right; its axes are labelled; its p50 and p95 are those of the durations; each failure
    has its cross; every cell's and point's tooltip says what the API says of its run."""
    durations = [[e["id"], seconds(e)] for e in oldest if seconds(e) is not None]
    points = await page.wait(
        lambda d: (
            d.execute_script(POINTS) if len(d.execute_script(POINTS)) == len(durations) else None
        ),
        "the chart's points",
    )
    assert [eid for eid, _ in points] == [eid for eid, _ in durations]
    for (eid, shown), (_, api_seconds) in zip(points, durations, strict=True):
        assert shown == pytest.approx(api_seconds, abs=0.0005), eid
    values = [s for _, s in durations if s is not None]
    stats = await page.script(
        "const c = document.querySelector('#task-chart svg');"
        " return [Number(c.dataset.p50), Number(c.dataset.p95),"
        " [...c.querySelectorAll('.stat text')].map(t => t.textContent)]"
    )
    assert stats[:2] == pytest.approx([percentile(values, 0.5), percentile(values, 0.95)], abs=1e-9)
    assert stats[2] == [f"p50 {took(stats[0])}", f"p95 {took(stats[1])}"]
    x_labels = await page.script(AXIS_LABELS, "#task-chart .x-axis")
    y_labels = await page.script(AXIS_LABELS, "#task-chart .y-axis")
    assert len(x_labels) >= 2 and all(re.fullmatch(CLOCK, label) for label in x_labels), x_labels
    assert len(y_labels) >= 3 and y_labels[0] == "0 s", y_labels
    titles = await page.script(
        "return [...document.querySelectorAll('#task-chart .title')].map(t => t.textContent)"
    )
    assert titles == ["duration", "first trigger call (UTC)"], titles
    failures = [e for e in oldest if e["status"] in ("FAILED", "TIMED_OUT") and seconds(e)]
    assert await page.script(
        "return document.querySelectorAll('#task-chart .failed-mark').length"
    ) == len(failures)
    by_id = {e["id"]: e for e in oldest}
    for selector in ("#task-strip a[data-eid] rect", "#task-chart circle[data-eid]"):
        shown_tips = await page.script(TOOLTIPS, selector)
        assert shown_tips, selector
        for eid, text in shown_tips:
            if by_id[eid]["triggered_at"] is not None:
                assert text == tooltip(by_id[eid]), (selector, text)


def keep(shot: Path, where: Path) -> None:
    """A screenshot taken: a PNG, and with ECRON_SAVE_SCREENSHOT=1 copied to ``where``
    (docs/images, which README and docs/api.md link)."""
    assert shot.read_bytes().startswith(b"\x89PNG")
    if os.environ.get("ECRON_SAVE_SCREENSHOT") == "1":
        where.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shot, where)


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
    none of the fire times runs while paused. A 02:30 Europe/Berlin job's page names its
    zone, shows its next fire time on 28 March 2027 at 03:30 CEST and says why as a
    sentence (02:30 does not exist that day); the UTC switch shows both in UTC."""
    pool = PoolSpec(name="exports", max_running=2)
    spec = task("nightly", f"{user_service.url}/jobs/x", schedule="0 3 * * *", pool=pool)
    spring = task(
        "spring", f"{user_service.url}/jobs/x", schedule="30 2 28 3 *", timezone="Europe/Berlin"
    )
    async with make_daemon([spec, spring], pools={"exports": pool}, **CALLERS) as daemon:
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

        await page.click('#task-details a[href="#/?task=nightly"]', "its executions")
        await page.wait_text("#tasks", lambda t: "spring" in t, "the tasks")
        await page.click('#tasks a[href="#/tasks/spring"]', "the Berlin task's page")
        note = await page.wait_text(".dst-note", lambda t: t != "", "its DST note")
        assert note == "02:30 does not exist on 28 March: runs at 03:30 CEST"
        assert await page.text("#task-details dd.zone") == (
            "Europe/Berlin (every time on this page is in it)"
        )
        next_fire = '#task-details time[datetime="2027-03-28T01:30:00.000Z"]'
        assert await page.text(next_fire) == "2027-03-28 03:30:00 CEST"
        await page.click("#utc-switch", "the UTC switch")
        await page.wait_text(".dst-note", lambda t: t.endswith("01:30 UTC"), "the note in UTC")
        assert await page.text(next_fire) == "2027-03-28 01:30:00 UTC"
        assert await page.text("#zone-note") == "(every time is in UTC)"
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


#: Where the day's screenshots are copied when ECRON_SAVE_SCREENSHOT=1 (README links them).
DOCS_FRONT_PAGE = DOCS_SCREENSHOT.parent / "front-page-24-hours.png"
DOCS_FEW_RUNS = DOCS_SCREENSHOT.parent / "task-page-6-runs.png"
#: A day of runs, in order: (minutes after the day's start, task, minutes the job runs,
#: whether it fails). ``nightly-report`` runs 6 times; ``cleanup`` retries a failure.
DAY = [
    (10, "sync-users", 20, False),
    (60, "nightly-report", 42, False),
    (150, "sync-users", 35, False),
    (200, "cleanup", 4, True),  # and its retry, 5 minutes after: it succeeds
    (280, "nightly-report", 55, False),
    (330, "sync-users", 25, True),
    (460, "nightly-report", 38, True),
    (520, "sync-users", 30, False),
    (640, "nightly-report", 300, False),  # cancelled after 30 minutes
    (700, "cleanup", 3, False),
    (760, "sync-users", 45, False),
    (900, "nightly-report", 47, False),
    (1010, "sync-users", 28, False),
    (1150, "nightly-report", 61, False),
    (1240, "sync-users", 33, False),
]
#: [eid, task, x, width] of each bar of the front page's last 24 hours as drawn (its box
#: in the picture, whatever set it: an attribute or a style), and the picture's scale.
BARS = (
    "const day = document.querySelector('#day svg'); if (!day) return [[], []];"
    " return [[...day.querySelectorAll('a[data-eid] rect')].map(r =>"
    " [r.parentNode.dataset.eid, r.closest('.row').dataset.task, r.getBBox().x,"
    " r.getBBox().width]), [day.dataset.from, day.dataset.to, day.dataset.x,"
    " day.dataset.width].map(Number)]"
)


def jobs_as_planned(service: UserService, plans: list[tuple[float, bool]]) -> None:
    """Each new job the service is asked to start runs as the next of ``plans`` says (seconds
    on the test's clock, fails or not), in order."""

    async def start(request: web.Request) -> None:
        eid = request.headers.get("X-Ecron-Execution-Id", "")
        if request.method == "POST" and eid and eid not in service.jobs:
            seconds_long, fails = plans.pop(0)
            service.jobs[eid] = Job(eid, service.job_time(), seconds_long, fail=fails)

    service.behaviour = start


async def until_ended(daemon: Daemon, clock: FakeClock, eid: str, cancel_after: int = 0) -> None:
    """Move the clock 10 minutes at a time (the tasks' poll interval), each step carried
    out, until execution ``eid`` has ended; after ``cancel_after`` steps, cancel it through
    the API."""
    for steps in itertools.count(1):
        clock.advance(timedelta(minutes=10))
        await wait_for(lambda: daemon.engine.settled(clock.now()), timeout=10, interval=0.005)
        if steps == cancel_after:
            await api(daemon, "POST", f"/executions/{eid}/cancel")
        execution = await daemon.store.get_execution(eid)
        if execution is not None and execution.is_final:
            return


async def retry_of(daemon: Daemon, eid: str) -> str | None:
    """The id of the retry (attempt 2) of execution ``eid``, once it is planned."""
    first = await daemon.store.get_execution(eid)
    assert first is not None
    for status in (Status.SCHEDULED, None):  # a planned retry is listed only when asked for
        page = await daemon.store.list_executions(task=first.task, status=status, limit=10)
        for e in page.items:
            if e.attempt == 2 and e.scheduled_at == first.scheduled_at:
                return e.eid
    return None


async def test_the_front_page_draws_the_last_24_hours_one_bar_per_run_from_trigger_to_end(
    make_daemon: DaemonFactory, user_service: UserService, driver: WebDriver, tmp_path: Path
) -> None:
    """A day of real runs of three tasks (the daemon and the jobs on a clock the test moves
    through the last 24 hours): the front page's last 24 hours has one row per task and one
    bar per run, in its task's row, coloured by status, whose ends are the API's
    triggered_at and finished_at within a pixel's worth of time; the History says how long
    each took. A retried run's page lists its first attempt, a cancelled one's the cancel
    call; the 6 runs of one task fill 6 cells of the strip, over a labelled time axis."""
    start = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(hours=23)
    clock = FakeClock(start)
    user_service.on_clock(clock)
    plans = []
    for _, name, minutes, fails in DAY:
        plans.append((minutes * 60.0, fails))
        if name == "cleanup" and fails:
            plans.append((5 * 60.0, False))  # its retry
    jobs_as_planned(user_service, plans)
    url = f"{user_service.url}/jobs/day"
    specs = [
        task(name, url, poll_interval="10m", task_timeout="8h")
        for name in ("nightly-report", "sync-users")
    ]
    specs.append(
        task("cleanup", url, poll_interval="10m", retry={"max_attempts": 1, "backoff": "5m"})
    )
    async with make_daemon(specs, clock=clock, lease_ttl="1d") as daemon:
        retried = cancelled = ""
        for minutes, name, _, _ in DAY:
            clock.set(start + timedelta(minutes=minutes))
            await wait_for(lambda: daemon.engine.settled(clock.now()), timeout=10)
            eid = await run_once(daemon, name)
            await until_ended(daemon, clock, eid, cancel_after=3 if minutes == 640 else 0)
            cancelled = eid if minutes == 640 else cancelled
            if name == "cleanup" and not retried:
                retried = await wait_for(partial(retry_of, daemon, eid), timeout=10)
                await until_ended(daemon, clock, retried)
        clock.set(datetime.now(UTC))
        runs = (await api(daemon, "GET", "/executions?limit=100"))["items"]
        assert len(runs) == len(DAY) + 1
        assert {e["status"] for e in runs} == {"SUCCESS", "FAILED", "CANCELLED"}
        page = dashboard(driver, daemon)
        await page.open()
        bars, scale = await page.wait(
            lambda d: (
                d.execute_script(BARS) if len(d.execute_script(BARS)[0]) == len(runs) else None
            ),
            "a bar per run",
        )
        rows = await page.script(
            "return [...document.querySelectorAll('#day .row')].map(r => r.dataset.task)"
        )
        assert rows == ["cleanup", "nightly-report", "sync-users"]
        first, last, left, width = scale
        pixel = (last - first) / width  # milliseconds
        by_id = {e["id"]: e for e in runs}
        assert {eid for eid, *_ in bars} == set(by_id)
        for eid, row, x, long in bars:
            run = by_id[eid]
            began = datetime.fromisoformat(run["triggered_at"]).timestamp() * 1000
            ended_at = datetime.fromisoformat(run["finished_at"]).timestamp() * 1000
            assert row == run["task"]
            assert abs(first + (x - left) * pixel - began) <= pixel, (run, x)
            assert abs(first + (x + long - left) * pixel - ended_at) <= pixel, (run, x, long)
        classes = await page.script(
            "return [...document.querySelectorAll('#day rect.run')]"
            ".map(r => [r.parentNode.dataset.eid, r.getAttribute('class')])"
        )
        assert all(cls == f"run {by_id[eid]['status']}" for eid, cls in classes), classes
        took_cells = await page.script(
            "return [...document.querySelectorAll('#history tbody tr[data-key]')]"
            ".map(r => [r.dataset.key, r.querySelector('.took').textContent])"
        )
        assert len(took_cells) == len(runs)
        for eid, shown in took_cells:
            assert shown == took(seconds(by_id[eid])), (eid, shown)
        shot = await page.screenshot(tmp_path / "dashboard.png")
        keep(shot, DOCS_FRONT_PAGE)

        await page.open(f"#/executions/{retried}")
        events = await page.wait_text("#timeline", lambda t: "attempt 1" in t, "the attempts")
        assert "attempt 1 (" in events and "ended FAILED (remote_failed)" in events, events
        assert "first trigger call of attempt 2 sent" in events, events
        assert "each report, poll answer" in await page.text("#timeline-note")
        await page.open(f"#/executions/{cancelled}")
        events = await page.wait_text("#timeline", lambda t: "cancel call" in t, "the cancel")
        assert "cancel call sent: acknowledged" in events and "ended CANCELLED" in events

        nightly = [e for e in runs if e["task"] == "nightly-report"][::-1]
        assert len(nightly) == 6
        await page.open("#/tasks/nightly-report")
        await page.wait(lambda d: len(d.execute_script(CELLS, "#task-strip")) == 6, "6 cells")
        assert {tuple(box) for box in await page.script(CELL_BOXES)} == {(9, 24)}
        await check_chart(page, nightly)
        await page.call(driver.set_window_size, 1280, 1250)  # down to its next fire times
        try:
            shot = await page.screenshot(tmp_path / "task-page-6-runs.png")
        finally:
            await page.call(driver.set_window_size, 1280, 1000)
        keep(shot, DOCS_FEW_RUNS)
        assert await page.console_errors() == []
