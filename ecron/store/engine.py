"""Engines and transactions, with every SQLite/PostgreSQL difference decided here, once."""

from __future__ import annotations

import asyncio
import os
import stat
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from ecron.errors import StoreError
from ecron.store.lock import locks_for

#: How long a SQLite connection waits for another writer before giving up.
SQLITE_BUSY_TIMEOUT_MS = 10_000
#: SQLite's page cache per connection (an upper bound: pages are kept as they are used).
SQLITE_CACHE_KIB = 65_536
#: WAL pages written between two automatic checkpoints (SQLite's default is 1,000).
SQLITE_CHECKPOINT_PAGES = 10_000


class WriteTurns:
    """Whose turn it is to write (SQLite: one writer at a time in this process), first come
    first served, except that an urgent writer (the node's lease) goes before every writer
    still waiting: it waits for the transaction under way only. A node writing many rows (a
    batch poll's progress, starts asked from the API) queues seconds of transactions, and a
    renewal waiting behind them let the lease run out (``leases_expired_unrenewed``) on a
    node that was alive and well."""

    def __init__(self) -> None:
        self._busy = False
        self._urgent: deque[asyncio.Future[None]] = deque()
        self._waiting: deque[asyncio.Future[None]] = deque()

    @asynccontextmanager
    async def turn(self, *, urgent: bool = False) -> AsyncIterator[None]:
        """Hold the turn for the block (``urgent``: before every writer still waiting)."""
        if self._busy or self._urgent or (self._waiting and not urgent):
            line = self._urgent if urgent else self._waiting
            waiter = asyncio.get_running_loop().create_future()
            line.append(waiter)
            try:
                await waiter
            except asyncio.CancelledError:
                if waiter.done() and not waiter.cancelled():
                    self._hand_on()  # handed the turn as it was cancelled: pass it on
                else:
                    line.remove(waiter)
                raise
        else:
            self._busy = True
        try:
            yield
        finally:
            self._hand_on()

    def _hand_on(self) -> None:
        """The turn goes to the first urgent writer waiting, else to the first other one."""
        for line in (self._urgent, self._waiting):
            while line:
                waiter = line.popleft()
                if not waiter.done():
                    waiter.set_result(None)  # still busy: the turn passes straight on
                    return
        self._busy = False


@dataclass(frozen=True, slots=True)
class ByteOrder:
    """How ids are compared and sorted byte by byte along an index: SQLite's own operators
    (its text compares as bytes), or PostgreSQL's pattern operators (its collation may not;
    ``ix_execution_eid_prefix`` serves them). The sorts are ``ORDER BY`` suffixes."""

    below: str = "<"
    at_least: str = ">="
    above: str = ">"
    ascending: str = "ASC"
    descending: str = "DESC"


#: PostgreSQL's: its pattern operators, which sort along ``varchar_pattern_ops``.
PATTERN_ORDER = ByteOrder("~<~", "~>=~", "~>~", "USING ~<~", "USING ~>~")


@dataclass(frozen=True, slots=True)
class Dialect:
    """What the backend can do, checked once at start-up."""

    name: str
    #: ``FOR UPDATE SKIP LOCKED`` exists (PostgreSQL); on SQLite writers are serialised instead.
    skip_locked: bool
    #: Path of the database file (SQLite), for the file lock.
    path: Path | None
    #: The dialect's ``INSERT`` (with ``ON CONFLICT``) for a table.
    insert: Callable[[sa.Table], Any]
    #: How ids compare byte by byte along an index.
    byte_order: ByteOrder = ByteOrder()


