"""A store transaction that the database fails for a passing reason is run again from its
start (ecron.store.retry); any other error, and the last attempt's, reaches the caller."""

from __future__ import annotations

import asyncio
import re
import sqlite3
from collections.abc import Iterator, Mapping, MutableMapping
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import pytest
import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine
from structlog.testing import capture_logs

from ecron.core import Gate, Status, Step
from ecron.planning import FirstFireTimes
from ecron.store.engine import Engines
from ecron.store.records import StartWrites
from ecron.store.retry import ATTEMPTS, transient
from ecron.store.sql import SqlStore
from ecron.store.tables import execution_table
from tests.support.daemon import task
from tests.support.postgres import PostgresServer
from tests.test_store import T0, URL, claim_at, execution, planner

LogLines = list[MutableMapping[str, Any]]
ON_POSTGRESQL = pytest.mark.parametrize(
    "database_url", [pytest.param("postgresql", marks=pytest.mark.postgres)], indirect=True
)


@contextmanager
def statements(engine: AsyncEngine, hook: Any) -> Iterator[None]:
    """Call ``hook(conn, statement)`` before each statement ``engine`` sends."""

    def before(conn: Any, _cursor: Any, statement: str, *_rest: Any) -> None:
        hook(conn, statement)

    event.listen(engine.sync_engine, "before_cursor_execute", before)
    try:
        yield
    finally:
        event.remove(engine.sync_engine, "before_cursor_execute", before)


def retries(logs: LogLines) -> list[MutableMapping[str, Any]]:
    return [line for line in logs if line["event"] == "store_retry"]


async def _terminate(driver: asyncpg.Connection, admin_dsn: str) -> int:
    """End ``driver``'s server process from another connection, and wait until it is gone."""
    pid = driver.get_server_pid()
    other = await asyncpg.connect(admin_dsn)
    try:
        assert await other.fetchval("SELECT pg_terminate_backend($1, 10000)", pid)
    finally:
        await other.close()
    return pid


@ON_POSTGRESQL
async def test_a_postgresql_connection_dropped_mid_transaction_runs_the_whole_claim_again(
    store: SqlStore, postgres_server: PostgresServer
) -> None:
    """The claim's connection is terminated after it moved the task's fire time and before it
    inserted the execution: the claim is rolled back, run again from its start, and its effect
    is written once (the task one fire time on, one execution)."""
    killed: list[int] = []
    advances: list[str] = []

    def kill_before_insert(conn: Any, statement: str) -> None:
        if updates(statement, "task"):
            advances.append(statement)
        if not killed and statement.startswith("INSERT INTO execution"):
            adapted = conn.connection.dbapi_connection  # SQLAlchemy's asyncpg adapter
            killed.append(adapted.run_async(lambda c: _terminate(c, postgres_server.admin_dsn)))

    specs = {"a": task("a", URL, schedule={"every": "10s"})}
    await store.sync_tasks(specs, FirstFireTimes(T0))
    with capture_logs() as logs, statements(store.engines.writer, kill_before_insert):
        claimed = await store.claim_due_fires(T0, 10, planner(claim_at(T0), specs))
    assert killed, "the connection was never terminated"
    assert [(e.task, e.scheduled_at) for e in claimed.executions] == [("a", T0)]
    assert len(advances) == 2  # each attempt moved the fire time: the first was undone
    stored = await store.get_task("a")
    assert stored is not None and stored.next_fire_at == T0 + timedelta(seconds=10)
    rows = (await store.list_executions(status=Status.SCHEDULED)).items
    assert [row.eid for row in rows] == [claimed.executions[0].eid]
    [line] = retries(logs)
    assert line["operation"] == "claim_due_fires" and line["attempt"] == 1
    assert line["log_level"] == "warning" and "Error" in line["error"]


@ON_POSTGRESQL
async def test_a_dropped_connection_of_a_state_write_is_retried_and_written_once(
    store: SqlStore, postgres_server: PostgresServer
) -> None:
    """A compare-and-set write whose connection dies is run again and succeeds: the stored
    row is the write (its version once raised), not a lost race."""
    killed: list[int] = []

    def kill_first_update(conn: Any, statement: str) -> None:
        if not killed and updates(statement, "execution"):
            adapted = conn.connection.dbapi_connection
            killed.append(adapted.run_async(lambda c: _terminate(c, postgres_server.admin_dsn)))

    before = await store.create_execution(execution())
    assert before is not None
    after = before.evolve(version=before.version + 1, progress=0.5)
    with capture_logs() as logs, statements(store.engines.writer, kill_first_update):
        assert await store.save([(before, after)]) == [after]
    assert killed
    stored = await store.get_execution(before.eid)
    assert stored is not None and (stored.version, stored.progress) == (after.version, 0.5)
    assert [line["operation"] for line in retries(logs)] == ["save"]


