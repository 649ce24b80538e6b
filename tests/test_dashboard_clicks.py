"""The dashboard used the way people use it: a real headless Chromium (driven by Selenium
through Debian's chromedriver) clicks its buttons against a live daemon that drives a real
user service on 127.0.0.1.

Skipped on a developer machine without chromium, chromium-driver or selenium; failed in CI.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from ecron.config.model import TaskSpec
from ecron.config.rules import PoolSpec
from ecron.core import Status
from ecron.daemon import Daemon
from tests.protocol_support import ended, reply, run_once
from tests.support.browser import Page, WebDriver, browser_session, dashboard
from tests.support.daemon import DaemonFactory, task
from tests.support.service import JSON_BODY, UserService, wait_for

#: Where the screenshot is copied when ECRON_SAVE_SCREENSHOT=1 (README links it).
DOCS_SCREENSHOT = Path(__file__).resolve().parent.parent / "docs" / "images" / "dashboard.png"

HOSTILE = '<img src=x onerror="window.ecronXss=1"><script>window.ecronXss=2</script>'


@pytest.fixture
def database_url(tmp_path: Path) -> str:
    """The dashboard does not depend on the database: SQLite here."""
    return f"sqlite+aiosqlite:///{tmp_path / 'ecron.db'}"


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebDriver]:
    """One headless Chromium for the tests of this file."""
    yield from browser_session(tmp_path_factory)


async def post(daemon: Daemon, path: str, body: object = JSON_BODY) -> dict[str, object]:
    """POST ``/api/v1{path}`` without a token; the JSON answer (2xx expected)."""
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"http://127.0.0.1:{daemon.port}/api/v1{path}", json=body) as response,
    ):
        assert response.status < 300, await response.text()
        answer: dict[str, object] = await response.json()
        return answer


async def test_a_running_execution_shows_its_progress_advancing_and_its_eta_and_cancel_ends_it(
    make_daemon: DaemonFactory, user_service: UserService, driver: WebDriver, tmp_path: Path
) -> None:
    """The running list shows the job's progress bar (aria-valuenow) going up between two
    looks and the API's ETA as time left; pressing cancel (and confirming) sends the cancel
    call, and the execution shows CANCELLED in the history."""
    user_service.durations["sync"] = 12.0
    user_service.script["POST"] = [reply(200, {"status": "FAILED", "message": "disk full"})]
    specs = [
        task("nightly-report", f"{user_service.url}/jobs/report", schedule="0 3 * * *"),
        task("sync-users", f"{user_service.url}/jobs/sync", schedule={"every": "10m"}),
    ]
    async with make_daemon(specs) as daemon:
        await ended(daemon, await run_once(daemon, "nightly-report"))
        eid = await run_once(daemon, "sync-users")
        page = dashboard(driver, daemon)
        await page.open()
        progress = f'#running tr[data-key="{eid}"] [role="progressbar"]'
        await page.wait(
            lambda d: (
                float(d.find_element("css selector", progress).get_attribute("aria-valuenow")) > 0
            ),
            "the progress bar leaves 0",
        )
        first = await page.number(progress, "aria-valuenow")
        await page.wait(
            lambda d: (
                float(d.find_element("css selector", progress).get_attribute("aria-valuenow"))
                > first
            ),
            f"the progress bar goes past {first}",
        )
        eta = await page.wait_text(
            f'#running tr[data-key="{eid}"] .eta',
            lambda text: re.fullmatch(r"about \d+ (s|min) left", text) is not None,
            "an ETA as time left",
        )
        assert await page.text(f'#running tr[data-key="{eid}"] .message') != "–", eta
        shot = await page.screenshot(tmp_path / "dashboard.png")
        if os.environ.get("ECRON_SAVE_SCREENSHOT") == "1":
            DOCS_SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(shot, DOCS_SCREENSHOT)
        assert shot.read_bytes().startswith(b"\x89PNG")
        for part in ("fill", "empty"):  # the percentage reads on the bar's both parts
            assert await contrast(page, eid, part) >= 4.5, part
        await page.call(driver.set_window_size, 900, 1000)  # a narrow window wraps first
        assert await broken_over_lines(page, ".id, time, .eta") == []

        await page.click(f'#running button[data-action="cancel"][data-target="{eid}"]')
        assert eid in await page.accept_confirm()
        await page.wait_text("#notice", lambda text: text == f"{eid} is CANCELLED", "the notice")
        await page.wait_text(
            f'#history tr[data-key="{eid}"] .status', lambda text: text == "CANCELLED", "history"
        )
        await page.wait_text("#running tbody", lambda text: eid not in text, "out of running")
        stored = await daemon.store.get_execution(eid)
        assert stored is not None and stored.status is Status.CANCELLED
        assert user_service.methods_for(eid)[-1] == "DELETE"
        assert await page.console_errors() == []


#: Reads the colours of a progress bar's percentage and of what is under it (the fill or
#: the empty bar) as ``[r, g, b]`` lists.
_COLOURS = """
const bar = document.querySelector(arguments[0]);
const rgb = text => text.match(/[\\d.]+/g).slice(0, 3).map(Number);
const under = arguments[1] === "fill" ? bar.querySelector(".fill") : bar;
return [rgb(getComputedStyle(bar.querySelector(".pct")).color),
        rgb(getComputedStyle(under).backgroundColor)];
