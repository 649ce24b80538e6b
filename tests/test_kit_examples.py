"""docs/services.md's three services (examples/kit/: FastAPI, Flask, aiohttp), each run as
its own process the way the page says, through a real daemon to SUCCESS; and the Node.js
service (examples/node/service.js), which ``ecron check-service`` passes and ecron runs."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from ecron.daemon import Daemon
from tests.support.check_service import PACE, verdicts
from tests.support.daemon import DaemonFactory, task
from tests.support.kit_processes import ROOT, ServiceProcess, free_port
from tests.support.service import JSON_BODY, wait_for

SECRET = "examples-secret"
KIT_EXAMPLES = ROOT / "examples" / "kit"

pytestmark = pytest.mark.slow


@pytest.fixture
def database_url(tmp_path: Path) -> str:
    """SQLite: the examples do not depend on the database."""
    return f"sqlite+aiosqlite:///{tmp_path / 'ecron.db'}"


def example_command(name: str, port: int) -> list[str]:
    """How docs/services.md runs each example (``python -m`` for the tools' commands)."""
    python = sys.executable
    if name == "fastapi_service.py":
        return [python, "-m", "uvicorn", "fastapi_service:app", "--app-dir", "examples/kit",
                "--host", "127.0.0.1", "--port", str(port)]  # fmt: skip
    if name == "flask_service.py":
        return [python, "-m", "flask", "--app", "examples/kit/flask_service", "run",
                "--host", "127.0.0.1", "--port", str(port)]  # fmt: skip
    return [python, "examples/kit/aiohttp_service.py"]


@asynccontextmanager
async def running(process: ServiceProcess) -> AsyncIterator[ServiceProcess]:
    await asyncio.to_thread(process.start)
    try:
        yield process
    finally:
        await asyncio.to_thread(process.stop)


async def api(daemon: Daemon, method: str, path: str) -> Any:
    url = f"http://127.0.0.1:{daemon.port}{path}"
    async with (
        aiohttp.ClientSession() as session,
        session.request(method, url, json=JSON_BODY) as reply,
    ):
        assert reply.status < 300, await reply.text()
        return await reply.json()


async def run_to_the_end(daemon: Daemon, name: str) -> dict[str, Any]:
    """Run task ``name`` now and wait until it ends; its snapshot."""
    eid = (await api(daemon, "POST", f"/api/v1/tasks/{name}/run"))["id"]

    async def ended() -> dict[str, Any] | None:
        snapshot = await api(daemon, "GET", f"/api/v1/executions/{eid}")
        return snapshot if snapshot["finished_at"] else None

    result: dict[str, Any] = await wait_for(ended, timeout=20)
    return result


def test_the_three_services_of_docs_services_md_are_the_example_files_in_20_lines() -> None:
    """Each service docs/services.md shows is, whole and as it stands, a file under
    examples/kit/ (the file the tests run), of at most 20 lines."""
    page = (ROOT / "docs" / "services.md").read_text()
    for name in ("fastapi_service.py", "flask_service.py", "aiohttp_service.py"):
        text = (KIT_EXAMPLES / name).read_text()
        assert f"```python\n{text}```" in page, f"docs/services.md does not show {name} as it is"
        assert len(text.splitlines()) <= 20, name


@pytest.mark.parametrize(
    ("name", "path", "body", "result"),
    [
        ("fastapi_service.py", "/ecron/jobs/nightly-report", {"days": 3, "seconds_a_day": 0.1},
         {"days": 3, "rows": 3702}),
        ("flask_service.py", "/ecron/jobs/sync-accounts", {"pages": 3, "seconds_a_page": 0.1},
         {"pages": 3}),
        ("aiohttp_service.py", "/jobs/crawl", None, {"pages": 3}),
    ],
)  # fmt: skip
async def test_each_example_service_runs_through_ecron_to_success(
    name: str,
    path: str,
    body: dict[str, Any] | None,
    result: dict[str, Any],
    make_daemon: DaemonFactory,
) -> None:
    """The example, started as docs/services.md says (uvicorn, ``flask run``, ``python``),
    runs a signed task of ecron's to SUCCESS with its result (the crawler fetching the
    daemon's own /healthz three times)."""
    port, api_port = free_port(), free_port()
    env = {"ECRON_SECRET": SECRET, "PORT": str(port)}
    body = body or {"urls": [f"http://127.0.0.1:{api_port}/healthz"] * 3}
    async with running(ServiceProcess(example_command(name, port), port, env)) as service:
        spec = task("example", f"{service.url}{path}", secret=SECRET, body=body)
        async with make_daemon([spec], listen=f"127.0.0.1:{api_port}") as daemon:
            snapshot = await run_to_the_end(daemon, "example")
    assert snapshot["status"] == "SUCCESS", snapshot
    assert snapshot["result"] == result


@pytest.fixture
def node() -> str:
    """Debian's ``node`` (skips without it, unless CI=true: then it fails)."""
    found = shutil.which("node") or shutil.which("nodejs")
    if found is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("node is required in CI (apt-get install nodejs)", pytrace=False)
        pytest.skip("no node: apt-get install nodejs")
    assert found is not None
    return found


async def test_the_node_service_passes_ecron_check_service_and_runs_to_success(
    node: str, make_daemon: DaemonFactory
) -> None:
    """examples/node/service.js (Node.js, its standard library only) passes every rule of
    ``ecron check-service``, signed, with its batch endpoint, and a signed task of ecron's
    runs on it to SUCCESS."""
    from click.testing import CliRunner

    from ecron.cli import cli

    port = free_port()
    command = [node, "examples/node/service.js", "--port", str(port)]
    async with running(ServiceProcess(command, port, {"ECRON_SECRET": SECRET})) as service:
        url = f"{service.url}/jobs/countdown"
        check = ["check-service", url, "--json", *PACE, "--secret", SECRET, "--batch-poll-url", url]
        check += ["--body", json.dumps({"steps": 400, "pause": 0.02})]
        checked = await asyncio.to_thread(CliRunner().invoke, cli, check)
        spec = task("node", url, secret=SECRET, body={"steps": 3, "pause": 0.1})
        async with make_daemon([spec]) as daemon:
            snapshot = await run_to_the_end(daemon, "node")
    checklist = json.loads(checked.output)
    assert checked.exit_code == 0, checklist
    assert set(verdicts(checklist).values()) == {"pass"}, checklist
    assert snapshot["status"] == "SUCCESS" and snapshot["result"] == {"steps": 3}, snapshot
