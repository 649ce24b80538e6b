"""The dashboard at ``/``: its files and their headers, and its tasks, running executions
with progress bars and ETA, and history as a real headless Chromium renders them against a
real daemon (tests/test_dashboard_clicks.py clicks it)."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import tempfile
from pathlib import Path

import aiohttp
import pytest

from tests.protocol_support import ended, reply, run_once
from tests.support.daemon import DaemonFactory, task
from tests.support.processes import finished
from tests.support.service import UserService, wait_for

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
SCRIPTS = (
    "dashboard.js",
    "view.js",
    "home.js",
    "execution.js",
    "audit.js",
    "task.js",
    "drawings.js",
)
FILES = ("dashboard.css", *SCRIPTS)


@pytest.fixture
def database_url(tmp_path: Path) -> str:
    """The dashboard does not depend on the database: SQLite here."""
    return f"sqlite+aiosqlite:///{tmp_path / 'ecron.db'}"


async def rendered(url: str) -> str:
    """The page's DOM after its script ran (headless Chromium, a few seconds of page time)."""
    assert CHROMIUM is not None
    with tempfile.TemporaryDirectory() as profile:
        process = await asyncio.create_subprocess_exec(
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={profile}",
            "--virtual-time-budget=3000",
            "--dump-dom",
            url,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
        )
        out, _ = await finished(process, timeout=60)
    return out.decode()


async def test_the_dashboard_page_and_its_files_are_served_without_the_api_token_under_a_strict_csp(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """GET / and the page's files under /static/ answer even when the API wants a token
    (they hold no data; the script asks the API with the token), each under a CSP that
    allows scripts and styles from these files only: no inline script, style or handler.
    Another name under /static/ is 404; the API itself still wants the token."""
    answers: dict[str, tuple[int, str, str, str]] = {}
    others: dict[str, int] = {}
    async with (
        make_daemon(
            [task("a", f"{user_service.url}/jobs/x")], api_token="t0k-0123456789abcdef"
        ) as daemon,
        aiohttp.ClientSession() as session,
    ):
        for path in ("/", *(f"/static/{name}" for name in FILES)):
            async with session.get(f"http://127.0.0.1:{daemon.port}{path}") as response:
                csp = response.headers["Content-Security-Policy"]
                answers[path] = (response.status, response.content_type, csp, await response.text())
        for path in ("/static/nope.js", "/api/v1/tasks"):
            async with session.get(f"http://127.0.0.1:{daemon.port}{path}") as response:
                others[path] = response.status
    assert others == {"/static/nope.js": 404, "/api/v1/tasks": 401}
    assert {path: answer[:2] for path, answer in answers.items()} == {
        "/": (200, "text/html"),
        "/static/dashboard.css": (200, "text/css"),
        **{f"/static/{name}": (200, "text/javascript") for name in SCRIPTS},
    }
    page = answers["/"][3]
    assert '<script type="module" src="/static/dashboard.js"></script>' in page
    assert '<link rel="stylesheet" href="/static/dashboard.css">' in page
    assert '"/api/v1"' in answers["/static/view.js"][3]
    for name in SCRIPTS:  # every element is made from text (view.js)
        assert ".innerHTML" not in answers[f"/static/{name}"][3]
    for _status, _kind, csp, _body in answers.values():
        rules = dict(rule.strip().partition(" ")[::2] for rule in csp.split(";"))
        assert rules["default-src"] == "'none'" and rules["script-src"] == "'self'", csp
        assert rules["style-src"] == "'self'" and "unsafe" not in csp, csp


@pytest.mark.skipif(
    CHROMIUM is None and os.environ.get("CI") != "true",
    reason="chromium (Debian package) is not installed",
)
async def test_a_browser_shows_tasks_running_executions_with_progress_and_eta_and_history(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """In headless Chromium the page lists the task, the running execution with its progress
    bar, ETA and a cancel button, and a failed execution in the history with a resume
    button."""
    assert CHROMIUM is not None, "CI must have chromium (apt-get install chromium)"
    user_service.duration = 60
    user_service.script["POST"] = [reply(200, {"status": "FAILED", "message": "disk full"})]
    spec = task("nightly", f"{user_service.url}/jobs/x", schedule="0 3 * * *", concurrency="allow")
    async with make_daemon([spec]) as daemon:
        failed = await run_once(daemon, "nightly")
        await ended(daemon, failed)
        running = await run_once(daemon, "nightly")

        async def moving() -> bool:
            execution = await daemon.store.get_execution(running)
            return execution is not None and 0 < execution.progress < 100

        await wait_for(moving, timeout=10)
        dom = await rendered(f"http://127.0.0.1:{daemon.port}/")
    body = dom[dom.index("<body") :]
    assert re.search(r'<tr data-key="nightly">.*cron 0 3 \* \* \*', body)
    row = re.search(rf'<tr data-key="{running}">.*?</tr>', body, re.S)
    assert row is not None, body
    assert 'role="progressbar"' in row.group(0) and "RUNNING" in row.group(0)
    assert re.search(r'class="eta">about \d+ (s|min) left<', row.group(0)), row.group(0)
    assert f'data-action="cancel" data-target="{running}"' in row.group(0)
    history = re.search(rf'<tr data-key="{failed}">.*?</tr>', body, re.S)
    assert history is not None and "FAILED" in history.group(0) and "disk full" in history.group(0)
    assert f'data-action="resume" data-target="{failed}"' in history.group(0)
