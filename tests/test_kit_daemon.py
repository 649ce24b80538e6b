"""The user-service kit (sdk/python) against a real daemon: a service written with the kit,
run as its own process through each adapter (ASGI under uvicorn, WSGI under a threaded
wsgiref, aiohttp; tests/support/kit_service.py), driven by ecron on SQLite (and the
back-pressure one on PostgreSQL too). One service process per adapter serves the module;
the restart test has its own."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from ecron.daemon import Daemon
from tests.support.check_service import PACE, verdicts
from tests.support.daemon import DaemonFactory, task
from tests.support.kit_processes import ServiceProcess, free_port
from tests.support.kit_service import read_events
from tests.support.service import JSON_BODY, wait_for

ADAPTERS = ("asgi", "wsgi", "aiohttp")
SECRET = "kit-secret"
MAX_RUNNING = 4

pytestmark = pytest.mark.slow


@pytest.fixture
def database_url(tmp_path: Path) -> str:
    """SQLite: what the kit does does not depend on the database (the back-pressure test
    runs on PostgreSQL too, by its own parameter)."""
    return f"sqlite+aiosqlite:///{tmp_path / 'ecron.db'}"


@pytest.fixture
def either_database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """SQLite, or a fresh PostgreSQL database (dropped at the end), as the test's
    parameter says: for the back-pressure test, which runs on both."""
    if request.param == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path / 'either.db'}"
        return
    server = request.getfixturevalue("postgres_server")
    url = server.new_database()
    yield url
    server.drop_database(url)


@dataclass
class KitProcess(ServiceProcess):
    """tests/support/kit_service.py through one adapter, signing with SECRET, with
    ``max_running`` 4, writing its events to ``events``."""

    adapter: str = "asgi"
    events: Path = Path()

    @classmethod
    def of(cls, adapter: str, events: Path) -> KitProcess:
        port = free_port()
        command = [sys.executable, "-m", "tests.support.kit_service", "--adapter", adapter]
        command += ["--port", str(port), "--events", str(events)]
        command += ["--secret", SECRET, "--max-running", str(MAX_RUNNING)]
        return cls(command, port, adapter=adapter, events=events)

    def events_of(self, eid: str, event: str | None = None) -> list[dict[str, Any]]:
        """Its events about ``eid`` (of one kind), in order."""
        return [
            e
            for e in read_events(self.events)
            if e.get("eid") == eid and (event is None or e["event"] == event)
        ]


@pytest.fixture(scope="module")
def kit_services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, KitProcess]]:
    """One kit service per adapter for the module, signing with SECRET, ``max_running`` 4."""
    directory = tmp_path_factory.mktemp("kit")
    services = {
        adapter: KitProcess.of(adapter, directory / f"{adapter}.jsonl") for adapter in ADAPTERS
    }
    try:
        for service in services.values():
            service.start()
        yield services
    finally:
        for service in services.values():
            service.stop()


def public_daemon(
    make_daemon: DaemonFactory, specs: list[Any], **settings: Any
) -> AbstractAsyncContextManager[Daemon]:
    """A daemon whose ``public_url`` is its own API, so that the kit can push to it."""
    port = free_port()
    public = f"http://127.0.0.1:{port}"
    return make_daemon(specs, listen=f"127.0.0.1:{port}", public_url=public, **settings)


def kit_task(name: str, url: str, **keys: Any) -> Any:
    """A task calling the kit service, signed with its secret."""
    return task(name, url, secret=SECRET, **keys)


async def api(daemon: Daemon, method: str, path: str) -> Any:
    async with (
        aiohttp.ClientSession() as session,
        session.request(method, f"http://127.0.0.1:{daemon.port}{path}", json=JSON_BODY) as reply,
    ):
        assert reply.status < 300, await reply.text()
        return await reply.json()


async def run(daemon: Daemon, name: str) -> str:
    """Run task ``name`` now; the new execution's eid."""
    started = await api(daemon, "POST", f"/api/v1/tasks/{name}/run")
    return str(started["id"])


async def final(daemon: Daemon, eid: str, timeout: float = 15.0) -> dict[str, Any]:
    """Wait until execution ``eid`` is final; its snapshot."""

    async def done() -> dict[str, Any] | None:
        snapshot = await api(daemon, "GET", f"/api/v1/executions/{eid}")
        return snapshot if snapshot["finished_at"] else None

    result: dict[str, Any] = await wait_for(done, timeout=timeout)
    return result


