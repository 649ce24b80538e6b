"""PROTOCOL.md, "Reports through a message queue": a node SIGKILLed while report messages
it had read are pending (not acknowledged) leaves them to another node, which claims them
after ``claim_idle`` (``XAUTOCLAIM``) and applies them once. Real ``ecron run`` processes,
a real redis-server and a real user service on 127.0.0.1.

The messages are held pending under the node deterministically, with real parts: another
connection holds the database's write lock (SQLite's ``BEGIN IMMEDIATE``; on PostgreSQL a
``SELECT ... FOR UPDATE`` of the execution rows) while the messages are sent. The node
reads them, finds each execution (a read, which the lock lets through) and waits in the
write that would apply the report; the test sees them pending under the node's consumer
(``XPENDING``), kills the node, and only then releases the lock."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import sqlalchemy as sa
from prometheus_client.parser import text_string_to_metric_families
from redis.asyncio import Redis
from sqlalchemy.ext.asyncio import create_async_engine

from ecron.store.tables import execution_table
from tests.chaos.launcher import start_warm_node
from tests.support.cluster import (
    Node,
    clean_up,
    execution,
    kill_node,
    run_now,
    stop_node,
    task_yaml,
    wait_ready,
    wait_snapshots,
    write_config,
)
from tests.support.postgres import PostgresServer
from tests.support.redis_server import RedisServer
from tests.support.service import UserService, wait_for
from tests.test_callbacks import token_of

pytestmark = [pytest.mark.slow]

STREAM, GROUP = "reports", "ecron"
#: The callback secret both nodes are configured with, so a token holds on either.
SECRET = "shared-callback-secret"
#: How many executions get a report message each.
REPORTS = 3


@pytest.fixture
async def client(redis_server: RedisServer) -> AsyncIterator[Redis]:
    """A plain redis-py client on the test's server: what a user service would use."""
    redis = Redis.from_url(redis_server.url)
    yield redis
    await redis.aclose()


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> Iterator[str]:
    """A fresh, migrated PostgreSQL database for the nodes of one test."""
    url = postgres_server.new_database()
    yield url
    postgres_server.drop_database(url)


def config(directory: Path, server: RedisServer, service: UserService) -> Path:
    """Both nodes' config: the shared secret, the queue (required, so that /readyz is 200
    only once the node reads the stream; claim_idle 500ms) and one ``mode: queue`` task."""
    settings = (
        f"tick: 100ms\nsecret: {SECRET}\nlog: {{format: json, level: info}}\n"
        f"queue: {{url: '{server.url}', stream: {STREAM}, group: {GROUP}, "
        "claim_idle: 500ms, required: true}\n"
    )
    tasks = "tasks:\n" + task_yaml(
        "pushed",
        f"{service.url}/jobs/pushed",
        schedule="manual",
        mode="queue",
        heartbeat_timeout="1h",
        concurrency="allow",
    )
    return write_config(directory, settings, tasks)


async def start_pushed(node: Node, service: UserService) -> list[str]:
    """Run ``pushed`` REPORTS times through ``node``; wait until each is RUNNING and its
    trigger (carrying the callback token) reached the service."""
    eids = [await run_now(node, "pushed") for _ in range(REPORTS)]
    await wait_snapshots(node, eids, lambda s: s["status"] == "RUNNING", timeout=10)
    await wait_for(lambda: all(service.calls_for(eid, "POST") for eid in eids), timeout=5)
    return eids


async def send_reports(client: Redis, service: UserService, eids: list[str]) -> list[bytes]:
    """XADD a SUCCESS report for each execution, with its token and a message naming it,
    as a user service would; in one MULTI/EXEC, so that a node's read takes them all at
    once (a read waiting on the stream would otherwise take the first alone). The ids."""
    async with client.pipeline(transaction=True) as pipe:
        for eid in eids:
            report = {"status": "SUCCESS", "message": f"done {eid}", "result": {"eid": eid}}
            token = token_of(service, eid)
            fields = {"execution_id": eid, "token": token, "report": json.dumps(report)}
            pipe.xadd(STREAM, fields)  # type: ignore[arg-type]
        sent: list[bytes] = await pipe.execute()
    return sent


async def pending_by_consumer(client: Redis) -> dict[str, int]:
    """How many messages each consumer of the group holds (read, not acknowledged)."""
    consumers: Any = await client.xinfo_consumers(STREAM, GROUP)
    return {
        c["name"].decode() if isinstance(c["name"], bytes) else c["name"]: int(c["pending"])
        for c in consumers
    }


