"""The findings of the security review of issue 22, second part (S10, S11, S3, S4: ids,
readiness, the database at rest, idle connections), each shown fixed against the real
thing: a daemon on SQLite, a real redis-server, raw sockets."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import stat
from collections.abc import AsyncIterator, Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from textwrap import dedent
from typing import Any

import aiohttp
import pytest
from redis.asyncio import Redis
from sqlalchemy import event
from structlog.testing import capture_logs

from ecron.daemon import Daemon
from ecron.signing import callback_token
from tests.protocol_support import ended, run_once
from tests.support.daemon import DaemonFactory, task
from tests.support.redis_server import RedisServer, free_port
from tests.support.service import UserService, wait_for
from tests.test_queue import both_channels, counted, handled, send
from tests.test_security_findings import post_report, validate

#: A whole request, kept alive.
FULL_REQUEST = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"


@pytest.fixture
def database_url(tmp_path: Path) -> str:
    """These findings do not depend on the database: SQLite only."""
    return f"sqlite+aiosqlite:///{tmp_path / 'ecron.db'}"


# S10: long ids are refused before any lookup.


@pytest.fixture
async def redis_client(redis_server: RedisServer) -> AsyncIterator[Redis]:
    """A plain redis-py client on the test's server: what a user service would use."""
    redis = Redis.from_url(redis_server.url)
    yield redis
    await redis.aclose()