"""


def luminance(rgb: list[float]) -> float:
    """WCAG 2's relative luminance of an sRGB colour."""
    linear = [c / 255 / 12.92 if c <= 10.31 else ((c / 255 + 0.055) / 1.055) ** 2.4 for c in rgb]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


async def contrast(page: Page, eid: str, part: str) -> float:
    """WCAG 2's contrast ratio of execution ``eid``'s percentage over its bar's ``part``."""
    text, ground = await page.script(_COLOURS, f'#running tr[data-key="{eid}"] .bar', part)
    light, dark = sorted((luminance(text), luminance(ground)), reverse=True)
    return (light + 0.05) / (dark + 0.05)


async def broken_over_lines(page: Page, css: str) -> list[str]:
    """The texts of the elements matching ``css`` that the page lays out over more than one
    line (an inline element broken over lines has a box per line)."""
    found: list[str] = await page.script(
        "return [...document.querySelectorAll(arguments[0])]"
        ".filter(e => e.offsetParent !== null && e.getClientRects().length > 1)"
        ".map(e => e.textContent);",
        css,
    )
    return found


async def test_run_now_starts_an_execution_that_appears_in_the_running_list_and_the_history(
    make_daemon: DaemonFactory, user_service: UserService, driver: WebDriver
) -> None:
    """Pressing "run now" on a task answers with the new execution's id, which then has a
    row in the running list and in the history, and a link to its own page."""
    user_service.durations["report"] = 6.0
    async with make_daemon([task("report", f"{user_service.url}/jobs/report")]) as daemon:
        page = dashboard(driver, daemon)
        await page.open()
        await page.click('#tasks tr[data-key="report"] button[data-action="run"]')
        notice = await page.wait_text(
            "#notice", lambda text: text.startswith("report: started "), "the run's notice"
        )
        eid = notice.removeprefix("report: started ")
        stored = await daemon.store.get_execution(eid)
        assert stored is not None and stored.task == "report", notice
        assert str(stored.trigger_kind) == "manual"
        await page.element(f'#running tr[data-key="{eid}"]', "the running row")
        status = await page.wait_text(
            f'#history tr[data-key="{eid}"] .status',
            lambda text: text in {"PENDING", "RUNNING"},
            "the history row",
        )
        assert status in {"PENDING", "RUNNING"}
        link = f'#running tr[data-key="{eid}"] a[href="#/executions/{eid}"]'
        await page.click(link, "the link to the execution's page")
        await page.wait_text("#execution-title", lambda text: eid in text, "its page")


