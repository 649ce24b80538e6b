"""Database faults under a running node (issue 13, part 2): PostgreSQL stopped and started
again, every connection killed from an admin connection, SQLite's write lock held past the
busy timeout, and a full disk. Whatever the fault, the node keeps running, ``/healthz``
keeps answering 200, and once the database is back work resumes by itself: nothing lost,
nothing doubled, no row broken; an execution running through the fault ends SUCCESS, and
one whose deadline passes during it ends TIMED_OUT with one cancel."""

from __future__ import annotations

import asyncio
import errno
import json
import os
import sqlite3
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import closing, contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from sqlalchemy.engine import make_url

from ecron.store.engine import SQLITE_BUSY_TIMEOUT_MS
from tests.chaos.faults import (
    DEADLINE,
    THROUGH_AFTER,
    cancels,
    ended_as,
    events_of,
    fault_run,
    settle_and_read,
    tick_problems,
)
from tests.chaos.pgserver import StoppablePostgres
from tests.support.cluster import execution, let_time_pass, run_now
from tests.support.postgres import PostgresServer
from tests.support.service import UserService, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("warm_forkserver")]

#: How long PostgreSQL stays stopped; the lease of the node is shorter, so that its leases
#: lapse during the outage and it must take its own work over again afterwards.
OUTAGE = 6.0
SHORT_LEASE = 3.0


@pytest.fixture
def stoppable_postgres() -> Iterator[StoppablePostgres]:
    """A PostgreSQL server of this test's own, which it may stop."""
    server = StoppablePostgres.create()
    yield server
    server.close()


@pytest.mark.postgres
async def test_postgresql_stopped_for_seconds_mid_run_leaves_the_node_running_and_loses_nothing(
    stoppable_postgres: StoppablePostgres, user_service: UserService, tmp_path: Path
) -> None:
    """PostgreSQL is stopped for 6 s (twice the node's lease_ttl) while a task fires every
    second, a job runs through the outage and another's 3 s deadline passes during it. The
    node never exits and /healthz answers 200 throughout; /readyz answers 503 while the
    database is away and 200 after; fire times run again on their own (the ones missed
    during the outage too, late, since they are within the misfire grace), each once; the
    job that ran through ends SUCCESS, the other TIMED_OUT with exactly one cancel call."""
    user_service.durations = {"tick": 0.2, "through": OUTAGE + THROUGH_AFTER, "deadline": 60.0}
    url = await stoppable_postgres.create_database("ecron_outage")
    settings = f"lease_ttl: {SHORT_LEASE:g}s\n"
    async with fault_run(url, tmp_path, user_service, settings=settings) as run:
        await run.fired()  # fire times before the outage
        through, deadline = await run.start_work()
        stopped_at = time.monotonic()
        await stoppable_postgres.stop()
        await wait_for(lambda: 503 in run.probe.ready_since(stopped_at), timeout=10)
        await let_time_pass(OUTAGE - (time.monotonic() - stopped_at))
        await stoppable_postgres.start()
        back = time.monotonic()
        back_at = datetime.now(UTC)
        await run.wait_ready_again(back)
        ended, code, rows = await settle_and_read(run, back_at, [through, deadline])
    window, problems = tick_problems(rows, user_service, run.began, ended)
    events = events_of(run.node)
    print(
        f"\nPostgreSQL stopped {OUTAGE:g}s: /healthz probes {len(run.probe.health)} (all 200), "
        f"/readyz 503 answers {sum(s == 503 for _, s in run.probe.ready)} of "
        f"{len(run.probe.ready)}; tick fire times checked {window}; through "
        f"{ended_as(rows, through)}, deadline {ended_as(rows, deadline)} with "
        f"{cancels(user_service, deadline)} cancel(s); store_retry={events['store_retry']}, "
        f"leases_expired_unrenewed={events['leases_expired_unrenewed']}, "
        f"execution_adopted={events['execution_adopted']}"
    )
    assert run.probe.unhealthy() == [], run.node.log_tail(40)
    assert code == 0, run.node.log_tail(40)
    assert problems == [], problems
    assert ended_as(rows, through) == ("SUCCESS", None)
    assert ended_as(rows, deadline) == ("TIMED_OUT", None)
    assert cancels(user_service, deadline) == 1


async def _terminate_all(admin_dsn: str, database: str) -> int:
    """``pg_terminate_backend`` on every connection to ``database``, from an admin
    connection; how many were killed."""
    admin = await asyncpg.connect(admin_dsn)
    try:
        killed = await admin.fetch(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = $1 AND pid <> pg_backend_pid()",
            database,
        )
    finally:
        await admin.close()
    return sum(bool(row[0]) for row in killed)