@contextmanager
def statements(daemon: Daemon) -> Iterator[list[str]]:
    """Every SQL statement the daemon's engines run meanwhile, with its parameters (an
    event hook of SQLAlchemy on the real engines)."""
    seen: list[str] = []

    def record(_c: Any, _cursor: Any, statement: str, parameters: Any, *_rest: Any) -> None:
        seen.append(f"{statement} {parameters!r}")

    engines = {daemon.store.engines.reader.sync_engine, daemon.store.engines.writer.sync_engine}
    for engine in engines:
        event.listen(engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        for engine in engines:
            event.remove(engine, "before_cursor_execute", record)


async def test_a_callback_about_an_id_over_100_characters_is_refused_before_any_lookup(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """A callback about an id over 100 characters answers 404 without reading the database
    about it, and so does a GET of an execution by such an id. A well-formed unknown id is
    looked up and answers 404 before its token is judged, and a known one with a wrong
    token 401 (PROTOCOL.md's order)."""
    long_id, unknown = "e" * 101, "0" * 36
    async with make_daemon([], public_url="http://ecron.test") as daemon:
        with statements(daemon) as seen:
            too_long, _ = await post_report(daemon, long_id, {"status": "RUNNING"}, "x")
            async with aiohttp.ClientSession() as session:
                url = f"http://127.0.0.1:{daemon.port}/api/v1/executions/{long_id}"
                async with session.get(url) as response:
                    got = response.status
            looked_up = [s for s in seen if long_id in s]
            forged, _ = await post_report(daemon, unknown, {"status": "RUNNING"}, "x" * 64)
            token = callback_token(daemon.callback_secret, unknown)
            missing, _ = await post_report(daemon, unknown, {"status": "RUNNING"}, token)
    assert looked_up == []
    assert (too_long, got, forged, missing) == (404, 404, 404, 404)


async def test_a_queue_message_with_a_3_mb_execution_id_is_refused_and_logged_cut_short(
    make_daemon: DaemonFactory,
    user_service: UserService,
    redis_server: RedisServer,
    redis_client: Redis,
) -> None:
    """A message whose execution_id is 3 MB long is acknowledged and counted unknown, and
    no log line quotes more than a short start of it."""
    async with both_channels(make_daemon, [], redis_server) as daemon:
        with capture_logs() as logs:
            message = await send(redis_client, "x" * 3_000_000, {"status": "SUCCESS"}, "t" * 64)
            await handled(redis_client, message)
        unknown = counted(daemon, "unknown")
    assert unknown == 1
    refused = [line for line in logs if line["event"] == "queue_message_refused"]
    assert len(refused) == 1
    assert max(len(repr(line)) for line in logs) < 2_000


# S11: what the open /readyz and config errors show.


async def test_readyz_says_what_is_wrong_without_hosts_or_error_text(
    make_daemon: DaemonFactory, tmp_path: Path
) -> None:
    """With a required queue whose Redis is not there, and then the SQLite file gone from
    under the daemon: /readyz (open to all) answers 503 naming "queue: unreachable" and
    "database: unreachable", and neither the Redis host and port nor the database's error
    text; the detail goes to the log."""
    port = free_port()
    queue = {"url": f"redis://127.0.0.1:{port}/0", "required": True}
    async with make_daemon([], queue=queue) as daemon:
        consumer = daemon.queue
        assert consumer is not None
        await wait_for(lambda: "not read yet" not in (consumer.problem or "not read yet"))
        with capture_logs() as logs:
            await database_gone(daemon, tmp_path / "ecron.db")
            try:
                async with aiohttp.ClientSession() as session:
                    url = f"http://127.0.0.1:{daemon.port}/readyz"
                    async with session.get(url) as response:
                        status, body = response.status, await response.json()
            finally:
                (tmp_path / "ecron.db").rmdir()
                (tmp_path / "ecron.db.away").rename(tmp_path / "ecron.db")
    assert status == 503
    assert "queue: unreachable" in body["problems"], body
    assert "database: unreachable" in body["problems"], body
    assert str(port) not in json.dumps(body) and "Error" not in json.dumps(body)
    assert any(line["event"] == "readiness_database_unreachable" for line in logs)


async def database_gone(daemon: Daemon, path: Path) -> None:
    """Close the daemon's connections and put a directory where its SQLite file was: no
    new connection can open it."""
    for engine in (daemon.store.engines.reader, daemon.store.engines.writer):
        await engine.dispose()
    replace_with_a_directory(path)


def replace_with_a_directory(path: Path) -> None:
    """Move the file ``path`` aside (``<path>.away``) and make a directory in its place."""
    path.rename(path.with_name(path.name + ".away"))
    path.mkdir()


def test_validate_quotes_no_password_of_a_url_in_a_task(tmp_path: Path) -> None:
    """A task URL with user:password@ that is wrong for another reason (its scheme) is
    quoted by ``ecron validate`` with its password as ***."""
    (tmp_path / "tasks").mkdir()
    (tmp_path / "ecron.yaml").write_text("")
    (tmp_path / "tasks" / "t.yaml").write_text(
        dedent("""\
        tasks:
          - name: t
            schedule: manual
            url: htp://bob:pw-in-url-1@svc/jobs
            batch_poll_url: "ftp://ann:pw-in-url-2@svc/batch"
        """)
    )
    code, printed = validate(tmp_path)
    assert code == 1
    assert "pw-in-url" not in printed, printed
    assert "htp://bob:***@svc/jobs" in printed, printed


# S3: the database at rest.


@contextmanager
def umask(mask: int) -> Iterator[None]:
    """The process's umask set to ``mask`` meanwhile (the usual 022: files readable by all)."""
    before = os.umask(mask)
    try:
        yield
    finally:
        os.umask(before)


async def test_the_sqlite_file_and_its_wal_and_shm_are_readable_by_their_owner_only(
    make_daemon: DaemonFactory, user_service: UserService, tmp_path: Path
) -> None:
    """Under umask 022, a daemon that creates its SQLite database and writes to it leaves
    ecron.db, ecron.db-wal and ecron.db-shm with mode 0600; a database file made readable
    by all before the start is made 0600 too."""
    user_service.duration = 0.05
    with umask(0o022):
        async with make_daemon([task("job", f"{user_service.url}/jobs/x")]) as daemon:
            await ended(daemon, await run_once(daemon, "job"))
            modes = database_modes(tmp_path)
        assert set(modes) == {"ecron.db", "ecron.db-wal", "ecron.db-shm"}, modes
        assert modes == dict.fromkeys(modes, "0o600"), modes
        (tmp_path / "ecron.db").chmod(0o644)
        async with make_daemon([]):
            assert database_modes(tmp_path)["ecron.db"] == "0o600"


def database_modes(directory: Path) -> dict[str, str]:
    """The permission bits of the SQLite file and its WAL and SHM in ``directory``."""
    names = ("ecron.db", "ecron.db-wal", "ecron.db-shm")
    paths = [directory / name for name in names if (directory / name).exists()]
    return {path.name: oct(stat.S_IMODE(path.stat().st_mode)) for path in paths}


async def test_a_tasks_notify_webhook_url_secret_and_headers_are_not_stored(
    make_daemon: DaemonFactory, user_service: UserService, tmp_path: Path
) -> None:
    """A task's own notify webhook (a Slack-style URL whose path is the secret, a signing
    secret, a header) is stored in the task row with the URL cut to its origin and the
    secret and header values as ***."""
    hook = {
        "url": "https://hooks.example:8443/services/T0/B0/path-is-secret?k=query-secret",
        "secret": "hook-signing-secret",
        "headers": {"X-Hook-Key": "hook-header-secret"},
    }
    spec = task("job", f"{user_service.url}/jobs/x", notify={"webhooks": [hook]})
    async with make_daemon([spec]) as daemon:
        stored = await daemon.store.get_task("job")
    assert stored is not None
    with closing(sqlite3.connect(tmp_path / "ecron.db")) as db:
        [(row,)] = db.execute("SELECT spec FROM task WHERE name = 'job'").fetchall()
    for value in ("path-is-secret", "query-secret", "hook-signing-secret", "hook-header-secret"):
        assert value not in row, row
    assert "https://hooks.example:8443/***" in row


# S4: idle and half-sent connections to the API are closed.


@pytest.mark.parametrize(
    "sent",
    [b"", b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: a", FULL_REQUEST],
    ids=["idle", "headers-half-sent", "idle-after-a-request"],
)
async def test_the_api_closes_idle_and_half_sent_connections_after_api_idle_timeout(
    make_daemon: DaemonFactory, sent: bytes
) -> None:
    """With api_idle_timeout 300ms, a connection that sends nothing, one that stops in the
    middle of its headers, and a kept-alive one after its answer are each closed by the
    daemon (the socket reads end of file) instead of being held for an hour."""
    async with make_daemon([], api_idle_timeout="300ms") as daemon:
        reader, writer = await asyncio.open_connection("127.0.0.1", daemon.port)
        try:
            writer.write(sent)
            await writer.drain()
            received = await asyncio.wait_for(reader.read(), timeout=10)
        finally:
            writer.close()
    if sent == FULL_REQUEST:
        assert received.startswith(b"HTTP/1.1 200") and b'"status": "ok"' in received
    else:
        assert received == b""