@pytest.fixture
def sqlite_file(tmp_path: Path, database_url: str) -> Path:
    """The migrated SQLite file of the shared fixture (SQLite only)."""
    if not database_url.startswith("sqlite"):
        pytest.skip("a SQLite file lock")
    return tmp_path / "ecron.db"


@contextmanager
def write_lock_held(path: Path) -> Iterator[sqlite3.Connection]:
    """Another process's writer, as far as SQLite can tell: ``BEGIN IMMEDIATE`` on its own
    connection, held until rolled back."""
    other = sqlite3.connect(path, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        yield other
    finally:
        if other.in_transaction:
            other.rollback()
        other.close()


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
async def test_a_sqlite_database_is_locked_is_retried_until_the_lock_is_released(
    sqlite_file: Path,
) -> None:
    """While another connection holds the write lock the insert fails with 'database is
    locked'; once the first failure was logged the lock is released and the insert goes on
    and is written once."""
    store = SqlStore(Engines(f"sqlite+aiosqlite:///{sqlite_file}", busy_timeout_ms=50))
    failed = asyncio.Event()

    def seen(_logger: Any, _name: str, line: MutableMapping[str, Any]) -> Any:
        if line["event"] == "store_retry":
            failed.set()
        return line

    try:
        wanted = execution()
        with capture_logs(processors=[seen]) as logs, write_lock_held(sqlite_file) as other:
            creating = asyncio.create_task(store.create_execution(wanted))
            await asyncio.wait_for(failed.wait(), 10)
            other.rollback()
            assert await asyncio.wait_for(creating, 10) == wanted
        [line, *_] = retries(logs)
        assert line["operation"] == "create_execution" and "database is locked" in line["error"]
        async with store.engines.read() as conn:
            count = sa.select(sa.func.count()).where(execution_table.c.eid == wanted.eid)
            assert (await conn.execute(count)).scalar_one() == 1
    finally:
        await store.close()


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
async def test_the_last_attempts_error_reaches_the_caller(sqlite_file: Path) -> None:
    """A lock that is never released: every attempt fails, each but the last is logged, and
    the last one's 'database is locked' is raised as it is."""
    store = SqlStore(Engines(f"sqlite+aiosqlite:///{sqlite_file}", busy_timeout_ms=20))
    try:
        locked = pytest.raises(sa.exc.OperationalError, match="database is locked")
        with capture_logs() as logs, write_lock_held(sqlite_file), locked:
            await store.create_execution(execution())
        assert [line["attempt"] for line in retries(logs)] == list(range(1, ATTEMPTS))
    finally:
        await store.close()


async def test_an_error_that_is_not_transient_is_raised_at_once(store: SqlStore) -> None:
    """Two steps with one number break the step table's key: an integrity error, raised from
    the first attempt, nothing retried and nothing written."""
    step = Step(number=1, name="one", remote_id="r.1")
    broken = execution(steps=(step, step))
    inserts: list[str] = []

    def count(_conn: Any, statement: str) -> None:
        if statement.startswith("INSERT INTO execution "):
            inserts.append(statement)

    refused = pytest.raises(sa.exc.IntegrityError)
    with capture_logs() as logs, statements(store.engines.writer, count), refused:
        await store.create_execution(broken)
    assert len(inserts) == 1 and retries(logs) == []
    assert await store.get_execution(broken.eid) is None


class LostCommits:
    """``Engines.observe`` that fails the next write transaction after its commit (as a
    connection lost while COMMIT's answer travels back): its work done, the caller told
    otherwise."""

    def __init__(self) -> None:
        self.armed = False

    def __call__(self, kind: str, _seconds: float) -> None:
        if kind == "write" and self.armed:
            self.armed = False
            raise ConnectionResetError("connection lost while committing")


@pytest.fixture
async def lossy(database_url: str) -> Any:
    """A store whose next write can be told to lose its commit's answer."""
    lost = LostCommits()
    store = SqlStore(Engines(database_url, observe=lost))
    yield store, lost
    await store.close()


async def test_writes_whose_commit_answer_was_lost_are_not_done_twice(lossy: Any) -> None:
    """Each of these is retried after its commit landed: an insert is the one it made, a
    compare-and-set write is not a lost race, an end is not counted twice, a resume given
    up is this caller's."""
    store, lost = lossy
    await store.sync_tasks({"a": task("a", URL)}, FirstFireTimes(T0))
    with capture_logs() as logs:
        lost.armed = True
        wanted = execution()
        assert await store.create_execution(wanted) == wanted
        lost.armed = True
        after = wanted.evolve(version=wanted.version + 1, progress=0.5)
        assert await store.save([(wanted, after)]) == [after]
        lost.armed = True
        end = datetime(2026, 3, 1, 12, 5, tzinfo=UTC)
        finished = await store.task_finished("a", end, False, None)
        assert finished is not None and finished.consecutive_failures == 1
        lost.armed = True
        assert await store.give_up_resume(wanted.eid, end) is True
        assert await store.give_up_resume(wanted.eid, end) is False
    assert [line["operation"] for line in retries(logs)] == [
        "create_execution",
        "save",
        "task_finished",
        "give_up_resume",
    ]
    stored = await store.get_execution(wanted.eid)
    assert stored is not None and stored.version == after.version


async def test_a_start_whose_commit_answer_was_lost_is_not_taken_for_an_overlap(
    lossy: Any,
) -> None:
    """Retried after its commit landed, a start under a forbid-like rule sees its own
    execution active; it decides as the first attempt did, and the start is reported
    done (not refused, not skipped). So does a new run it inserted: the retry sees it
    active, decides without it, and finds its row as its own."""
    store, lost = lossy
    await store.sync_tasks({"a": task("a", URL), "b": task("b", URL)}, FirstFireTimes(T0))
    scheduled = await store.create_execution(execution("a", T0, status=Status.SCHEDULED))
    assert scheduled is not None
    calls: list[tuple[str, ...]] = []

    def forbid(gates: Mapping[str, Gate]) -> StartWrites:
        active = tuple(holder.eid for holder in gates["a"].active)
        calls.append(active)
        status = Status.SKIPPED if active else Status.PENDING
        return StartWrites(
            [(scheduled, scheduled.evolve(version=scheduled.version + 1, status=status))]
        )

    lost.armed = True
    [(_before, after, stored)] = (await store.start_executions(["a"], forbid)).written
    assert stored is not None and stored.status is Status.PENDING and stored == after
    assert calls == [(), (scheduled.eid,), ()]
    run = execution("b", T0)

    def unless_active(gates: Mapping[str, Gate]) -> StartWrites:
        return StartWrites(inserts=[] if gates["b"].active else [run])

    lost.armed = True
    started = await store.start_executions(["b"], unless_active, new=[run.eid])
    assert started.inserted == [run]


def _wrapped(orig: BaseException) -> sa.exc.DBAPIError:
    """``orig`` as SQLAlchemy hands a driver's error on."""
    return sa.exc.DBAPIError.instance("SELECT 1", {}, orig, Exception)


@pytest.mark.parametrize(
    ("error", "worth_again"),
    [
        (_wrapped(sqlite3.OperationalError("database is locked")), True),
        (_wrapped(sqlite3.OperationalError("database is busy")), True),
        (_wrapped(sqlite3.OperationalError("no such table: task")), False),
        (_wrapped(sqlite3.IntegrityError("UNIQUE constraint failed: task.name")), False),
        (asyncpg.exceptions.SerializationError("could not serialize access"), True),
        (asyncpg.exceptions.DeadlockDetectedError("deadlock detected"), True),
        (asyncpg.exceptions.CannotConnectNowError("the database system is starting up"), True),
        (asyncpg.exceptions.ConnectionDoesNotExistError("connection was closed"), True),
        (
            asyncpg.exceptions.InterfaceError(
                "cannot call Connection.fetch(): connection is closed"
            ),
            True,
        ),
        (asyncpg.exceptions.UniqueViolationError("duplicate key value"), False),
        (ConnectionRefusedError(111, "Connection refused"), True),
        (ValueError("naive datetime"), False),
    ],
    ids=lambda value: type(value).__name__ if isinstance(value, BaseException) else str(value),
)
def test_the_transient_errors_of_each_database_are_told_from_the_rest(
    error: BaseException, worth_again: bool
) -> None:
    """SQLite busy/locked, connection loss, serialization failure and deadlock are run
    again; constraint and programming errors are not."""
    raised_from = _wrapped(Exception("adapted"))
    raised_from.__cause__ = error  # how SQLAlchemy's asyncpg adapter chains the original
    assert transient(error) is worth_again
    assert transient(raised_from) is worth_again


async def test_two_nodes_syncing_the_same_new_tasks_at_once_both_succeed(
    store: SqlStore, database_url: str
) -> None:
    """Two nodes starting together both find the tasks new: the insert that comes second
    leaves the first one's rows alone instead of failing on the unique name."""
    other = SqlStore.open(database_url)
    specs = {f"t{i:02}": task(f"t{i:02}", URL, schedule={"every": "1s"}) for i in range(50)}
    try:
        first, second = await asyncio.gather(
            store.sync_tasks(specs, FirstFireTimes(T0)), other.sync_tasks(specs, FirstFireTimes(T0))
        )
    finally:
        await other.close()
    assert sorted(first.added + second.added) == sorted(specs)
    assert len(await store.list_tasks()) == 50


def updates(statement: str, table: str) -> bool:
    """True when ``statement`` updates ``table`` (a bulk update begins with the rows it
    locks, in order: ``WITH ... FOR UPDATE) UPDATE table SET``)."""
    return re.search(rf"(^|\) )UPDATE {table} SET", statement) is not None