async def test_pause_and_unpause_send_the_token_typed_into_the_page_and_a_401_says_so(
    make_daemon: DaemonFactory, user_service: UserService, driver: WebDriver
) -> None:
    """With an API token configured, the page says clearly that it wants one (where it said
    "loading…" too) and shows no tasks or buttons; once the token is typed and saved, it
    says whom it acts as, and pause and unpause work; once the token is forgotten, the 401
    shows again and the buttons go."""
    spec = task("nightly", f"{user_service.url}/jobs/x", schedule="0 3 * * *")
    async with make_daemon([spec], api_token="s3cret-t0ken-0123456789") as daemon:
        page = dashboard(driver, daemon)
        await page.open()
        problem = await page.wait_text("#problem", lambda text: "401" in text, "the 401")
        assert "wants an API token" in problem and "API token" in problem
        assert await page.text("#summary") == f"not loaded: {problem}"  # not "loading…"
        assert await page.script("return document.getElementById('home').hidden") is True
        await page.type("#token", "s3cret-t0ken-0123456789")
        await page.click('#token-form button[type="submit"]')
        await page.wait_text("#caller", lambda text: text == "as admin (admin)", "the caller")
        await page.click('#tasks tr[data-key="nightly"] button[data-action="pause"]')
        await page.wait_text(
            '#tasks tr[data-key="nightly"] td:nth-child(4)',
            lambda text: text.startswith("paused"),
            "the task shown paused",
        )
        assert await page.text("#problem") == ""
        paused = await daemon.store.get_task("nightly")
        assert paused is not None and paused.paused

        await page.click("#forget-token")
        problem = await page.wait_text("#problem", lambda text: "401" in text, "the 401 again")
        assert problem.startswith("401 Unauthorized: this ecron wants an API token")
        assert await page.text("#caller") == ""
        assert not await page.script("return !!document.querySelector('#tasks').offsetParent")

        await page.type("#token", "s3cret-t0ken-0123456789")
        await page.click('#token-form button[type="submit"]')
        await page.click('#tasks tr[data-key="nightly"] button[data-action="unpause"]')
        await page.wait_text(
            '#tasks tr[data-key="nightly"] td:nth-child(4)',
            lambda text: text == "active",
            "the task shown active",
        )
        unpaused = await daemon.store.get_task("nightly")
        assert unpaused is not None and not unpaused.paused


async def test_messages_and_reasons_that_hold_html_are_shown_as_text_and_never_run(
    make_daemon: DaemonFactory, user_service: UserService, driver: WebDriver
) -> None:
    """A user service's message, a result and a pause reason holding <script> and <img
    onerror> show as those characters, in the history and on the execution's page: no
    element is made from them and no script of theirs runs."""
    user_service.script["POST"] = [
        reply(200, {"status": "FAILED", "message": HOSTILE}),
        reply(200, {"status": "SUCCESS", "result": {"html": HOSTILE}}),
    ]
    async with make_daemon([task("evil", f"{user_service.url}/jobs/x")]) as daemon:
        eid = await run_once(daemon, "evil")
        await ended(daemon, eid)
        succeeded = await run_once(daemon, "evil")
        await ended(daemon, succeeded)
        await post(daemon, "/tasks/evil/pause", {"reason": f"because {HOSTILE}"})
        page = dashboard(driver, daemon)
        await page.open()
        shown = await page.wait_text(
            f'#history tr[data-key="{eid}"] .message', lambda text: text != "", "the message"
        )
        assert shown == HOSTILE
        reason = await page.text('#tasks tr[data-key="evil"] .paused-reason')
        assert reason == f"because {HOSTILE}"
        assert await page.console_errors() == []  # nor refused by the CSP: never tried
        await page.open(f"#/executions/{eid}")
        detail = await page.wait_text(
            '#execution-details dd[data-field="message"]', lambda text: text != "", "its page"
        )
        assert detail == HOSTILE
        await page.open(f"#/executions/{succeeded}")
        result = await page.wait_text("#result", lambda text: "html" in text, "the result")
        assert result == json.dumps({"html": HOSTILE}, indent=2)
        made = await page.script(
            "return [document.querySelectorAll('img').length,"
            " document.querySelectorAll('body script').length, window.ecronXss === undefined]"
        )
        assert made == [0, 0, True]
        assert await page.console_errors() == []


async def test_the_execution_page_shows_steps_the_resume_chain_and_a_timeline(
    make_daemon: DaemonFactory, user_service: UserService, driver: WebDriver
) -> None:
    """A resumed multi-step execution's page lists its steps (the one kept from the old
    execution under the old remote id), the resume chain with a link back to the failed
    execution, no upstream, and a timeline of its times in order."""

    async def as_usual(_request: web.Request) -> None:
        return None

    user_service.duration = 0.3
    user_service.script["POST"] = [as_usual, reply(200, {"status": "FAILED", "message": "no"})]
    steps = [
        {"name": "extract", "url": f"{user_service.url}/jobs/extract"},
        {"name": "load", "url": f"{user_service.url}/jobs/load"},
    ]
    spec = TaskSpec.model_validate(
        {"name": "etl", "schedule": "manual", "poll_interval": "100ms", "steps": steps}
    )
    async with make_daemon([spec]) as daemon:
        first = await run_once(daemon, "etl")
        assert (await ended(daemon, first)).status is Status.FAILED
        second = str((await post(daemon, f"/executions/{first}/resume"))["id"])
        assert (await ended(daemon, second)).status is Status.SUCCESS
        page = dashboard(driver, daemon)
        await page.open(f"#/executions/{second}")
        await page.wait_text(
            '#execution-details dd[data-field="status"]', lambda t: t == "SUCCESS", "status"
        )
        assert await page.number("#execution-details [role=progressbar]", "aria-valuenow") == 100
        kept = await page.text('#steps tr[data-key="1"]')
        assert "extract" in kept and "SUCCESS" in kept and f"{first}.1" in kept
        assert f"{second}.2" in await page.text('#steps tr[data-key="2"]')
        assert "(this one)" in await page.text(f'#chain li[data-execution="{second}"]')
        assert "FAILED" in await page.text(f'#chain li[data-execution="{first}"]')
        assert (await page.text("#upstream")).startswith("none")
        events = (await page.text("#timeline")).splitlines()
        wanted = ["recorded", "step 2 (load) started", "step 2 (load) ended SUCCESS"]
        found = [next(i for i, line in enumerate(events) if want in line) for want in wanted]
        assert found == sorted(found), events
        assert " ended SUCCESS" in events[-1], events

        await page.click(f'#chain a[href="#/executions/{first}"]', "the link to the failed one")
        await page.wait_text(
            '#execution-details dd[data-field="status"]', lambda t: t.startswith("FAILED"), "old"
        )
        assert await page.text("#execution-actions") == ""  # resumed already: no resume button
        assert await page.console_errors() == []