async def all_handled(client: Redis, last: bytes) -> bool:
    """True once the group has read up to ``last`` and nothing is pending."""
    groups: Any = await client.xinfo_groups(STREAM)
    group = next(g for g in groups if g["name"] in (GROUP, GROUP.encode()))
    delivered = group["last-delivered-id"]
    delivered = delivered.decode() if isinstance(delivered, bytes) else delivered
    return _id(delivered) >= _id(last.decode()) and int(group["pending"]) == 0


def _id(message_id: str) -> tuple[int, int]:
    milliseconds, _, sequence = message_id.partition("-")
    return int(milliseconds), int(sequence or 0)


async def counted(node: Node) -> dict[str, float]:
    """``ecron_queue_messages_total`` by outcome, as ``node``'s /metrics shows it."""
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"{node.api}/metrics") as response,
    ):
        assert response.status == 200
        text = await response.text()
    return {
        sample.labels["outcome"]: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "ecron_queue_messages_total"
    }


def final(snapshot: dict[str, Any]) -> bool:
    """For ``wait_snapshots``: the execution has ended."""
    return snapshot["finished_at"] is not None


async def held_exactly(client: Redis, expected: dict[str, int]) -> bool:
    """True when the consumers holding messages hold exactly ``expected``."""
    held = {name: n for name, n in (await pending_by_consumer(client)).items() if n}
    return held == expected


async def nothing_held(client: Redis) -> bool:
    """True once no consumer holds a message."""
    return not any((await pending_by_consumer(client)).values())


async def holders(client: Redis, total: int) -> dict[str, int] | None:
    """The consumers holding messages, once ``total`` are held in all."""
    held = {name: n for name, n in (await pending_by_consumer(client)).items() if n}
    return held if sum(held.values()) == total else None


@asynccontextmanager
async def sqlite_write_lock(path: Path) -> AsyncIterator[None]:
    """SQLite's write lock, taken by a connection of the test's own (``BEGIN IMMEDIATE``):
    a node's reads go on (WAL), its writes wait in the busy timeout (10 s)."""
    blocker = sqlite3.connect(path, timeout=30, isolation_level=None, check_same_thread=False)
    try:
        await asyncio.to_thread(blocker.execute, "BEGIN IMMEDIATE")
        yield
        blocker.execute("ROLLBACK")
    finally:
        blocker.close()


@asynccontextmanager
async def postgres_row_locks(url: str, eids: list[str]) -> AsyncIterator[None]:
    """The execution rows ``eids`` locked by a transaction of the test's own (``SELECT ...
    FOR UPDATE``): a node's reads of them go on, its writes to them wait."""
    engine = create_async_engine(url)
    try:
        async with engine.connect() as conn, conn.begin() as transaction:
            query = sa.select(execution_table.c.eid).where(execution_table.c.eid.in_(eids))
            locked = (await conn.execute(query.with_for_update())).scalars().all()
            assert sorted(locked) == sorted(eids)
            yield
            await transaction.rollback()
    finally:
        await engine.dispose()


async def resend_and_settle(
    client: Redis, service: UserService, survivor: Node, eids: list[str]
) -> dict[str, dict[str, Any]]:
    """The same reports sent again (a service repeating itself): each is handled (too late),
    and the executions as ``survivor`` serves them afterwards."""
    again = await send_reports(client, service, eids)
    await wait_for(lambda: all_handled(client, again[-1]), timeout=10)
    return {eid: await execution(survivor, eid) for eid in eids}


def check_finals(finals: dict[str, dict[str, Any]], survivor: Node) -> None:
    """Each execution ended as its message said."""
    for eid, snapshot in finals.items():
        ended = (snapshot["status"], snapshot["message"], snapshot["result"])
        assert ended == ("SUCCESS", f"done {eid}", {"eid": eid}), survivor.log_tail()


