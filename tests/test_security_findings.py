"""The findings of the security review of issue 22 (S3 to S11), each shown fixed against
the real thing: a daemon on SQLite, real aiohttp services on 127.0.0.1, raw sockets,
a real redis-server."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import stat
from collections.abc import AsyncIterator, Iterator
from contextlib import closing, contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from textwrap import dedent
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from click.testing import CliRunner
from redis.asyncio import Redis
from sqlalchemy import event
from structlog.testing import capture_logs

import ecron.cli.validate  # noqa: F401  (registers the command)
from ecron.cli import cli
from ecron.config.model import TaskSpec
from ecron.core import Execution, Status
from ecron.core.machine import RETRY_AFTER
from ecron.daemon import Daemon
from ecron.executor.http import classify
from ecron.signing import callback_token, signature, verify
from tests.conftest import DaemonFactory, task
from tests.protocol_support import ended, reply, run_once
from tests.support.faulty import answering as receiving
from tests.support.faulty import endless_body
from tests.support.redis_server import RedisServer, free_port
from tests.support.service import UserService, wait_for
from tests.test_queue import both_channels, counted, handled, send

SECRET = "s3cret"
#: A whole request, kept alive.
FULL_REQUEST = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"


@pytest.fixture
def database_url(tmp_path: Path) -> str:
    """These findings do not depend on the database: SQLite only."""
    return f"sqlite+aiosqlite:///{tmp_path / 'ecron.db'}"


# S6: the signature binds the execution id (v2).


async def test_a_captured_signed_trigger_replayed_under_another_execution_id_fails_v2(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """Every signed call carries v2 over "<t>.<METHOD>.<target>.<X-Ecron-Execution-Id>.<body>":
    the captured trigger verifies under its own execution id, and the same signature, path
    and body sent with another X-Ecron-Execution-Id does not."""
    user_service.duration = 0.05
    spec = task("job", f"{user_service.url}/jobs/x", secret=SECRET, body={"n": 1})
    async with make_daemon([spec]) as daemon:
        eid = await run_once(daemon, "job")
        await wait_for(lambda: user_service.calls_for(eid, "POST"), timeout=5)
    captured = user_service.calls_for(eid, "POST")[0]
    header = captured.headers["X-Ecron-Signature"]
    assert ",v2=" in header
    sent = captured.headers["X-Ecron-Execution-Id"]
    assert verify(SECRET, header, "POST", captured.path, captured.body, execution_id=sent)
    replayed = "0" * 26
    assert not verify(SECRET, header, "POST", captured.path, captured.body, execution_id=replayed)


def test_v2_is_the_hmac_of_time_method_target_execution_id_and_body() -> None:
    """v2=<hex HMAC-SHA256(secret, "<t>.<METHOD>.<target>.<eid>.<body>")>, beside v1; a call
    with no single execution id (a batch poll) signs an empty one."""
    import hashlib
    import hmac

    header = signature("k", "post", "/jobs/x", b"{}", 1700000000, execution_id="e1")
    v2 = hmac.new(b"k", b"1700000000.POST./jobs/x.e1.{}", hashlib.sha256).hexdigest()
    assert header.endswith(f",v2={v2}") and ",v1=" in header
    batch = signature("k", "GET", "/b?ids=a,b", b"", 1700000000)
    assert verify("k", batch, "GET", "/b?ids=a,b", b"", now=1700000000, execution_id="")


# S9: a malformed or huge Retry-After.


@pytest.mark.parametrize("value", ["²", "٣", "1e9", "-5", "12 34", "Fri, 99 Dec 9999"])
async def test_a_malformed_retry_after_is_ignored_and_the_trigger_is_retried(
    make_daemon: DaemonFactory, user_service: UserService, value: str
) -> None:
    """A 429 whose Retry-After is neither ASCII digits nor an HTTP date (a superscript two,
    an Arabic three, an exponent, a sign, a broken date) neither raises nor holds the
    service back: it is a plain 429, retried under trigger_retry, and the execution runs to
    its end."""

    async def refuse(request: web.Request) -> web.StreamResponse:
        return web.json_response({}, status=429, headers={"Retry-After": value})

    user_service.script["POST"] = [refuse]
    user_service.duration = 0.05
    retry = {"attempts": 3, "backoff": "10ms", "max_backoff": "10ms"}
    spec = task("job", f"{user_service.url}/jobs/x", trigger_retry=retry)
    async with make_daemon([spec]) as daemon:
        eid = await run_once(daemon, "job")
        done = await ended(daemon, eid)
    assert done.status is Status.SUCCESS
    assert user_service.methods_for(eid)[:2] == ["POST", "POST"]


def test_a_retry_after_is_capped_at_one_hour() -> None:
    """Seconds or an HTTP date further than MAX_RETRY_AFTER (an hour) away wait an hour."""
    now = datetime(2026, 1, 1, tzinfo=UTC)
    for far in ("99999999", "9" * 400):
        answer = classify(429, b"", False, {"Retry-After": far}, lambda: now)
        assert answer.retry_after == 3600.0
    date = {"Retry-After": "Fri, 31 Dec 9999 23:59:59 GMT"}
    assert classify(503, b"", False, date, lambda: now).retry_after == 3600.0
    assert classify(503, b"", False, {"Retry-After": "120"}, lambda: now).retry_after == 120.0


async def test_a_retry_after_of_400_digits_holds_the_service_back_for_an_hour_at_most(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """Retry-After: 400 nines is digits, so back-pressure, capped at an hour: the trigger
    does not raise and is not sent again; the execution waits, to be triggered again
    within the hour."""

    async def refuse(request: web.Request) -> web.StreamResponse:
        return web.json_response({}, status=429, headers={"Retry-After": "9" * 400})

    user_service.behaviour = refuse
    spec = task("job", f"{user_service.url}/jobs/x")
    async with make_daemon([spec]) as daemon:
        eid = await run_once(daemon, "job")

        async def held() -> Execution | None:
            execution = await daemon.store.get_execution(eid)
            waiting = execution is not None and execution.waiting_for == RETRY_AFTER
            return execution if waiting else None

        execution = await wait_for(held, timeout=5)
    assert execution.not_before is not None
    assert execution.not_before <= datetime.now(UTC) + timedelta(hours=1)
    assert user_service.methods_for(eid) == ["POST"]


# S5: alert webhooks follow no redirect and read a bounded answer.


async def test_a_webhook_that_redirects_is_a_failed_delivery_and_the_target_gets_nothing(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """A webhook answering 307 to another URL is not followed: the other URL receives
    neither the alert nor its headers and signature, and the delivery counts as failed."""
    stolen: list[dict[str, str]] = []

    async def redirect(_request: web.Request) -> web.StreamResponse:
        return web.Response(status=307, headers={"Location": "/stolen"})

    async def steal(request: web.Request) -> web.StreamResponse:
        stolen.append(dict(request.headers))
        return web.Response(status=204)

    async with receiving({"alerts": redirect, "stolen": steal}) as base:
        hook = {"url": f"{base}/alerts", "secret": "hook-secret", "headers": {"X-Key": "k"}}
        hooks = {"webhooks": [hook], "retry": {"attempts": 1}}
        async with make_daemon([task("a", f"{user_service.url}/jobs/x")], notify=hooks) as daemon:
            daemon.notifier.event("execution_failed", "a", daemon.clock.now(), reason="test")
            await wait_for(lambda: alerts_counted(daemon, "failed") or stolen, timeout=10)
    assert stolen == []
    assert alerts_counted(daemon, "failed") == 1


async def test_a_webhook_answer_is_read_up_to_a_cap_not_to_its_end(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """A receiver that answers 200 with a body that never ends costs a bounded read: the
    delivery ends (sent, the receiver said 2xx) long before the webhook's timeout."""
    async with receiving({"alerts": endless_body()}) as base:
        hooks = {
            "webhooks": [{"url": f"{base}/alerts", "timeout": "60s"}],
            "retry": {"attempts": 1},
        }
        async with make_daemon([task("a", f"{user_service.url}/jobs/x")], notify=hooks) as daemon:
            daemon.notifier.event("execution_failed", "a", daemon.clock.now(), reason="test")
            await wait_for(lambda: alerts_counted(daemon, "sent"), timeout=10)