async def test_a_chained_execution_links_to_its_upstream_which_links_back_to_it(
    make_daemon: DaemonFactory, user_service: UserService, driver: WebDriver
) -> None:
    """A chained execution's page says which execution set it off, with a link; that one's
    page lists it as downstream, with a link back."""
    user_service.duration = 0.0
    url = f"{user_service.url}/jobs/x"
    specs = [task("extract", url), task("load", url, schedule={"after_task": "extract"})]
    async with make_daemon(specs) as daemon:
        upstream = await run_once(daemon, "extract")
        await ended(daemon, upstream)

        async def chained() -> str | None:
            page = await daemon.store.list_executions(task="load")
            return page.items[0].eid if page.items and page.items[0].is_final else None

        downstream = await wait_for(chained, timeout=10)
        page = dashboard(driver, daemon)
        await page.open(f"#/executions/{downstream}")
        await page.wait_text("#upstream", lambda t: t.startswith("set off by"), "the upstream")
        assert upstream in await page.text("#upstream")
        assert (await page.text("#downstream")).startswith("none")
        await page.click(f'#upstream a[href="#/executions/{upstream}"]', "the upstream's link")
        await page.wait_text("#downstream", lambda t: downstream in t, "its downstream")
        assert (await page.text("#upstream")).startswith("none")
        await page.click(f'#downstream a[href="#/executions/{downstream}"]', "the link back")
        await page.wait_text("#upstream", lambda t: upstream in t, "back on the chained one")
        assert await page.console_errors() == []


async def test_the_history_filters_by_task_and_status_and_pages_through_next(
    make_daemon: DaemonFactory, user_service: UserService, driver: WebDriver
) -> None:
    """The task and status filters and the page size map to the API's query: a task's 12
    executions come 10 then 2 through "Older" and back through "Newer"; task and status
    together leave the one failed execution of the other task."""
    user_service.duration = 0.0
    specs = [
        task("a", f"{user_service.url}/jobs/a", concurrency="allow"),
        task("b", f"{user_service.url}/jobs/b"),
    ]
    async with make_daemon(specs) as daemon:
        many = [await run_once(daemon, "a") for _ in range(12)]
        user_service.script["POST"] = [reply(200, {"status": "FAILED", "message": "broke"})]
        failed = await run_once(daemon, "b")
        for eid in [*many, failed]:
            await ended(daemon, eid)
        page = dashboard(driver, daemon)
        await page.open()
        await page.element(f'#history tr[data-key="{failed}"]', "b's failure in the history")
        newest = many[::-1]
        await page.choose("#filter-task", "a")
        await page.wait_rows("#history", newest, "a's 12 executions")
        await page.choose("#filter-limit", "10")
        await page.wait_rows("#history", newest[:10], "a's newest 10")
        assert await page.text("#page-number") == "page 1"
        await page.click("#page-older")
        await page.wait_rows("#history", newest[10:], "a's oldest 2")
        assert await page.text("#page-number") == "page 2"
        await page.click("#page-newer")
        await page.wait_rows("#history", newest[:10], "back to a's newest 10")
        await page.choose("#filter-task", "b")
        await page.choose("#filter-status", "FAILED")
        await page.wait_rows("#history", [failed], "b's one failure")
        hash_ = await page.script("return location.hash")
        assert hash_ == "#/?task=b&status=FAILED&limit=10", hash_


