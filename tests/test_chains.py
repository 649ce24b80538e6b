"""Chains on a live daemon (DESIGN.md, "Chains"; PROTOCOL.md, X-Ecron-Upstream-Execution-Id):
a chained task runs once per upstream end with a listed status, with the upstream's
``scheduled_at`` and the header; a fan-in waits for every upstream of a fire time; the
snapshots and ``ecron show`` name upstream and downstream."""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any

from aiohttp import web
from click.testing import CliRunner

from ecron.cli import cli, client_cmds  # noqa: F401  (registers the commands)
from ecron.daemon import Daemon
from tests.support.daemon import DaemonFactory, task
from tests.support.service import UserService, wait_for
from tests.test_daemon import api, final

UPSTREAM = "X-Ecron-Upstream-Execution-Id"


async def executions(daemon: Daemon, name: str) -> list[dict[str, Any]]:
    _, page = await api(daemon, "GET", "/api/v1/executions", params={"task": name})
    items: list[dict[str, Any]] = page["items"]
    return sorted(items, key=lambda item: item["id"])


def fail_posts_to(service: UserService, kind: str, numbers: set[int]) -> None:
    """The trigger answers FAILED to the POSTs to ``/jobs/<kind>`` whose 1-based numbers
    are in ``numbers``."""
    posts = 0

    async def behave(request: web.Request) -> web.StreamResponse | None:
        nonlocal posts
        if request.method == "POST" and request.match_info.get("kind") == kind:
            posts += 1
            if posts in numbers:
                return web.json_response({"status": "FAILED", "message": "told to fail"})
        return None

    service.behaviour = behave


async def test_a_chain_runs_once_per_upstream_success_and_on_failure_only_when_on_says_so(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """Two successful runs of ``extract`` set off two runs of ``load`` (after it on
    SUCCESS), each with the upstream's ``scheduled_at``, ``trigger_kind`` chain, ``upstream``
    and the header on every call; its failed run sets off only ``cleanup`` (on FAILED). The
    upstream's snapshot names its downstream, and ``ecron show`` prints both."""
    user_service.duration = 0.1
    fail_posts_to(user_service, "extract", {3})
    url = user_service.url
    specs = [
        task("extract", f"{url}/jobs/extract", concurrency="allow"),
        task("load", f"{url}/jobs/load", schedule={"after_task": "extract"}, concurrency="allow"),
        task(
            "cleanup", f"{url}/jobs/cleanup", schedule={"after_task": "extract", "on": ["FAILED"]}
        ),
    ]
    async with make_daemon(specs) as daemon:
        ups = []
        for _ in range(3):
            _, started = await api(daemon, "POST", "/api/v1/tasks/extract/run")
            ups.append(await final(daemon, started["id"]))
        cleanup = await wait_for(lambda: executions(daemon, "cleanup"), timeout=10)
        loads = await wait_for(lambda: _all_final(daemon, "load", 2), timeout=10)
        _, upstream = await api(daemon, "GET", f"/api/v1/executions/{ups[0]['id']}")
        shown = await asyncio.to_thread(
            CliRunner().invoke,
            cli,
            ["show", loads[0]["id"], "--api", f"http://127.0.0.1:{daemon.port}"],
        )
        shown_up = await asyncio.to_thread(
            CliRunner().invoke,
            cli,
            ["show", ups[0]["id"], "--api", f"http://127.0.0.1:{daemon.port}"],
        )
    assert [u["status"] for u in ups] == ["SUCCESS", "SUCCESS", "FAILED"]
    assert [(e["trigger_kind"], e["upstream"], e["scheduled_at"]) for e in loads] == [
        ("chain", up["id"], up["scheduled_at"]) for up in ups[:2]
    ]
    assert all(e["status"] == "SUCCESS" for e in loads)
    assert [(e["upstream"], e["scheduled_at"]) for e in cleanup] == [
        (ups[2]["id"], ups[2]["scheduled_at"])
    ]
    for chained in (*loads, *cleanup):
        calls = user_service.calls_for(chained["id"])
        assert calls and all(call.headers[UPSTREAM] == chained["upstream"] for call in calls)
        assert calls[0].headers["X-Ecron-Scheduled-At"] == chained["scheduled_at"]
        assert {call.headers["X-Ecron-Trigger-Kind"] for call in calls} == {"chain"}
    assert all(
        UPSTREAM not in call.headers for up in ups for call in user_service.calls_for(up["id"])
    )
    assert upstream["downstream"] == [loads[0]["id"]] and upstream["upstream"] is None
    assert shown.exit_code == 0 and f"upstream        {ups[0]['id']}" in shown.output
    assert shown_up.exit_code == 0 and f"downstream      {loads[0]['id']}" in shown_up.output


async def _all_final(daemon: Daemon, name: str, count: int) -> list[dict[str, Any]] | None:
    found = await executions(daemon, name)
    return found if len(found) == count and all(e["finished_at"] for e in found) else None


async def test_a_fan_in_chain_waits_for_every_upstream_of_the_same_fire_time(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """``report`` runs after ``[fast, slow]``, both every second: for each fire time it
    runs once, after the slower upstream has ended, set off by it."""
    user_service.durations = {"fast": 0.05, "slow": 0.5}
    url = user_service.url
    specs = [
        task("fast", f"{url}/jobs/fast", schedule={"every": "1s"}),
        task("slow", f"{url}/jobs/slow", schedule={"every": "1s"}),
        task("report", f"{url}/jobs/report", schedule={"after_task": ["fast", "slow"]}),
    ]
    user_service.durations["report"] = 0.05
    async with make_daemon(specs) as daemon:
        reports = await wait_for(lambda: _all_final(daemon, "report", 2), timeout=10)
        fast = {e["scheduled_at"]: e for e in await executions(daemon, "fast")}
        slow = {e["scheduled_at"]: e for e in await executions(daemon, "slow")}
    assert len({e["scheduled_at"] for e in reports}) == 2  # one per fire time
    for report in reports:
        when = report["scheduled_at"]
        assert report["upstream"] == slow[when]["id"]
        ended = max(parse(fast[when]["finished_at"]), parse(slow[when]["finished_at"]))
        assert parse(report["created_at"]) >= ended


def parse(text: str) -> datetime:
    return datetime.fromisoformat(text)
