"""PROTOCOL.md, "Reports through a message queue (Redis Streams)": the callback tests'
report sequences through the stream give the same results; bad messages are acknowledged
and counted; a dead node's pending messages are claimed; Redis going away is waited out.
Against a real redis-server started per test."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager, closing
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from redis.asyncio import Redis

import ecron.queue as queue_module
from ecron.config.model import TaskSpec
from ecron.config.queue import QueueSettings
from ecron.core import Reason, Status
from ecron.daemon import Daemon
from ecron.errors import ConfigError
from ecron.queue import QueueConsumer, connect
from ecron.signing import callback_token
from tests.protocol_support import ended, run_once
from tests.support.daemon import DaemonFactory, task
from tests.support.redis_server import RedisServer, free_port
from tests.support.rig import Rig, rig
from tests.support.service import UserService, wait_for
from tests.test_callbacks import push, token_of

STREAM, GROUP = "reports", "ecron"
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
async def client(redis_server: RedisServer) -> AsyncIterator[Redis]:
    """A plain redis-py client on the test's server: what a user service would use."""
    redis = Redis.from_url(redis_server.url)
    yield redis
    await redis.aclose()


def queue_of(server: RedisServer, **keys: Any) -> dict[str, Any]:
    """The daemon's ``queue`` settings for ``server`` (claim_idle short, for the tests)."""
    return {"url": server.url, "stream": STREAM, "group": GROUP, "claim_idle": "200ms", **keys}


def both_channels(
    make_daemon: DaemonFactory, specs: list[TaskSpec], server: RedisServer, **settings: Any
) -> AbstractAsyncContextManager[Daemon]:
    """A daemon that takes callbacks (its own API is its public_url) and reads the queue."""
    port = free_port()
    return make_daemon(
        specs,
        listen=f"127.0.0.1:{port}",
        public_url=f"http://127.0.0.1:{port}",
        queue=queue_of(server, **settings),
    )


def _id(message_id: bytes | str) -> tuple[int, int]:
    text = message_id.decode() if isinstance(message_id, bytes) else message_id
    milliseconds, _, sequence = text.partition("-")
    return int(milliseconds), int(sequence or 0)


async def send(client: Redis, remote: str | None, report: Any, token: str | None) -> bytes:
    """XADD one report message, as a user service would (a str report is sent as it is)."""
    fields: dict[str, str] = {}
    if remote is not None:
        fields["execution_id"] = remote
    if token is not None:
        fields["token"] = token
    if report is not None:
        fields["report"] = report if isinstance(report, str) else json.dumps(report)
    message_id: bytes = await client.xadd(STREAM, fields)  # type: ignore[arg-type]
    return message_id


async def handled(client: Redis, message_id: bytes, timeout: float = 5.0) -> None:
    """Wait until the group has read ``message_id`` and nothing is pending (it was acked)."""

    async def done() -> bool:
        groups: Any = await client.xinfo_groups(STREAM)
        group = next((g for g in groups if g["name"] in (GROUP, GROUP.encode())), None)
        return (
            group is not None
            and _id(group["last-delivered-id"]) >= _id(message_id)
            and group["pending"] == 0
        )

    await wait_for(done, timeout=timeout)


async def pending(client: Redis) -> int:
    """How many messages of the stream are read and not acknowledged."""
    summary: Any = await client.xpending(STREAM, GROUP)
    return int(summary["pending"])


def nothing_pending(client: Redis) -> Callable[[], Awaitable[bool]]:
    """For ``wait_for``: True once no message of the stream is pending."""

    async def check() -> bool:
        return await pending(client) == 0

    return check


def counted(daemon: Daemon, outcome: str) -> float:
    """``ecron_queue_messages_total{outcome}`` of ``daemon``."""
    value = daemon.metrics.registry.get_sample_value(
        "ecron_queue_messages_total", {"outcome": outcome}
    )
    return value or 0.0


Push = Callable[[Daemon, str, Any, str], Awaitable[None]]


@pytest.fixture(params=["callback", "queue"])
def channel(request: pytest.FixtureRequest, client: Redis) -> Push:
    """Push one report and return once it was handled: POSTed to the callback endpoint, or
    XADDed to the stream and acknowledged."""

    async def by_callback(daemon: Daemon, remote: str, body: Any, token: str) -> None:
        await push(daemon, remote, body, token)

    async def by_queue(daemon: Daemon, remote: str, body: Any, token: str) -> None:
        await handled(client, await send(client, remote, body, token))

    return by_callback if request.param == "callback" else by_queue