@pytest.mark.postgres
async def test_every_connection_killed_again_and_again_leaves_the_node_running_and_loses_nothing(
    postgres_url: str, postgres_server: PostgresServer, user_service: UserService, tmp_path: Path
) -> None:
    """Every connection of the node to its database is killed with pg_terminate_backend
    from an admin connection, eight times 0.5 s apart, while a task fires every second, a
    job runs through it all and another's 3 s deadline passes meanwhile. The node never
    exits, /healthz answers 200 throughout and /readyz 200 afterwards; every fire time runs
    once; the long job ends SUCCESS, the other TIMED_OUT with exactly one cancel call."""
    rounds, pause = 8, 0.5
    user_service.durations = {"tick": 0.2, "through": rounds * pause + THROUGH_AFTER}
    user_service.durations["deadline"] = 60.0
    database = make_url(postgres_url).database
    assert database is not None
    async with fault_run(postgres_url, tmp_path, user_service) as run:
        await run.fired()
        through, deadline = await run.start_work()
        killed = []
        for _ in range(rounds):
            killed.append(await _terminate_all(postgres_server.admin_dsn, database))
            await let_time_pass(pause)
        over = time.monotonic()
        over_at = datetime.now(UTC)
        await run.wait_ready_again(over)
        ended, code, rows = await settle_and_read(run, over_at, [through, deadline])
    window, problems = tick_problems(rows, user_service, run.began, ended)
    events = events_of(run.node)
    print(
        f"\nconnections killed per round: {killed}; tick fire times checked {window}; "
        f"through {ended_as(rows, through)}, deadline {ended_as(rows, deadline)} with "
        f"{cancels(user_service, deadline)} cancel(s); store_retry={events['store_retry']}"
    )
    assert sum(killed) > 0
    assert run.probe.unhealthy() == [], run.node.log_tail(40)
    assert code == 0, run.node.log_tail(40)
    assert problems == [], problems
    assert ended_as(rows, through) == ("SUCCESS", None)
    assert ended_as(rows, deadline) == ("TIMED_OUT", None)
    assert cancels(user_service, deadline) == 1
    assert rounds * pause > DEADLINE  # the deadline passed while connections were killed


# --- SQLite ------------------------------------------------------------------------------

#: How long the other connection holds SQLite's write lock: longer than the node's busy
#: timeout, so that the node's writers get ``database is locked``.
LOCK_HELD = SQLITE_BUSY_TIMEOUT_MS / 1000 + 2.0


def _integrity(path: Path) -> tuple[str, list[Any]]:
    """SQLite's own check of the file, and rows that break the tables' rules."""
    with closing(sqlite3.connect(path)) as conn:
        verdict = conn.execute("PRAGMA integrity_check").fetchone()[0]
        broken = conn.execute(
            "SELECT eid, status, finished_at FROM execution WHERE "
            "(status IN ('SUCCESS','FAILED','TIMED_OUT','CANCELLED','SKIPPED') "
            "AND finished_at IS NULL) OR status NOT IN "
            "('SCHEDULED','PENDING','RUNNING','SUCCESS','FAILED','TIMED_OUT','CANCELLED','SKIPPED')"
        ).fetchall()
    return verdict, broken