class Engines:
    """A reading and a writing engine (the same one on PostgreSQL).

    On SQLite, write transactions start with ``BEGIN IMMEDIATE`` so that two
    processes on one file serialise instead of deadlocking, and writers in
    this process queue on an asyncio lock rather than on the file's busy wait
    (``busy_timeout_ms``: how long a connection waits for another process's
    writer before failing with ``database is locked``, which the store retries).
    The cluster lock's kind (a file lock or an advisory lock) is chosen here too.
    ``read_only`` engines (``ecron plan``) have every write refused by the database itself.
    """

    def __init__(
        self,
        url: str,
        *,
        pool_size: int = 10,
        observe: Callable[[str, float], None] | None = None,
        busy_timeout_ms: int = SQLITE_BUSY_TIMEOUT_MS,
        read_only: bool = False,
    ) -> None:
        #: Called with ("read" or "write", seconds) after each transaction.
        self.observe = observe
        parsed = make_url(url)
        if parsed.drivername == "sqlite+aiosqlite":
            database = parsed.database or ""
            path = None if database in ("", ":memory:") else Path(database)
            if path is None:
                raise StoreError(
                    f"database {url!r}: use a SQLite file; an in-memory database cannot be shared"
                )
            if not read_only:  # a read-only look creates no file and changes no mode
                _owner_only(path)
            self.dialect = Dialect("sqlite", skip_locked=False, path=path, insert=sqlite.insert)
            if read_only:  # SQLite refuses every write (and does not create a missing file)
                url = f"sqlite+aiosqlite:///file:{quote(str(path))}?mode=ro&uri=true"
            self.reader = _sqlite_engine(url, immediate=False, busy_ms=busy_timeout_ms)
            self.writer = _sqlite_engine(url, immediate=True, busy_ms=busy_timeout_ms)
            self._turns: WriteTurns | None = WriteTurns()
        elif parsed.drivername == "postgresql+asyncpg":
            self.dialect = Dialect(
                "postgresql",
                skip_locked=True,
                path=None,
                insert=postgresql.insert,
                byte_order=PATTERN_ORDER,
            )
            # read-only: PostgreSQL refuses every write in the session's transactions
            settings = {"default_transaction_read_only": "on"} if read_only else {}
            engine = create_async_engine(
                url,
                pool_size=pool_size,
                max_overflow=pool_size,
                pool_pre_ping=True,
                connect_args={"server_settings": settings} if settings else {},
            )
            self.reader = self.writer = engine
            self._turns = None
        else:
            raise StoreError(
                f"database {url!r}: use sqlite+aiosqlite:///FILE or postgresql+asyncpg://..."
            )
        #: The cluster-wide lock (see ``ecron.store.lock``).
        self.lock = locks_for(self.dialect.path, self.writer)

    @asynccontextmanager
    async def write(self, *, urgent: bool = False) -> AsyncIterator[AsyncConnection]:
        """A write transaction: committed on success, rolled back on error (``urgent``: on
        SQLite, before the writers waiting, see ``WriteTurns``)."""
        started = time.monotonic()
        try:
            if self._turns is None:
                async with self.writer.begin() as conn:
                    yield conn
            else:
                async with self._turns.turn(urgent=urgent), self.writer.begin() as conn:
                    yield conn
        finally:
            if self.observe is not None:
                self.observe("write", time.monotonic() - started)

    @asynccontextmanager
    async def single(self) -> AsyncIterator[AsyncConnection]:
        """A connection for statements that stand alone, each its own transaction
        (PostgreSQL's autocommit: no ``BEGIN`` and ``COMMIT`` round trips around it): a
        lease renewal is one statement, one round trip. On SQLite an urgent write
        transaction: the node's lease goes before the writes waiting (``WriteTurns``)."""
        if self._turns is not None:
            async with self.write(urgent=True) as conn:
                yield conn
            return
        started = time.monotonic()
        try:
            async with self.writer.connect() as conn:
                auto = await conn.execution_options(isolation_level="AUTOCOMMIT")
                yield auto
        finally:
            if self.observe is not None:
                self.observe("write", time.monotonic() - started)

    @asynccontextmanager
    async def read(self) -> AsyncIterator[AsyncConnection]:
        """A read-only transaction."""
        started = time.monotonic()
        try:
            async with self.reader.connect() as conn:
                yield conn
        finally:
            if self.observe is not None:
                self.observe("read", time.monotonic() - started)

    async def dispose(self) -> None:
        """Close every pooled connection."""
        await self.reader.dispose()
        if self.writer is not self.reader:
            await self.writer.dispose()


def _owner_only(path: Path) -> None:
    """Make the SQLite file ``path`` readable and writable by its owner alone (0600): it
    holds the callback secret and the task specs. SQLite creates the ``-wal`` and ``-shm``
    files with the mode of the database file, so creating it here first, 0600 whatever the
    umask, covers them; an existing file (and its ``-wal`` and ``-shm``) is set to 0600 at
    every start. What cannot be done (a file of another user) is left to SQLite to report."""
    with suppress(OSError):
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))  # no-op for an existing file
    for name in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
        with suppress(OSError):
            if name.exists() and stat.S_IMODE(name.stat().st_mode) & 0o077:
                name.chmod(0o600)


def _sqlite_engine(url: str, *, immediate: bool, busy_ms: int) -> AsyncEngine:
    engine = create_async_engine(url, connect_args={"timeout": busy_ms / 1000})
    begin = "BEGIN IMMEDIATE" if immediate else "BEGIN"

    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Take BEGIN out of the driver's hands so that it is emitted exactly when we say.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA busy_timeout={busy_ms}")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        # A node rewrites the rows of everything in flight every few seconds (progress): a
        # page cache that holds them, and a checkpoint every 40 MiB of WAL instead of 4 MiB
        # (a hot page is copied to the database file once per checkpoint, not once per
        # write), cut SQLite's CPU per row written from about 21 µs to 15 (docs/performance.md)
        cursor.execute(f"PRAGMA cache_size=-{SQLITE_CACHE_KIB}")
        cursor.execute(f"PRAGMA wal_autocheckpoint={SQLITE_CHECKPOINT_PAGES}")
        cursor.close()

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(conn: Any) -> None:
        conn.exec_driver_sql(begin)

    return engine


def cluster_lock(
    engines: Engines, name: str, *, wait: bool = True
) -> AbstractAsyncContextManager[bool]:
    """Hold the lock ``name`` across every node sharing the database.

    Yields True when held. With ``wait=False`` it yields False at once if
    another node holds it.
    """
    return engines.lock(name, wait)