async def stored(daemon: Daemon, eid: str) -> Any:
    execution = await daemon.store.get_execution(eid)
    assert execution is not None
    return execution


async def running(daemon: Daemon, eid: str) -> Any:
    """Wait until execution ``eid`` is RUNNING (its trigger's answer recorded); it."""

    async def found() -> Any:
        execution = await daemon.store.get_execution(eid)
        return execution if execution is not None and execution.status is Status.RUNNING else None

    return await wait_for(found, timeout=5)


# -- the callback tests' sequences, through either channel -------------------------------


async def test_running_then_success_then_late_reports_give_the_same_results_on_either_channel(
    channel: Push, make_daemon: DaemonFactory, user_service: UserService, redis_server: RedisServer
) -> None:
    """RUNNING 60% moves the execution; SUCCESS with a result ends it; a FAILED and a RUNNING
    after that change nothing: the same through a callback and through the stream."""
    user_service.duration = 3600
    spec = task("job", f"{user_service.url}/jobs/x", poll_interval="1h")
    async with both_channels(make_daemon, [spec], redis_server) as daemon:
        eid = await run_once(daemon, "job")
        await wait_for(lambda: user_service.calls_for(eid), timeout=5)
        token = token_of(user_service, eid)
        await channel(daemon, eid, {"status": "running", "progress": 60}, token)
        running = await stored(daemon, eid)
        await channel(daemon, eid, {"status": "SUCCESS", "result": [1]}, token)
        succeeded = await stored(daemon, eid)
        await channel(daemon, eid, {"status": "FAILED"}, token)
        await channel(daemon, eid, {"status": "RUNNING", "progress": 5}, token)
        after = await stored(daemon, eid)
    assert (running.status, running.progress) == (Status.RUNNING, 60)
    assert (succeeded.status, succeeded.result) == (Status.SUCCESS, [1])
    assert after == succeeded
    assert "GET" not in user_service.methods_for(eid)


async def test_a_failed_report_ends_the_execution_remote_failed_on_either_channel(
    channel: Push, make_daemon: DaemonFactory, user_service: UserService, redis_server: RedisServer
) -> None:
    """RUNNING 10%, then FAILED with a message: FAILED remote_failed with that message."""
    user_service.duration = 3600
    spec = task("job", f"{user_service.url}/jobs/x", poll_interval="1h")
    async with both_channels(make_daemon, [spec], redis_server) as daemon:
        eid = await run_once(daemon, "job")
        await wait_for(lambda: user_service.calls_for(eid), timeout=5)
        token = token_of(user_service, eid)
        await channel(daemon, eid, {"status": "RUNNING", "progress": 10}, token)
        await channel(daemon, eid, {"status": "FAILED", "message": "disk full"}, token)
        execution = await ended(daemon, eid)
    assert (execution.status, execution.reason) == (Status.FAILED, Reason.REMOTE_FAILED)
    assert execution.message == "disk full"


async def test_a_steps_remote_id_moves_that_step_on_either_channel(
    channel: Push, make_daemon: DaemonFactory, user_service: UserService, redis_server: RedisServer
) -> None:
    """Reports about ``<eid>.1`` then ``<eid>.2``, each with its own token, end each step
    SUCCESS and the execution with them; step 1's token does not open step 2."""
    user_service.duration = 3600
    url = f"{user_service.url}/jobs/x"
    spec = TaskSpec.model_validate(
        {
            "name": "etl",
            "schedule": "manual",
            "poll_interval": "1h",
            "steps": [{"name": "fetch", "url": url}, {"name": "load", "url": url}],
        }
    )
    async with both_channels(make_daemon, [spec], redis_server) as daemon:
        eid = await run_once(daemon, "etl")
        first, second = f"{eid}.1", f"{eid}.2"
        await wait_for(lambda: user_service.calls_for(first), timeout=5)
        await channel(daemon, first, {"status": "SUCCESS"}, token_of(user_service, first))
        await wait_for(lambda: user_service.calls_for(second), timeout=5)

        async def second_running() -> bool:  # the trigger's answer written, not only sent
            steps = (await stored(daemon, eid)).steps
            return steps[1].status is Status.RUNNING

        await wait_for(second_running, timeout=5)
        await channel(daemon, second, {"status": "SUCCESS"}, token_of(user_service, first))
        refused = await stored(daemon, eid)
        await channel(daemon, second, {"status": "SUCCESS"}, token_of(user_service, second))
        execution = await ended(daemon, eid)
    assert [s.status for s in refused.steps] == [Status.SUCCESS, Status.RUNNING]
    assert execution.status is Status.SUCCESS
    assert [s.status for s in execution.steps] == [Status.SUCCESS, Status.SUCCESS]


