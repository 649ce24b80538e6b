"""Shared fixtures: databases (SQLite and PostgreSQL from one parametrised fixture), a real
redis-server, a real user service on 127.0.0.1, and a daemon factory. Fixtures only: what
tests import (task specs, the factory's type, servers) is in ``tests/support/``."""

from __future__ import annotations

import asyncio
import io
import logging
import shutil
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import structlog
from aiohttp import web

from ecron import logs
from ecron.clock import Clock
from ecron.config.model import Config, DaemonSettings, TaskSpec
from ecron.config.rules import PoolSpec
from ecron.daemon import Daemon
from ecron.store.engine import Engines
from ecron.store.migrate import upgrade
from ecron.store.sql import SqlStore
from tests.support.daemon import DaemonFactory
from tests.support.postgres import PostgresServer, start_server, unavailable
from tests.support.redis_server import RedisServer, start_redis
from tests.support.service import UserService


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """One PostgreSQL server for the whole session (skips locally, fails in CI, if none)."""
    server, why = start_server()
    if server is None:
        unavailable(why)
    assert server is not None
    server.prepare_template()
    yield server
    server.close()


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite file migrated once per worker, which each test's database is a copy of (as
    PostgreSQL's are copies of a template): migrating costs about 0.2 s a test."""
    path = tmp_path_factory.mktemp("template") / "ecron.db"

    async def migrate() -> None:
        engines = Engines(f"sqlite+aiosqlite:///{path}")
        try:
            await upgrade(engines)
        finally:
            await engines.dispose()

    asyncio.run(migrate())
    return path


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh, migrated database: a SQLite file, or a PostgreSQL database."""
    if request.param == "sqlite":
        template: Path = request.getfixturevalue("sqlite_template")
        shutil.copyfile(template, tmp_path / "ecron.db")
        yield f"sqlite+aiosqlite:///{tmp_path / 'ecron.db'}"
        return
    server: PostgresServer = request.getfixturevalue("postgres_server")
    url = server.new_database()
    yield url
    server.drop_database(url)


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    """A real redis-server of its own for the test, on a free port (skips locally, fails in
    CI, if there is none); killed at the end."""
    server = start_redis()
    yield server
    server.stop()


@pytest.fixture
async def store(database_url: str) -> AsyncIterator[SqlStore]:
    """A store on the fresh database; no connection may be left checked out at the end."""
    store = SqlStore.open(database_url)
    yield store
    for engine in {store.engines.reader, store.engines.writer}:
        assert engine.pool.checkedout() == 0, "a connection was left checked out"  # type: ignore[attr-defined]
    await store.close()


@pytest.fixture
async def user_service() -> AsyncIterator[UserService]:
    """A real user service on 127.0.0.1 serving ``/jobs/{kind}`` (trigger) and
    ``/jobs/{kind}/{eid}`` (poll, cancel). At the end, answers still held back (a slow
    service whose caller gave up long ago) are cut short, not waited for."""
    service = UserService()
    runner = web.AppRunner(service.app(), shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    service.url = f"http://127.0.0.1:{port}"
    yield service
    await runner.cleanup()


@pytest.fixture
def make_daemon(database_url: str, tmp_path: Path) -> DaemonFactory:
    """``async with make_daemon(tasks, **settings) as daemon``: a daemon on the test database,
    its API on a free port of 127.0.0.1; on real time, or on ``clock`` (a
    ``tests.support.rig.FakeClock``: nothing planned happens until the test moves it)."""

    @asynccontextmanager
    async def factory(
        tasks: list[TaskSpec],
        *,
        clock: Clock | None = None,
        pools: dict[str, PoolSpec] | None = None,
        **settings: Any,
    ) -> AsyncIterator[Daemon]:
        values: dict[str, Any] = {"database": database_url, "listen": "127.0.0.1:0", "tick": "50ms"}
        values.update(settings)
        config = Config(
            directory=str(tmp_path),
            daemon=DaemonSettings.model_validate(values),
            tasks={spec.name: spec for spec in tasks},
            pools=pools or {},
        )
        async with Daemon(config, clock=clock) as daemon:
            yield daemon

    return factory


@pytest.fixture
def json_logs() -> Iterator[io.StringIO]:
    """The real log pipeline (JSON lines, redaction), at debug, writing into a buffer."""
    buffer = io.StringIO()
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    logs.configure("json", "debug", stream=buffer)
    try:
        yield buffer
    finally:
        structlog.reset_defaults()
        root.handlers, root.level = handlers, level


@pytest.fixture
def logs_to_stderr() -> Iterator[None]:
    """The daemon runs in this process: its log lines go to stderr, not into the output
    the CLI runner captures (tests of the CLI against an in-process daemon use it)."""
    saved = structlog.get_config()
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stderr))
    yield
    structlog.configure(**saved)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """What each fault test that passed checked: the counts it printed (fire times,
    executions, starts per remote id, calls after waking, leases taken), in every run's
    output, CI's too, and not only when one fails (pytest shows a failure's output anyway)."""
    shown = [
        report
        for report in terminalreporter.stats.get("passed", [])
        if report.when == "call"
        and report.nodeid.startswith("tests/chaos/test_")
        and report.capstdout.strip()
    ]
    if shown:
        terminalreporter.section("what the fault tests checked")
        for report in sorted(shown, key=lambda r: r.nodeid):
            terminalreporter.write_line(f"{report.nodeid}:{report.capstdout.rstrip()}")