@pytest.mark.parametrize("adapter", ADAPTERS)
async def test_a_signed_task_runs_to_success_with_rising_progress_and_its_result(
    adapter: str, kit_services: dict[str, KitProcess], make_daemon: DaemonFactory
) -> None:
    """A signed task whose job is an ``async def``, and one whose job is a ``def``, each run
    to SUCCESS through ecron; the progress ecron stores rises on the way (as its polls see
    it), and the SUCCESS carries the job's return value."""
    service = kit_services[adapter]
    body = {"steps": 5, "pause": 0.15}
    specs = [
        kit_task(job, f"{service.url}/jobs/{job}", body=body) for job in ("climb", "climb-thread")
    ]
    async with make_daemon(specs) as daemon:
        eids = [await run(daemon, "climb"), await run(daemon, "climb-thread")]
        seen: dict[str, list[float]] = {eid: [] for eid in eids}

        async def ended() -> bool:
            for eid in eids:
                snapshot = await api(daemon, "GET", f"/api/v1/executions/{eid}")
                seen[eid].append(snapshot["progress"] or 0)
            return all(values[-1] == 100 for values in seen.values())

        await wait_for(ended, timeout=10, interval=0.05)
        snapshots = [await final(daemon, eid) for eid in eids]
    for snapshot, eid in zip(snapshots, eids, strict=True):
        assert snapshot["status"] == "SUCCESS", snapshot
        assert snapshot["result"] == {"steps": 5}
        progress = seen[eid]
        assert progress == sorted(progress), progress
        assert len({p for p in progress if 0 < p < 100}) >= 2, progress
        assert len(service.events_of(eid, "start")) == 1


@pytest.mark.parametrize("adapter", ADAPTERS)
async def test_a_raising_job_ends_failed_with_its_message(
    adapter: str, kit_services: dict[str, KitProcess], make_daemon: DaemonFactory
) -> None:
    """A job that raises ends the execution FAILED (``remote_failed``) with the exception's
    message as the execution's message."""
    service = kit_services[adapter]
    spec = kit_task("raises", f"{service.url}/jobs/raises", body={"message": "disk full on /var"})
    async with make_daemon([spec]) as daemon:
        snapshot = await final(daemon, await run(daemon, "raises"))
    assert snapshot["status"] == "FAILED" and snapshot["reason"] == "remote_failed", snapshot
    assert snapshot["message"] == "disk full on /var"


@pytest.mark.parametrize("adapter", ADAPTERS)
async def test_the_task_timeout_cancels_the_job_inside_the_service(
    adapter: str, kit_services: dict[str, KitProcess], make_daemon: DaemonFactory
) -> None:
    """A task whose timeout passes ends TIMED_OUT with its cancel acknowledged, and the job
    in the service stops: the ``async def`` at its await, the ``def`` on ``run.cancelled``."""
    service = kit_services[adapter]
    specs = [
        kit_task(job, f"{service.url}/jobs/{job}", task_timeout="600ms")
        for job in ("sleeps", "sleeps-thread")
    ]
    async with make_daemon(specs) as daemon:
        eids = [await run(daemon, "sleeps"), await run(daemon, "sleeps-thread")]
        snapshots = [await final(daemon, eid) for eid in eids]
        await wait_for(lambda: all(service.events_of(eid, "stopped") for eid in eids), timeout=5)
    for snapshot in snapshots:
        assert snapshot["status"] == "TIMED_OUT" and snapshot["cancel_acknowledged"] is True


@pytest.mark.parametrize("adapter", ADAPTERS)
async def test_a_repeated_trigger_starts_nothing(
    adapter: str, kit_services: dict[str, KitProcess], make_daemon: DaemonFactory
) -> None:
    """A callback task whose first trigger's answer comes after ecron stopped waiting
    (``request_timeout``) is triggered again with the same eid: the kit answers the run it
    has and starts nothing; the job, started once, pushes its reports to SUCCESS, and ecron
    never polls it."""
    service = kit_services[adapter]
    spec = kit_task(
        "pushed",
        f"{service.url}/jobs/climb?slow=0.6",
        body={"steps": 3, "pause": 0.4},
        mode="callback",
        request_timeout="300ms",
        trigger_retry={"attempts": 5, "backoff": "100ms"},
    )
    async with public_daemon(make_daemon, [spec]) as daemon:
        eid = await run(daemon, "pushed")
        snapshot = await final(daemon, eid)
    requests = [e["method"] for e in service.events_of(eid, "request")]
    assert snapshot["status"] == "SUCCESS" and snapshot["result"] == {"steps": 3}, snapshot
    assert requests.count("POST") >= 2 and "GET" not in requests, requests
    assert len(service.events_of(eid, "start")) == 1