def alerts_counted(daemon: Daemon, outcome: str) -> float:
    """Alerts of the daemon counted with ``outcome``."""
    labels = {"event": "execution_failed", "outcome": outcome}
    return daemon.metrics.registry.get_sample_value("ecron_alerts_total", labels) or 0.0


# S8: header names and values that would split a request.


def validate(directory: Path, environ: dict[str, str] | None = None) -> tuple[int, str]:
    """``ecron validate -c DIR``: its exit code and everything it printed."""
    result = CliRunner().invoke(cli, ["validate", "-c", str(directory)], env=environ or {})
    return result.exit_code, result.stdout + result.stderr


def test_validate_refuses_header_names_and_values_with_cr_lf_or_nul(tmp_path: Path) -> None:
    """A header value holding CR, LF or NUL (written in YAML, or brought in by ${VAR}), or a
    name that is not an HTTP token, in a task, a step or a webhook, is a config error naming
    the file, the task and the field, and quoting no value (header values are secrets)."""
    (tmp_path / "tasks").mkdir()
    (tmp_path / "ecron.yaml").write_text(
        "notify:\n  webhooks:\n    - {url: 'http://h/a', headers: {X-Hook: \"v\\nX-Evil: 1\"}}\n"
    )
    (tmp_path / "tasks" / "t.yaml").write_text(
        dedent("""\
        tasks:
          - name: t
            schedule: manual
            headers: {X-Crlf: "secret-a\\r\\nX-Evil: 1", X-Env: "${SPLIT}", "Bad Name": ok}
            steps: [{name: a, url: "http://s/a", headers: {X-Nul: "secret-b\\u0000"}}]
        """)
    )
    code, printed = validate(tmp_path, {"SPLIT": "secret-c\rX-Evil: 1"})
    assert code == 1, printed
    assert "ecron.yaml: field 'notify.webhooks[1].headers.X-Hook'" in printed, printed
    for field in ("headers.X-Crlf", "headers.X-Env", "headers.Bad Name", "steps[1].headers.X-Nul"):
        assert f"tasks/t.yaml: task 't': field '{field}'" in printed, (field, printed)
    assert "secret-" not in printed and "X-Evil" not in printed


