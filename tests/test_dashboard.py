"""The dashboard at ``/``: tasks, running executions with progress bars and ETA, history;
rendered by a real headless Chromium against a real daemon."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import tempfile
from pathlib import Path

import aiohttp
import pytest

from tests.conftest import DaemonFactory, task
from tests.protocol_support import ended, reply, run_once
from tests.support.service import UserService, wait_for

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


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
        out, _ = await asyncio.wait_for(process.communicate(), timeout=60)
    return out.decode()


async def test_the_dashboard_page_is_served_without_the_api_token(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """GET / answers the HTML page even when the API wants a token (the page holds no data;
    it asks the API with the token)."""
    async with (
        make_daemon([task("a", f"{user_service.url}/jobs/x")], api_token="t0k") as daemon,
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{daemon.port}/") as response,
    ):
        page = await response.text()
        status, kind = response.status, response.content_type
    assert (status, kind) == (200, "text/html")
    assert "/api/v1" in page and "<title>ecron</title>" in page


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
    body = dom[dom.index("<body") : dom.index("<script")]
    assert re.search(r'<tr data-task="nightly">.*cron 0 3 \* \* \*', body)
    row = re.search(rf'<tr data-execution="{running}">.*?</tr>', body, re.S)
    assert row is not None, body
    assert 'class="bar"' in row.group(0) and "RUNNING" in row.group(0)
    assert re.search(r'class="eta">\d+ (s|min)<', row.group(0))
    assert f'data-action="cancel:{running}"' in row.group(0)
    history = re.search(rf'<tr data-execution="{failed}">.*?</tr>', body, re.S)
    assert history is not None and "FAILED" in history.group(0) and "disk full" in history.group(0)
    assert f'data-action="resume:{failed}"' in history.group(0)