async def test_a_report_may_overtake_the_trigger_answer_while_pending_on_either_channel(
    channel: Push, make_daemon: DaemonFactory, user_service: UserService, redis_server: RedisServer
) -> None:
    """RUNNING 30% pushed before the trigger is answered moves the PENDING execution; the
    trigger answer that follows does not undo it, and the job runs to SUCCESS."""
    user_service.duration = 0.2
    released = asyncio.Event()

    async def held(request: web.Request) -> web.StreamResponse:
        await released.wait()
        return await user_service.start(request.headers["X-Ecron-Execution-Id"])

    user_service.script["POST"] = [held]
    spec = task("job", f"{user_service.url}/jobs/x")
    async with both_channels(make_daemon, [spec], redis_server) as daemon:
        eid = await run_once(daemon, "job")
        await wait_for(lambda: user_service.calls_for(eid), timeout=5)
        before = await stored(daemon, eid)
        await channel(
            daemon, eid, {"status": "RUNNING", "progress": 30}, token_of(user_service, eid)
        )
        overtaken = await stored(daemon, eid)
        released.set()
        execution = await ended(daemon, eid)
    assert before.status is Status.PENDING
    assert (overtaken.status, overtaken.progress) == (Status.RUNNING, 30)
    assert execution.status is Status.SUCCESS
    assert user_service.methods_for(eid).count("POST") == 1


# -- the queue's own rules --------------------------------------------------------------


async def test_duplicated_and_out_of_order_messages_change_nothing_after_a_final_status(
    make_daemon: DaemonFactory, user_service: UserService, redis_server: RedisServer, client: Redis
) -> None:
    """After SUCCESS, the same SUCCESS again, an older RUNNING and a FAILED are acknowledged
    and counted too_late; the execution is as the first SUCCESS left it."""
    user_service.duration = 3600
    spec = task("job", f"{user_service.url}/jobs/x", poll_interval="1h")
    async with both_channels(make_daemon, [spec], redis_server) as daemon:
        eid = await run_once(daemon, "job")
        await wait_for(lambda: user_service.calls_for(eid), timeout=5)
        token = token_of(user_service, eid)
        await handled(client, await send(client, eid, {"status": "SUCCESS", "result": 7}, token))
        first = await stored(daemon, eid)
        for report in (
            {"status": "SUCCESS", "result": 8},
            {"status": "RUNNING"},
            {"status": "FAILED"},
        ):
            last = await send(client, eid, report, token)
        await handled(client, last)
        after = await stored(daemon, eid)
        too_late, applied = counted(daemon, "too_late"), counted(daemon, "applied")
    assert (first.status, first.result) == (Status.SUCCESS, 7)
    assert after == first
    assert (too_late, applied) == (3, 1)


async def test_a_forged_token_is_refused_counted_and_acknowledged(
    make_daemon: DaemonFactory, user_service: UserService, redis_server: RedisServer, client: Redis
) -> None:
    """Execution A's token on a message about B, and a message with no token: both refused
    (unauthorized), acknowledged (nothing pending), B unchanged."""
    user_service.duration = 3600
    spec = task("job", f"{user_service.url}/jobs/x", concurrency="allow", poll_interval="1h")
    async with both_channels(make_daemon, [spec], redis_server) as daemon:
        a, b = await run_once(daemon, "job"), await run_once(daemon, "job")
        await running(daemon, a)
        before = await running(daemon, b)
        await send(client, b, {"status": "SUCCESS"}, token_of(user_service, a))
        await handled(client, await send(client, b, {"status": "SUCCESS"}, None))
        after = await stored(daemon, b)
        refused, left = counted(daemon, "unauthorized"), await pending(client)
    assert after == before and after.status is not Status.SUCCESS
    assert (refused, left) == (2, 0)