# S7: a step's callback is answered with that step alone.


async def post_report(
    daemon: Daemon, remote_id: str, body: dict[str, Any], token: str
) -> tuple[int, Any]:
    """POST a callback report about ``remote_id`` with ``token``, as a user service would."""
    url = f"http://127.0.0.1:{daemon.port}/api/v1/executions/{remote_id}/report"
    headers = {"Authorization": f"Bearer {token}"}
    async with (
        aiohttp.ClientSession() as session,
        session.post(url, json=body, headers=headers) as response,
    ):
        return response.status, await response.json()


async def test_a_steps_callback_is_answered_with_that_steps_own_status_only(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """Step 1 ended SUCCESS with a message and a result of its own; step 2's service
    reports RUNNING by callback: the answer (200), and the 409 once step 2 has ended, show
    step 2's status, progress and message and nothing of step 1."""
    user_service.durations = {"one": 0.0, "two": 3600}
    user_service.script["POST"] = [
        reply(200, {"status": "SUCCESS", "message": "one-private", "result": {"k": "one-only"}})
    ]
    spec = TaskSpec.model_validate(
        {
            "name": "two-steps",
            "schedule": "manual",
            "poll_interval": "1h",
            "steps": [
                {"name": "first", "url": f"{user_service.url}/jobs/one"},
                {"name": "second", "url": f"{user_service.url}/jobs/two"},
            ],
        }
    )
    async with make_daemon([spec], public_url="http://ecron.test") as daemon:
        eid = await run_once(daemon, "two-steps")
        second = f"{eid}.2"
        await wait_for(lambda: user_service.calls_for(second, "POST"), timeout=5)
        token = callback_token(daemon.callback_secret, second)
        report = {"status": "RUNNING", "progress": 40, "message": "two at 40"}
        status, answer = await post_report(daemon, second, report, token)
        done, _ = await post_report(daemon, second, {"status": "SUCCESS"}, token)
        late, conflict = await post_report(daemon, second, {"status": "FAILED"}, token)
    assert (status, done, late) == (200, 200, 409)
    for shown in (answer, conflict):
        assert "one-private" not in json.dumps(shown) and "one-only" not in json.dumps(shown)
    assert (answer["status"], answer["progress"], answer["message"]) == ("RUNNING", 40, "two at 40")
    assert [step["remote_id"] for step in answer["steps"]] == [second]
    assert [step["remote_id"] for step in conflict["detail"]["steps"]] == [second]


# S10: long ids are refused before any lookup; the callback token before the database.


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


async def test_a_callback_checks_id_length_and_token_before_reading_the_database(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """A callback about an id over 100 characters answers 404 and one with a missing or
    wrong token 401, neither reading the database about that id; so does a GET of an
    execution by such an id. With the right token, an unknown id is looked up: 404."""
    long_id, unknown = "e" * 101, "0" * 36
    async with make_daemon([], public_url="http://ecron.test") as daemon:
        with statements(daemon) as seen:
            too_long, _ = await post_report(daemon, long_id, {"status": "RUNNING"}, "x")
            forged, _ = await post_report(daemon, unknown, {"status": "RUNNING"}, "x" * 64)
            async with aiohttp.ClientSession() as session:
                url = f"http://127.0.0.1:{daemon.port}/api/v1/executions/{long_id}"
                async with session.get(url) as response:
                    got = response.status
            looked_up = [s for s in seen if long_id in s or unknown in s]
            token = callback_token(daemon.callback_secret, unknown)
            missing, _ = await post_report(daemon, unknown, {"status": "RUNNING"}, token)
    assert looked_up == []
    assert (too_long, forged, got, missing) == (404, 401, 404, 404)


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
