"""The callback-mode example service (examples/callback_service.py) against a real ecron daemon,
both on 127.0.0.1 in this process, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from ecron.config.model import TaskSpec
from ecron.daemon import Daemon
from tests.support.daemon import DaemonFactory, task
from tests.support.examples import load_example
from tests.support.service import JSON_BODY, wait_for

SECRET = "callback-example-secret"


callback_service = load_example("callback_service.py")


@dataclass
class Served:
    """A running callback service: its URL, its application, and every request it received."""

    url: str
    app: web.Application
    #: (method, eid) of every request, in order; the eid from the path or the header.
    requests: list[tuple[str, str]] = field(default_factory=list)

    def methods_for(self, eid: str) -> list[str]:
        """The methods of the requests about ``eid``, in order."""
        return [method for method, about in self.requests if about == eid]

    def job(self, eid: str, kind: str = "report") -> Any:
        """The service's job for ``eid`` (None while it has none)."""
        return self.app[callback_service.SERVICE].jobs.get((kind, eid))

    def accepted(self, eid: str) -> int:
        """How many of the callbacks about ``eid`` ecron answered 200."""
        job = self.job(eid)
        return 0 if job is None else int(job.answers.count(200))


StartService = Callable[..., Awaitable[Served]]


@pytest.fixture
async def start_service() -> AsyncIterator[StartService]:
    """``await start_service(**make_app_arguments)``: the example on a free port of 127.0.0.1,
    recording every request; all of them are stopped at the end of the test."""
    runners: list[web.AppRunner] = []

    async def start(**arguments: Any) -> Served:
        app = callback_service.make_app(**arguments)
        served = Served("", app)

        @web.middleware
        async def record(request: web.Request, handler: Any) -> web.StreamResponse:
            header = request.headers.get("X-Ecron-Execution-Id")
            eid = request.match_info.get("eid") or header or ""
            served.requests.append((request.method, eid))
            response: web.StreamResponse = await handler(request)
            return response

        app.middlewares.insert(0, record)
        runner = web.AppRunner(app)
        await runner.setup()
        runners.append(runner)
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        served.url = f"http://127.0.0.1:{port}"
        return served

    yield start
    for runner in runners:
        await runner.cleanup()


def free_port() -> int:
    """A port of 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def public_daemon(
    make_daemon: DaemonFactory, specs: list[TaskSpec]
) -> AbstractAsyncContextManager[Daemon]:
    """A daemon whose ``public_url`` is its own API, so that callbacks can reach it."""
    port = free_port()
    return make_daemon(specs, listen=f"127.0.0.1:{port}", public_url=f"http://127.0.0.1:{port}")


async def api(daemon: Daemon, method: str, path: str) -> tuple[int, Any]:
    """Call the daemon's API; the status and the JSON answer."""
    async with (
        aiohttp.ClientSession() as session,
        session.request(
            method, f"http://127.0.0.1:{daemon.port}{path}", json=JSON_BODY
        ) as response,
    ):
        return response.status, await response.json()


async def final(daemon: Daemon, eid: str, timeout: float = 10.0) -> dict[str, Any]:
    """Wait until execution ``eid`` is final; its snapshot."""

    async def done() -> dict[str, Any] | None:
        _, snapshot = await api(daemon, "GET", f"/api/v1/executions/{eid}")
        return snapshot if snapshot["finished_at"] else None

    result: dict[str, Any] = await wait_for(done, timeout=timeout)
    return result


async def test_a_callback_task_ends_success_from_pushed_reports_and_is_never_polled(
    make_daemon: DaemonFactory, start_service: StartService
) -> None:
    """A ``mode: callback`` task is triggered once; the service pushes RUNNING reports and then
    SUCCESS to the callback URL, each accepted with 200, and ecron never sends a GET."""
    service = await start_service(default_duration=1.0, report_every=0.2)
    spec = task("pushed", f"{service.url}/jobs/report", mode="callback", heartbeat_timeout="5s")
    async with public_daemon(make_daemon, [spec]) as daemon:
        status, started = await api(daemon, "POST", "/api/v1/tasks/pushed/run")
        assert status == 202
        eid = started["id"]
        snapshot = await final(daemon, eid)
        job = service.job(eid)
        await wait_for(lambda: job.runner.done(), timeout=5)
    assert snapshot["status"] == "SUCCESS"
    assert snapshot["progress"] == 100
    assert snapshot["result"] == {"kind": "report", "seconds": 1.0}
    assert service.methods_for(eid) == ["POST"]  # one trigger; no GET, no DELETE
    assert job.answers.count(200) >= 2
    assert job.answers[-1] == 200  # the SUCCESS itself


async def test_a_persons_cancel_sends_one_delete_and_the_service_stops_pushing(
    make_daemon: DaemonFactory, start_service: StartService
) -> None:
    """POST /api/v1/executions/{eid}/cancel ends a callback execution CANCELLED after exactly
    one DELETE; the service's job is stopped by then, so it pushes nothing more."""
    service = await start_service(default_duration=30.0, report_every=0.1)
    spec = task("stoppable", f"{service.url}/jobs/report", mode="callback")
    async with public_daemon(make_daemon, [spec]) as daemon:
        _, started = await api(daemon, "POST", "/api/v1/tasks/stoppable/run")
        eid = started["id"]
        await wait_for(lambda: service.accepted(eid) >= 2, timeout=5)
        status, cancelled = await api(daemon, "POST", f"/api/v1/executions/{eid}/cancel")
        job = service.job(eid)
    assert status == 200
    assert cancelled["status"] == "CANCELLED"
    assert cancelled["cancel_acknowledged"] is True
    assert service.methods_for(eid) == ["POST", "DELETE"]
    assert job.runner.done()
    assert job.report()["status"] == "FAILED" and job.report()["message"] == "cancelled"