async def test_malformed_and_unknown_messages_are_acknowledged_counted_and_logged(
    make_daemon: DaemonFactory, user_service: UserService, redis_server: RedisServer, client: Redis
) -> None:
    """No execution_id, a report that is not JSON, one that is not a report, one saying
    UNKNOWN, one over 1 MiB (malformed), and an id ecron does not know (unknown): each
    acknowledged and counted, the execution unchanged, and a warning naming the id but
    never the token."""
    from structlog.testing import capture_logs

    user_service.duration = 3600
    spec = task("job", f"{user_service.url}/jobs/x", poll_interval="1h")
    async with both_channels(make_daemon, [spec], redis_server) as daemon:
        eid = await run_once(daemon, "job")
        await wait_for(lambda: user_service.calls_for(eid), timeout=5)
        token = token_of(user_service, eid)
        before = await running(daemon, eid)
        with capture_logs() as logs:
            await send(client, None, {"status": "SUCCESS"}, token)
            await send(client, eid, "<html>", token)
            await send(client, eid, {"status": "DONE"}, token)
            await send(client, eid, {"status": "UNKNOWN"}, token)
            huge = {"status": "SUCCESS", "message": "x" * (1024 * 1024)}
            await send(client, eid, huge, token)
            unknown = callback_token(daemon.callback_secret, "no-such-id")  # 404 whatever the token
            await handled(client, await send(client, "no-such-id", {"status": "SUCCESS"}, unknown))
        after = await stored(daemon, eid)
        malformed, unknown = counted(daemon, "malformed"), counted(daemon, "unknown")
    assert after == before
    assert (malformed, unknown) == (5, 1)
    refusals = [line for line in logs if line["event"] == "queue_message_refused"]
    assert [line["outcome"] for line in refusals] == ["malformed"] * 5 + ["unknown"]
    assert [line["execution_id"] for line in refusals][1:] == [eid] * 4 + ["no-such-id"]
    assert "over the limit of 1048576" in refusals[4]["why"]
    assert all(line["log_level"] == "warning" for line in refusals)
    assert token not in repr(logs)


async def test_queue_mode_is_never_polled_and_silence_past_the_heartbeat_ends_it_unreachable(
    database_url: str, user_service: UserService, redis_server: RedisServer, client: Redis
) -> None:
    """mode: queue, heartbeat_timeout 1m, on a clock the test moves: a RUNNING 40% message
    at +45 s moves the heartbeat on, so at +65 s (past the trigger's +60 s) it is still
    RUNNING; 61 s of silence after the message end it FAILED unreachable, at +106 s. No
    GET is ever sent."""
    user_service.duration = 3600
    spec = task("job", f"{user_service.url}/jobs/x", mode="queue", heartbeat_timeout="1m")
    async with rig(database_url, [spec], T0) as r, consuming(r, redis_server):
        execution, _ = await r.commands.run_now("job")
        eid = execution.eid
        await wait_for(lambda: r.status_is(eid, Status.RUNNING), timeout=5)
        started = r.clock.now()
        r.clock.advance(timedelta(seconds=45))
        token = callback_token("test", eid)
        await handled(client, await send(client, eid, {"status": "RUNNING", "progress": 40}, token))
        r.clock.set(started + timedelta(seconds=65))
        r.engine.wake()
        await wait_for(lambda: r.engine.settled(r.clock.now()), timeout=5)
        alive = await r.store.get_execution(eid)
        r.clock.set(started + timedelta(seconds=106))
        r.engine.wake()
        await wait_for(lambda: r.status_is(eid, Status.FAILED), timeout=5)
        failed = await r.store.get_execution(eid)
    assert alive is not None and (alive.status, alive.progress) == (Status.RUNNING, 40)
    assert failed is not None and failed.reason is Reason.UNREACHABLE
    assert failed.finished_at is not None
    assert failed.finished_at >= started + timedelta(seconds=105)
    assert user_service.methods_for(eid) == ["POST"]


