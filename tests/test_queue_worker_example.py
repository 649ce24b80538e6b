"""The queue-mode example worker (examples/queue_worker.py) against a real redis-server and
a real ecron daemon on SQLite, all on 127.0.0.1: its reports reach ecron only through the
stream."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from ecron.core import Status
from tests.protocol_support import ended, run_once
from tests.support.daemon import DaemonFactory, task
from tests.support.examples import load_example
from tests.support.redis_server import RedisServer
from tests.support.service import wait_for

queue_worker = load_example("queue_worker.py")


@pytest.fixture
def database_url(tmp_path: Path) -> str:
    """SQLite only: the example does not depend on the database."""
    return f"sqlite+aiosqlite:///{tmp_path / 'ecron.db'}"


@pytest.fixture
async def worker(redis_server: RedisServer) -> AsyncIterator[tuple[str, Any]]:
    """The example on a free port of 127.0.0.1: its URL and its state; every request's
    method is recorded on the state as ``requests``."""
    app = queue_worker.make_app(redis_server.url, default_duration=0.6, report_every=0.1)
    state = app[queue_worker.WORKER]
    state.requests = []

    @web.middleware
    async def record(request: web.Request, handler: Any) -> web.StreamResponse:
        state.requests.append(request.method)
        response: web.StreamResponse = await handler(request)
        return response

    app.middlewares.insert(0, record)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield f"http://127.0.0.1:{port}", state
    await runner.cleanup()


async def test_a_queue_task_ends_success_from_reports_sent_only_through_redis(
    make_daemon: DaemonFactory, redis_server: RedisServer, worker: tuple[str, Any]
) -> None:
    """A ``mode: queue`` task, no public_url: the worker is triggered once, pushes RUNNING
    reports and SUCCESS with XADD, and ecron shows the progress on the way and ends SUCCESS
    with the worker's result; no GET is sent."""
    url, state = worker
    spec = task("pushed", f"{url}/jobs/report", mode="queue", heartbeat_timeout="5s")
    queue = {"url": redis_server.url, "stream": "worker-reports"}
    async with make_daemon([spec], queue=queue) as daemon:
        eid = await run_once(daemon, "pushed")

        async def progressed() -> bool:
            execution = await daemon.store.get_execution(eid)
            return execution is not None and 0 < execution.progress < 100

        await wait_for(progressed, timeout=5)
        execution = await ended(daemon, eid)
        applied = daemon.metrics.registry.get_sample_value(
            "ecron_queue_messages_total", {"outcome": "applied"}
        )
    assert execution.status is Status.SUCCESS and execution.progress == 100
    assert execution.result == {"kind": "report", "seconds": 0.6}
    assert state.requests == ["POST"]
    assert [report["status"] for _, report in state.sent][-1] == "SUCCESS"
    assert applied is not None and applied >= 2


async def test_the_worker_answers_a_trigger_again_with_the_same_job_and_404_for_unknown_ids(
    worker: tuple[str, Any],
) -> None:
    """Two triggers with one eid start one job; DELETE of an unknown eid is 404 UNKNOWN;
    DELETE of a running one answers FAILED cancelled; no stream header: 400."""
    url, state = worker
    headers = {
        "X-Ecron-Execution-Id": "eid-1",
        "X-Ecron-Report-Stream": "s",
        "X-Ecron-Callback-Token": "t",
    }
    async with aiohttp.ClientSession() as session:
        answers = []
        for _ in range(2):
            async with session.post(
                f"{url}/jobs/report", json={"duration": 30}, headers=headers
            ) as r:
                answers.append((r.status, (await r.json())["status"]))
        async with session.delete(f"{url}/jobs/report/nope") as r:
            unknown = (r.status, await r.json())
        async with session.delete(f"{url}/jobs/report/eid-1") as r:
            cancelled = (r.status, await r.json())
        bare = {"X-Ecron-Execution-Id": "eid-2"}
        async with session.post(f"{url}/jobs/report", json={}, headers=bare) as r:
            refused = r.status
    assert answers == [(200, "RUNNING"), (200, "RUNNING")]
    assert len(state.jobs) == 1
    assert unknown == (404, {"status": "UNKNOWN"})
    assert cancelled[0] == 200 and cancelled[1]["message"] == "cancelled"
    assert refused == 400