async def test_silence_past_the_heartbeat_fails_the_execution_and_a_late_report_gets_409(
    make_daemon: DaemonFactory, start_service: StartService
) -> None:
    """With no report within ``heartbeat_timeout`` a callback execution ends FAILED
    unreachable without a poll; the service's next report is answered 409 and its job stops."""
    service = await start_service(default_duration=30.0, report_every=1.5)
    spec = task("quiet", f"{service.url}/jobs/report", mode="callback", heartbeat_timeout="300ms")
    async with public_daemon(make_daemon, [spec]) as daemon:
        _, started = await api(daemon, "POST", "/api/v1/tasks/quiet/run")
        eid = started["id"]
        snapshot = await final(daemon, eid, timeout=5)
        job = service.job(eid)
        await wait_for(lambda: job.runner.done(), timeout=5)
        _, after = await api(daemon, "GET", f"/api/v1/executions/{eid}")
    assert snapshot["status"] == "FAILED" and snapshot["reason"] == "unreachable"
    assert job.answers == [409]
    assert job.report()["status"] == "FAILED"
    assert after == snapshot  # the late report changed nothing
    assert service.methods_for(eid) == ["POST"]


async def test_signed_calls_pass_the_services_check_and_a_wrong_secret_is_rejected(
    make_daemon: DaemonFactory, start_service: StartService
) -> None:
    """The service checks X-Ecron-Signature with ecron.signing.verify: a task signing with the
    same secret runs to SUCCESS; one with another secret gets 401, which is FAILED rejected."""
    service = await start_service(secret=SECRET, default_duration=0.3, report_every=0.1)
    url = f"{service.url}/jobs/report?region=eu"
    signed = task("signed", url, mode="callback", secret=SECRET)
    forged = task("forged", url, mode="callback", secret="not-the-secret")
    async with public_daemon(make_daemon, [signed, forged]) as daemon:
        _, good = await api(daemon, "POST", "/api/v1/tasks/signed/run")
        _, bad = await api(daemon, "POST", "/api/v1/tasks/forged/run")
        good, bad = await final(daemon, good["id"]), await final(daemon, bad["id"])
    assert good["status"] == "SUCCESS"
    assert bad["status"] == "FAILED" and bad["reason"] == "rejected"
    assert "401" in bad["message"]


async def test_the_service_retries_a_callback_after_a_5xx_and_stops_at_a_409(
    start_service: StartService,
) -> None:
    """Against a stand-in for ecron that answers 503, 503, 200, then 409: the report is sent
    again with backoff after each 503, with the bearer token each time, and after the 409 the
    job pushes nothing more and stops."""
    answers = iter([503, 503, 200])
    seen: list[str] = []

    async def report(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Authorization", ""))
        status = next(answers, 409)
        return web.json_response({"status": "RUNNING"}, status=status)

    ecron = web.Application()
    ecron.router.add_post("/api/v1/executions/{eid}/report", report)
    runner = web.AppRunner(ecron)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        service = await start_service(default_duration=30.0, report_every=0.1)
        headers = {
            "X-Ecron-Execution-Id": "eid-retried",
            "X-Ecron-Callback-Url": f"http://127.0.0.1:{port}/api/v1/executions/eid-retried/report",
            "X-Ecron-Callback-Token": "the-token",
        }
        async with (
            aiohttp.ClientSession() as session,
            session.post(f"{service.url}/jobs/report", json={}, headers=headers) as response,
        ):
            assert response.status == 200
            assert await response.json() == {
                "status": "RUNNING",
                "progress": 0,
                "message": "accepted",
            }
        job = service.job("eid-retried")
        await wait_for(lambda: job.runner.done(), timeout=5)
    finally:
        await runner.cleanup()
    assert job.answers == [503, 503, 200, 409]
    assert seen == ["Bearer the-token"] * 4
    assert job.report()["status"] == "FAILED"


async def test_two_triggers_with_the_same_eid_at_once_start_one_job(
    start_service: StartService,
) -> None:
    """Two triggers for one eid whose bodies arrive slowly, side by side, start one job and
    get the same answer (no callback URL here: the job just runs)."""
    service = await start_service(default_duration=30.0)
    both_started = asyncio.Barrier(2)

    async def slow_body() -> AsyncIterator[bytes]:
        yield b'{"duration": '
        async with asyncio.timeout(5):
            await both_started.wait()  # the rest of each body once both are half sent
        yield b"1}"

    async def send(session: aiohttp.ClientSession) -> tuple[int, Any]:
        headers = {"X-Ecron-Execution-Id": "eid-racing"}
        url = f"{service.url}/jobs/report"
        async with session.post(url, data=slow_body(), headers=headers) as response:
            return response.status, await response.json()

    async with aiohttp.ClientSession() as session:
        first, second = await asyncio.gather(send(session), send(session))
    assert first == second == (200, {"status": "RUNNING", "progress": 0, "message": "accepted"})
    runners = [task for task in asyncio.all_tasks() if task.get_name() == "job report/eid-racing"]
    assert len(runners) == 1