async def test_the_pools_section_shows_each_pools_use_and_is_hidden_without_pools(
    make_daemon: DaemonFactory, user_service: UserService, driver: WebDriver
) -> None:
    """Three hour-long runs in a pool of 2: the home page's pools section shows 2 of 2
    running (a meter), 1 waiting and the pool's tasks; a daemon without pools hides it."""
    user_service.duration = 3600
    pool = PoolSpec(name="exports", max_running=2)
    spec = task("export", f"{user_service.url}/jobs/x", pool=pool, concurrency="allow")
    async with make_daemon([spec], pools={"exports": pool}) as daemon:
        for _ in range(3):
            await run_once(daemon, "export")
        page = dashboard(driver, daemon)
        await page.open()
        running = await page.wait_text(
            '#pools tr[data-key="exports"] td:nth-child(2)',
            lambda text: text.strip() == "2/2",
            "the pool's running count",
        )
        row = await page.element('#pools tr[data-key="exports"]', "the pool's row")
        cells = [cell.text for cell in row.find_elements("css selector", "td")]
        meter = row.find_element("css selector", "meter")
    assert running.strip() == "2/2"
    assert cells[2] == "1" and cells[5] == "export"
    assert meter.get_attribute("value") == "2" and meter.get_attribute("max") == "2"
    async with make_daemon([task("plain", f"{user_service.url}/jobs/y")]) as daemon:
        page = dashboard(driver, daemon)
        await page.open()
        await page.element('#tasks tr[data-key="plain"]', "the task's row")
        hidden = driver.find_element("css selector", "#pools-section").get_attribute("hidden")
    assert hidden is not None


async def test_a_stalled_execution_is_marked_in_the_running_list_and_on_its_page(
    make_daemon: DaemonFactory, user_service: UserService, driver: WebDriver
) -> None:
    """A job whose polls say 10 % forever, of a task with `expect: {progress_within: 1s}`:
    once its progress has stood still for a second, the running list and the execution's
    page show the `stalled` badge, as its snapshot says `"stalled": true`; a job whose
    progress moves beside it shows none."""

    async def frozen(request: web.Request) -> web.StreamResponse | None:
        if request.method == "GET" and "/jobs/frozen/" in request.path:
            return web.json_response({"status": "RUNNING", "progress": 10, "message": "10%"})
        return None

    user_service.behaviour = frozen
    user_service.durations["moving"] = 600.0
    expect = {"progress_within": "1s"}
    specs = [
        task("frozen", f"{user_service.url}/jobs/frozen", expect=expect),
        task("moving", f"{user_service.url}/jobs/moving", expect={"progress_within": "1h"}),
    ]
    async with make_daemon(specs) as daemon:
        stuck = await run_once(daemon, "frozen")
        alive = await run_once(daemon, "moving")
        page = dashboard(driver, daemon)
        await page.open()
        badge = f'#running tr[data-key="{stuck}"] .stalled'
        await page.wait_text(badge, lambda text: text == "stalled", "the stalled badge")
        shown = await daemon.store.get_execution(stuck)
        assert shown is not None and shown.progress == 10
        assert not driver.find_elements("css selector", f'#running tr[data-key="{alive}"] .stalled')
        await page.open(f"#/executions/{stuck}")
        await page.wait_text("#execution .stalled", lambda text: text == "stalled", "its page")
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"http://127.0.0.1:{daemon.port}/api/v1/executions/{stuck}") as answer,
        ):
            snapshot = await answer.json()
    assert snapshot["stalled"] is True and snapshot["status"] == "RUNNING"


async def test_a_page_of_nothing_says_its_404_where_it_said_loading(
    make_daemon: DaemonFactory, user_service: UserService, driver: WebDriver
) -> None:
    """A link to a task or an execution that is not there (renamed, purged, mistyped): the
    page says the API's 404 where it said "loading…" and in its problem line, rather than
    keep "loading…" as if an answer were still coming."""
    spec = task("nightly", f"{user_service.url}/jobs/x", schedule="0 3 * * *")
    async with make_daemon([spec]) as daemon:
        page = dashboard(driver, daemon)
        for fragment, missing in (
            ("#/tasks/no-such-task", "no-such-task"),
            ("#/executions/0123abcd", "0123abcd"),
        ):
            await page.open(fragment)
            problem = await page.wait_text("#problem", lambda text: "404" in text, "the 404")
            assert missing in problem, problem
            assert await page.text("#summary") == f"not loaded: {problem}"