@asynccontextmanager
async def consuming(r: Rig, server: RedisServer, **keys: Any) -> AsyncIterator[QueueConsumer]:
    """A queue consumer on a rig's parts (the rig's callback secret is ``test``), running
    and joined to the group (which it creates: a test may ask about the group at once);
    ``keys``: queue settings other than the tests' defaults."""
    settings = QueueSettings.model_validate(queue_of(server, **keys))
    consumer = QueueConsumer(
        settings=settings,
        client=connect(settings),
        store=r.store,
        commands=r.commands,
        secret=lambda: "test",
        metrics=r.parts.metrics,
        node_id="n1",
    )
    running = asyncio.create_task(consumer.run())
    try:
        await wait_for(lambda: consumer.problem is None or running.done(), timeout=5)
        yield consumer
    finally:
        consumer.stop()
        await asyncio.wait_for(running, 5)
        await consumer.client.aclose()


async def test_messages_a_dead_node_read_and_never_acknowledged_are_claimed_by_another(
    make_daemon: DaemonFactory, user_service: UserService, redis_server: RedisServer, client: Redis
) -> None:
    """Node ``dead-node`` read a SUCCESS message (it is pending under its name) and died;
    another node claims it once idle for claim_idle (200ms), applies and acknowledges it."""
    user_service.duration = 3600
    spec = task("job", f"{user_service.url}/jobs/x", poll_interval="1h")
    async with make_daemon([spec], secret="shared-secret") as first:
        eid = await run_once(first, "job")
        await wait_for(lambda: user_service.calls_for(eid), timeout=5)
    await client.xgroup_create(STREAM, GROUP, id="0", mkstream=True)
    report = {"status": "SUCCESS", "message": "from the stream"}
    await send(client, eid, report, callback_token("shared-secret", eid))
    read: Any = await client.xreadgroup(GROUP, "dead-node", {STREAM: ">"}, count=10)
    assert len(read[0][1]) == 1 and await pending(client) == 1
    queue = queue_of(redis_server)
    async with make_daemon([spec], secret="shared-secret", queue=queue) as second:
        execution = await ended(second, eid)
        await wait_for(nothing_pending(client), timeout=5)
        applied = counted(second, "applied")
    assert (execution.status, execution.message) == (Status.SUCCESS, "from the stream")
    assert applied == 1 and await pending(client) == 0


async def readiness(daemon: Daemon) -> tuple[int, Any]:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{daemon.port}/readyz") as response,
    ):
        return response.status, await response.json()


@pytest.mark.parametrize("required", [True, False])
async def test_redis_going_away_is_waited_out_and_shows_in_readyz_only_when_required(
    required: bool,
    make_daemon: DaemonFactory,
    user_service: UserService,
    redis_server: RedisServer,
) -> None:
    """Redis killed: the consumer notices; /readyz answers 503 naming the queue when it is
    required, 200 otherwise. Redis back (empty): the group is made again and a report sent
    then is applied; /readyz is 200."""
    user_service.duration = 3600
    spec = task("job", f"{user_service.url}/jobs/x", poll_interval="1h")
    async with both_channels(make_daemon, [spec], redis_server, required=required) as daemon:
        assert daemon.queue is not None
        consumer = daemon.queue
        eid = await run_once(daemon, "job")
        await wait_for(lambda: user_service.calls_for(eid), timeout=5)
        await wait_for(lambda: consumer.problem is None, timeout=5)
        ready = await readiness(daemon)
        redis_server.stop()
        await wait_for(lambda: consumer.problem is not None, timeout=5)
        away = await readiness(daemon)
        redis_server.start()
        await wait_for(lambda: consumer.problem is None, timeout=10)
        back = await readiness(daemon)
        client = Redis.from_url(redis_server.url)
        try:
            token = token_of(user_service, eid)
            await handled(client, await send(client, eid, {"status": "SUCCESS"}, token))
        finally:
            await client.aclose()
        execution = await stored(daemon, eid)
    assert ready[0] == 200 and back[0] == 200
    if required:
        assert away[0] == 503
        assert any(problem.startswith("queue: ") for problem in away[1]["problems"])
    else:
        assert away[0] == 200
    assert execution.status is Status.SUCCESS