async def test_sqlite_locked_by_another_writer_past_the_busy_timeout_is_retried_and_nothing_breaks(
    user_service: UserService, tmp_path: Path
) -> None:
    """Another connection takes SQLite's write lock (BEGIN IMMEDIATE) and holds it 2 s
    longer than the node's 10 s busy timeout, while a task fires every second and a job
    runs. The node's writes fail with ``database is locked`` and are retried (store_retry),
    the node keeps running and /healthz answering 200; once the lock is released every fire
    time of the window has run once, the job ends SUCCESS, later fire times run, and the
    file passes SQLite's integrity check."""
    user_service.durations = {"tick": 0.2, "through": LOCK_HELD + THROUGH_AFTER, "deadline": 60.0}
    path = tmp_path / "ecron.db"
    async with fault_run(f"sqlite+aiosqlite:///{path}", tmp_path, user_service) as run:
        await run.fired()
        through = await run_now(run.node, "through")
        await wait_for(lambda: _status_is(run.node, through, "RUNNING"), timeout=10)
        blocker = sqlite3.connect(path, timeout=30, isolation_level=None, check_same_thread=False)
        try:
            await asyncio.to_thread(blocker.execute, "BEGIN IMMEDIATE")
            await let_time_pass(LOCK_HELD)
            blocker.execute("ROLLBACK")
        finally:
            blocker.close()
        released = datetime.now(UTC)
        ended, code, rows = await settle_and_read(run, released, [through])
    window, problems = tick_problems(rows, user_service, run.began, ended)
    locked = [
        e for e in run.node.events() if e.get("event") == "store_retry" and "locked" in e["error"]
    ]
    verdict, broken = _integrity(path)
    print(
        f"\nwrite lock held {LOCK_HELD:g}s: store_retry on 'database is locked' "
        f"{len(locked)} ({sorted({e['operation'] for e in locked})}); tick fire times "
        f"checked {window}; through {ended_as(rows, through)}; integrity {verdict}"
    )
    assert locked, run.node.log_tail(40)
    assert run.probe.unhealthy() == [], run.node.log_tail(40)
    assert code == 0, run.node.log_tail(40)
    assert problems == [], problems
    assert ended_as(rows, through) == ("SUCCESS", None)
    assert (verdict, broken) == ("ok", [])


async def _status_is(node: Any, eid: str, status: str) -> bool:
    return (await execution(node, eid))["status"] == status


#: How long the disk stays full once a write failed on it.
FULL = 2.0


@contextmanager
def small_disk(path: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` mounted on ``path`` (root only: skipped locally, failed in CI,
    where it cannot be mounted), unmounted at the end."""
    path.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        why = f"cannot mount a tmpfs to fill (needs root): {mounted.stderr.strip()}"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"the full-disk test needs root in CI: {why}", pytrace=False)
        pytest.skip(why)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def fill(directory: Path) -> Path:
    """Write a file into ``directory`` until the disk is full; the file. Unbuffered: a
    buffered file keeps what its last write could not place and writes it again when it is
    closed, which fails once more on the full disk (whenever the space left was not a whole
    number of blocks)."""
    filler = directory / "filler"
    block = b"\0" * 65536
    with filler.open("wb", buffering=0) as out:
        try:
            while True:
                out.write(block)
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
    return filler


async def test_a_full_disk_fails_writes_with_a_clear_error_and_work_resumes_once_space_is_back(
    user_service: UserService, tmp_path: Path
) -> None:
    """The SQLite file lives on a small tmpfs, which is filled to the last byte while a task
    fires every second and a job runs. Writes fail with SQLite's ``database or disk is full``,
    logged as errors that say so; the node keeps running and /healthz answering 200. Once the
    filler is removed, work resumes by itself: fire times run again (each fire time of the
    window once), the job ends SUCCESS, and the file passes SQLite's integrity check."""
    user_service.durations = {"tick": 0.2, "through": FULL + THROUGH_AFTER, "deadline": 60.0}
    with small_disk(tmp_path / "disk", "16m") as disk:
        path = disk / "ecron.db"
        async with fault_run(f"sqlite+aiosqlite:///{path}", tmp_path, user_service) as run:
            await run.fired()
            through = await run_now(run.node, "through")
            await wait_for(lambda: _status_is(run.node, through, "RUNNING"), timeout=10)
            filler = fill(disk)
            full_at = time.monotonic()
            await wait_for(lambda: _disk_full_logged(run.node), timeout=30, interval=0.2)
            print(f"\nfirst 'disk is full' logged {time.monotonic() - full_at:.2f}s after filling")
            await let_time_pass(FULL)
            filler.unlink()
            freed = datetime.now(UTC)
            ended, code, rows = await settle_and_read(run, freed, [through], timeout=60)
        verdict, broken = _integrity(path)
    window, problems = tick_problems(rows, user_service, run.began, ended)
    full = [e for e in run.node.events() if "full" in json.dumps(e)]
    print(
        f"disk full: {len(full)} log lines naming it ({Counter(e['event'] for e in full)}); tick "
        f"fire times checked {window}; through {ended_as(rows, through)}; integrity {verdict}"
    )
    assert run.probe.unhealthy() == [], run.node.log_tail(40)
    assert code == 0, run.node.log_tail(40)
    assert problems == [], problems
    assert ended_as(rows, through) == ("SUCCESS", None)
    assert (verdict, broken) == ("ok", [])


def _disk_full_logged(node: Any) -> bool:
    return any("database or disk is full" in json.dumps(e) for e in node.events())