async def test_reports_pending_under_a_killed_sqlite_node_are_claimed_and_applied_by_the_next(
    user_service: UserService, redis_server: RedisServer, client: Redis, tmp_path: Path
) -> None:
    """Node A (SQLite) reads three SUCCESS reports while another connection holds the write
    lock: they are pending under consumer A when A is SIGKILLed. Node B starts on the same
    file under another node id, claims them after claim_idle and applies them: each
    execution ends SUCCESS with its message's text, nothing is pending, B counts three
    applied and A holds nothing. The same reports sent again are too late and change
    nothing. No GET ever reaches the service (mode: queue)."""
    user_service.duration = 3600
    path = tmp_path / "ecron.db"
    database = f"sqlite+aiosqlite:///{path}"
    directory = config(tmp_path / "config", redis_server, user_service)
    nodes: list[Node] = []
    try:
        a = start_warm_node("a", directory, database, tmp_path, ECRON_NODE_ID="node-a")
        nodes.append(a)
        await wait_ready(a)
        eids = await start_pushed(a, user_service)
        async with sqlite_write_lock(path):
            await send_reports(client, user_service, eids)
            held = {"node-a": REPORTS}
            await wait_for(lambda: held_exactly(client, held), timeout=10)
            await kill_node(a)
        b = start_warm_node("b", directory, database, tmp_path, ECRON_NODE_ID="node-b")
        nodes.append(b)
        await wait_ready(b)
        finals = await wait_snapshots(b, eids, final, timeout=10)
        await wait_for(lambda: nothing_held(client), timeout=5)
        first = await counted(b)
        afterwards = await resend_and_settle(client, user_service, b, eids)
        second = await counted(b)
        left = await pending_by_consumer(client)
        code = await stop_node(b)
    finally:
        clean_up(nodes)
    check_finals(finals, b)
    assert first.get("applied") == REPORTS, (first, b.log_tail())
    assert left == {"node-a": 0, "node-b": 0}
    assert afterwards == finals
    assert (second.get("applied"), second.get("too_late")) == (REPORTS, REPORTS)
    assert all(user_service.methods_for(eid) == ["POST"] for eid in eids)
    claims = [e for e in b.events() if e.get("event") == "queue_messages_claimed"]
    assert sum(e["count"] for e in claims) == REPORTS, b.log_tail()
    assert code == 0, b.log_tail()


@pytest.mark.postgres
async def test_reports_pending_under_a_killed_postgresql_node_are_claimed_by_the_running_other(
    user_service: UserService,
    redis_server: RedisServer,
    client: Redis,
    postgres_url: str,
    tmp_path: Path,
) -> None:
    """Two nodes run at once on PostgreSQL, both reading the stream. Three SUCCESS reports
    are sent while the test holds the execution rows FOR UPDATE: the nodes read them and
    wait in the write. The node holding the most is SIGKILLed, then the rows are released:
    the other node applies its own and claims the dead one's after claim_idle: each
    execution ends SUCCESS with its message's text, it counts three applied, the dead
    consumer holds nothing, and the same reports sent again change nothing."""
    user_service.duration = 3600
    directory = config(tmp_path / "config", redis_server, user_service)
    nodes: list[Node] = []
    try:
        for name in ("a", "b"):
            nodes.append(
                start_warm_node(name, directory, postgres_url, tmp_path, ECRON_NODE_ID=name)
            )
        await asyncio.gather(*(wait_ready(node) for node in nodes))
        eids = await start_pushed(nodes[0], user_service)
        async with postgres_row_locks(postgres_url, eids):
            await send_reports(client, user_service, eids)
            held = await wait_for(lambda: holders(client, REPORTS), timeout=10)
            dead_name = max(held, key=lambda name: held[name])
            dead, survivor = sorted(nodes, key=lambda node: node.name != dead_name)
            await kill_node(dead)
        finals = await wait_snapshots(survivor, eids, final, timeout=10)
        await wait_for(lambda: nothing_held(client), timeout=5)
        first = await counted(survivor)
        afterwards = await resend_and_settle(client, user_service, survivor, eids)
        second = await counted(survivor)
        left = await pending_by_consumer(client)
        code = await stop_node(survivor)
    finally:
        clean_up(nodes)
    print(f"\nheld at the kill: {held}; killed {dead.name}")
    check_finals(finals, survivor)
    assert first.get("applied") == REPORTS, (first, survivor.log_tail())
    assert left == {"a": 0, "b": 0}
    assert afterwards == finals
    assert (second.get("applied"), second.get("too_late")) == (REPORTS, REPORTS)
    claims = [e for e in survivor.events() if e.get("event") == "queue_messages_claimed"]
    assert sum(e["count"] for e in claims) == held[dead.name], survivor.log_tail()
    assert code == 0, survivor.log_tail()