async def test_a_queue_without_redis_py_fails_at_start_with_one_line(
    make_daemon: DaemonFactory, redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With redis-py not importable, a daemon with a queue does not start: one line says
    what to install."""
    for name in [n for n in sys.modules if n == "redis" or n.startswith("redis.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.delitem(sys.modules, "ecron.queue")
    monkeypatch.setitem(sys.modules, "redis", None)
    with pytest.raises(ConfigError) as raised:
        async with make_daemon([], queue=queue_of(redis_server)):
            pass
    assert str(raised.value) == "queue: needs redis-py: pip install 'ecron[redis]'"


async def test_a_message_that_cannot_be_handled_stays_pending_is_retried_then_dropped(
    tmp_path: Path, user_service: UserService, redis_server: RedisServer, client: Redis
) -> None:
    """A real database fault (another connection renames the execution table away): a
    message about a RUNNING execution is not acknowledged and is delivered again after
    claim_idle; once the table is back it is applied. A message that keeps failing is
    delivered MAX_DELIVERIES times, then acknowledged and counted ``failed``, the execution
    unchanged."""
    path = tmp_path / "ecron.db"
    user_service.duration = 3600
    spec = task("job", f"{user_service.url}/jobs/x")
    async with rig(f"sqlite+aiosqlite:///{path}", [spec], T0) as r:
        execution, _ = await r.commands.run_now("job")
        eid, token = execution.eid, callback_token("test", execution.eid)
        await wait_for(lambda: r.status_is(eid, Status.RUNNING), timeout=5)
        async with consuming(r, redis_server):
            rename(path, "execution", "execution_away")
            await send(client, eid, {"status": "RUNNING", "progress": 30}, token)
            await wait_for(lambda: delivered(client, at_least=2), timeout=5)
            rename(path, "execution_away", "execution")
            await wait_for(nothing_pending(client), timeout=5)
            applied = await r.store.get_execution(eid)

            rename(path, "execution", "execution_away")
            await send(client, eid, {"status": "SUCCESS"}, token)
            await wait_for(nothing_pending(client), timeout=10)
            rename(path, "execution_away", "execution")
            after = await r.store.get_execution(eid)
            outcomes = {name: rig_count(r, name) for name in ("applied", "failed")}
    assert applied is not None and (applied.status, applied.progress) == (Status.RUNNING, 30)
    assert after is not None and (after.status, after.progress) == (Status.RUNNING, 30)
    assert outcomes == {"applied": 1, "failed": 1}


def rename(path: Path, old: str, new: str) -> None:
    """Rename a table of the SQLite file from a connection of its own (ecron's see it)."""
    with closing(sqlite3.connect(path, timeout=10)) as db:
        db.execute(f"ALTER TABLE {old} RENAME TO {new}")
        db.commit()


async def delivered(client: Redis, *, at_least: int) -> bool:
    """True once the one pending message was delivered ``at_least`` times."""
    found: Any = await client.xpending_range(STREAM, GROUP, min="-", max="+", count=1)
    return bool(found) and int(found[0]["times_delivered"]) >= at_least


def rig_count(r: Rig, outcome: str) -> float:
    """``ecron_queue_messages_total{outcome}`` of a rig's consumer (it counts in the rig's
    metrics)."""
    value = r.parts.metrics.registry.get_sample_value(
        "ecron_queue_messages_total", {"outcome": outcome}
    )
    return value or 0.0


async def test_consumers_of_gone_nodes_are_deleted_from_the_group_unless_they_hold_messages(
    database_url: str,
    user_service: UserService,
    redis_server: RedisServer,
    client: Redis,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Restarts under ``node_id: auto`` leave consumers behind: one that holds no message and
    read nothing for FORGET_AFTER (here 0 s) is deleted by the live node's sweep; one that
    still holds a message (not yet claimed: claim_idle 1h) is kept, and so is the node."""
    monkeypatch.setattr(queue_module, "FORGET_AFTER", 0.0)
    await client.xgroup_create(STREAM, GROUP, id="0", mkstream=True)
    await client.xgroup_createconsumer(STREAM, GROUP, "gone-empty")
    await send(client, "nobody", {"status": "RUNNING"}, "t")
    await client.xreadgroup(GROUP, "gone-holding", {STREAM: ">"}, count=1)

    async def swept() -> bool:
        return await consumer_names(client) == {"gone-holding", "n1"}

    spec = task("job", f"{user_service.url}/jobs/x")
    async with (
        rig(database_url, [spec], T0) as r,
        consuming(r, redis_server, claim_idle="1h"),
    ):
        await wait_for(swept, timeout=5)
    assert await pending(client) == 1


async def consumer_names(client: Redis) -> set[str]:
    """The names of the group's consumers."""
    consumers: Any = await client.xinfo_consumers(STREAM, GROUP)
    return {c["name"].decode() if isinstance(c["name"], bytes) else c["name"] for c in consumers}