@pytest.mark.parametrize(
    ("adapter", "either_database"),
    [
        ("asgi", "sqlite"),
        pytest.param("wsgi", "postgresql", marks=pytest.mark.postgres),
        ("aiohttp", "sqlite"),
    ],
    indirect=["either_database"],
)  # each adapter's 429 once, and ecron's holding back on both databases
async def test_ten_runs_past_max_running_are_held_back_by_ecron_and_all_end_success(
    adapter: str,
    either_database: str,
    kit_services: dict[str, KitProcess],
    make_daemon: DaemonFactory,
) -> None:
    """Ten runs at once of a task whose service has ``max_running: 4``: the kit answers the
    triggers past four 429 with ``Retry-After``, ecron holds them back (no attempt spent),
    and all ten end SUCCESS at attempt 1, never more than four running at the service."""
    service = kit_services[adapter]
    spec = kit_task("many", f"{service.url}/jobs/short", body={"seconds": 0.3}, concurrency="allow")
    async with make_daemon([spec], database=either_database) as daemon:
        eids = [await run(daemon, "many") for _ in range(10)]
        snapshots = [await final(daemon, eid, timeout=30) for eid in eids]
    assert [s["status"] for s in snapshots] == ["SUCCESS"] * 10, snapshots
    assert {s["attempt"] for s in snapshots} == {1}
    refused = [e for eid in eids for e in service.events_of(eid, "request") if e["status"] == 429]
    assert refused, "no trigger was held back"
    moments = sorted(
        (e["at"], 1 if e["event"] == "start" else -1)
        for eid in eids
        for e in service.events_of(eid)
        if e["event"] in ("start", "end")
    )
    running = most = 0
    for _, change in moments:
        running += change
        most = max(most, running)
    assert len(moments) == 20 and most <= MAX_RUNNING, moments


@asynccontextmanager
async def own_service(adapter: str, directory: Path) -> AsyncIterator[KitProcess]:
    service = KitProcess.of(adapter, directory / f"own-{adapter}.jsonl")
    await asyncio.to_thread(service.start)
    try:
        yield service
    finally:
        await asyncio.to_thread(service.stop)


@pytest.mark.parametrize("adapter", ADAPTERS)
async def test_a_restarted_services_jobs_resume(
    adapter: str, make_daemon: DaemonFactory, tmp_path: Path
) -> None:
    """SIGTERM to a kit service ends its running job FAILED with ``interrupted: true``,
    pushed to ecron; the task being idempotent with ``resume: {auto: true}``, ecron resumes
    it, and once the service is back the resumed run (``X-Ecron-Resume-Of``) ends SUCCESS."""
    spec_keys = {
        "idempotent": True,
        "resume": {"auto": True},
        "trigger_retry": {"attempts": 10, "backoff": "200ms", "max_backoff": "500ms"},
    }
    async with own_service(adapter, tmp_path) as service:
        spec = kit_task("resumable", f"{service.url}/jobs/resumable", **spec_keys)
        async with public_daemon(make_daemon, [spec], patrol_interval="200ms") as daemon:
            first = await run(daemon, "resumable")
            await wait_for(lambda: service.events_of(first, "start"), timeout=10)
            stderr = await asyncio.to_thread(service.stop)
            interrupted = await final(daemon, first)
            await asyncio.to_thread(service.start)

            async def resumed() -> dict[str, Any] | None:
                page = await api(daemon, "GET", "/api/v1/executions?task=resumable")
                found = [e for e in page["items"] if e.get("resume_of") == first]
                return found[0] if found and found[0]["finished_at"] else None

            again = await wait_for(resumed, timeout=20)
    assert interrupted["status"] == "FAILED" and interrupted["reason"] == "interrupted", (
        interrupted,
        stderr,
    )
    assert again["status"] == "SUCCESS" and again["result"] == {"resumed": first}, again
    starts = [e for e in read_events(service.events) if e["event"] == "start"]
    assert [(e["eid"], e["resume_of"]) for e in starts] == [(first, None), (again["id"], first)]


@pytest.mark.parametrize("adapter", ADAPTERS)
async def test_ecron_check_service_passes_on_every_adapter(
    adapter: str, kit_services: dict[str, KitProcess]
) -> None:
    """``ecron check-service`` (signed, with the batch endpoint) finds every rule followed
    by a kit service, whatever its adapter, and exits 0."""
    from click.testing import CliRunner

    from ecron.cli import cli

    url = f"{kit_services[adapter].url}/jobs/climb"
    body = json.dumps({"steps": 400, "pause": 0.02})
    command = ["check-service", url, "--json", *PACE, "--secret", SECRET, "--body", body]
    command += ["--batch-poll-url", url]
    result = await asyncio.to_thread(CliRunner().invoke, cli, command)
    checklist = json.loads(result.output)
    assert result.exit_code == 0, checklist
    assert set(verdicts(checklist).values()) == {"pass"}, checklist
