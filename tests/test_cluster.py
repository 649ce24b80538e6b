"""Several ecron nodes as people run them: real `ecron run` processes sharing one database,
real signals (SIGTERM, SIGHUP, kill -9), and a real user service on 127.0.0.1 that records
every call. No fire time may run twice, none may be lost, and a node's death or departure
hands its executions to another node without a second trigger."""

from __future__ import annotations

import asyncio
import itertools
import signal
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from ecron.clock import iso
from ecron.core import ACTIVE
from tests.chaos.launcher import start_warm_node
from tests.support.cluster import (
    Node,
    Row,
    clean_up,
    execution,
    execution_rows,
    kill_node,
    let_time_pass,
    request,
    run_now,
    stop_node,
    task_yaml,
    wait_exit,
    wait_ready,
    wait_snapshots,
    write_config,
)
from tests.support.postgres import PostgresServer
from tests.support.service import UserService, wait_for

pytestmark = [pytest.mark.slow]

#: How long the nodes of the double-fire test run, and the edges of the window checked.
RUN_SECONDS = 15.0
WARM_UP = timedelta(seconds=4)
COOL_DOWN = timedelta(seconds=3)
TASKS = 50
#: Lease of the kill -9 tests, and what adoption may take on top of it: one takeover round
#: (the scheduler looks for expired leases every 0.5 s), the task's poll interval, and a
#: margin for a loaded machine.
SHORT_LEASE = 3.0
POLL_INTERVAL = 1.0
MARGIN = 1.5
ADOPTION_BOUND = SHORT_LEASE + POLL_INTERVAL + MARGIN
LONG_JOB = 8.0
JSON_LOG = "log: {format: json, level: info}\n"


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> Iterator[str]:
    """A fresh, migrated PostgreSQL database for the nodes of one test."""
    url = postgres_server.new_database()
    yield url
    postgres_server.drop_database(url)


def long_task(url: str) -> str:
    """A manual task whose jobs last LONG_JOB seconds, several allowed at once."""
    return "tasks:\n" + task_yaml(
        "long",
        f"{url}/jobs/long",
        schedule="manual",
        poll_interval=f"{POLL_INTERVAL:g}s",
        concurrency="allow",
    )


async def node_id(node: Node) -> str:
    """The id a node gave itself (``node_id: auto``)."""
    _, health = await request(node, "GET", "/healthz")
    name: str = health["node"]
    return name


async def adoption_times(
    survivor: Node, eids: list[str], new_owner: str, since: float, timeout: float
) -> dict[str, float]:
    """Seconds from ``since`` (monotonic) until each execution's owner became ``new_owner``."""
    seen: dict[str, float] = {}

    async def all_adopted() -> bool:
        for eid in eids:
            if eid not in seen and (await execution(survivor, eid))["owner"] == new_owner:
                seen[eid] = time.monotonic() - since
        return len(seen) == len(eids)

    try:
        await wait_for(all_adopted, timeout=timeout, interval=0.05)
    except AssertionError as exc:
        raise AssertionError(
            f"adopted only {seen} of {eids} within {timeout}s\n{survivor.log_tail()}"
        ) from exc
    return seen


def posts_per_eid(service: UserService, eids: list[str]) -> dict[str, int]:
    return {eid: service.methods_for(eid).count("POST") for eid in eids}


async def start_running(node: Node, owner: str, count: int) -> list[str]:
    """Start ``count`` runs of ``long`` through ``node``; wait until all are RUNNING there."""
    eids = [await run_now(node, "long") for _ in range(count)]
    await wait_snapshots(
        node,
        eids,
        lambda s: s["status"] == "RUNNING" and s["owner"] == owner,
        timeout=10,
    )
    return eids


async def finish_successfully(node: Node, eids: list[str]) -> dict[str, dict[str, Any]]:
    """Wait until every one of ``eids`` is final (as ``node`` serves them); their snapshots."""
    return await wait_snapshots(
        node, eids, lambda s: s["finished_at"] is not None, timeout=LONG_JOB + 15
    )


# --- a: no double fire, no lost fire ----------------------------------------------------------


def fire_times(start: datetime, end: datetime) -> list[datetime]:
    """Every whole second from ``start`` to ``end`` (both rounded inwards)."""
    first = start.replace(microsecond=0) + timedelta(seconds=1)
    count = int((end - first).total_seconds()) + 1
    return [first + timedelta(seconds=n) for n in range(max(0, count))]


def fire_report(
    rows: list[Row],
    service: UserService,
    window: list[datetime],
    names: list[str],
    node_ids: list[str],
) -> dict[str, Any]:
    """What the database and the service say about every fire of the run."""
    done = [r for r in rows if r.status == "SUCCESS"]
    owners_by_second: dict[datetime, set[str | None]] = defaultdict(set)
    for row in done:
        owners_by_second[row.scheduled_at].add(row.owner)
    keys = Counter((r.task, r.scheduled_at, r.attempt, r.resume_attempt) for r in rows)
    by_fire = {(r.task, r.scheduled_at): r for r in rows}
    posts = [c for c in service.calls if c.method == "POST"]
    eids_per_fire: dict[tuple[str, str], set[str]] = defaultdict(set)
    for call in posts:
        fire = (call.headers["X-Ecron-Task"], call.headers["X-Ecron-Scheduled-At"])
        eids_per_fire[fire].add(call.headers["X-Ecron-Execution-Id"])
    rows_by_eid = {r.eid: r for r in rows}
    expected = [(name, when) for name in names for when in window]
    in_window = [by_fire[fire] for fire in expected if fire in by_fire]
    return {
        "executions": len(rows),
        "triggered": len({c.eid for c in posts}),
        "posts": len(posts),
        "repeated_posts": sum(n - 1 for n in Counter(c.eid for c in posts).values()),
        "per_node": {node: sum(r.owner == node for r in done) for node in node_ids},
        "rounds_per_node": {
            node: sum(node in owners for owners in owners_by_second.values()) for node in node_ids
        },
        "split_rounds": sum(len(owners) > 1 for owners in owners_by_second.values()),
        "statuses": dict(Counter(r.status for r in rows)),
        "duplicate_keys": [key for key, n in keys.items() if n > 1],
        "double_starts": [eid for eid, n in service.starts.items() if n > 1],
        "fires_with_two_eids": {k: v for k, v in eids_per_fire.items() if len(v) > 1},
        "posts_unknown_to_db": [
            c.eid
            for c in posts
            if c.eid not in rows_by_eid
            or iso(rows_by_eid[c.eid].scheduled_at) != c.headers["X-Ecron-Scheduled-At"]
            or rows_by_eid[c.eid].task != c.headers["X-Ecron-Task"]
        ],
        "window_fires": len(expected),
        "missing": [fire for fire in expected if fire not in by_fire],
        "window_not_success": [
            (r.task, r.scheduled_at, r.status) for r in in_window if r.status != "SUCCESS"
        ],
        "window_not_triggered": [
            (r.task, r.scheduled_at) for r in in_window if r.eid not in service.starts
        ],
    }


def summary(report: dict[str, Any]) -> str:
    counts = {
        key: len(value)
        if isinstance(value, (list, dict)) and not key.endswith("per_node")
        else value
        for key, value in report.items()
        if key not in ("statuses",)
    }
    return f"{counts} statuses={report['statuses']}"


@pytest.mark.postgres
@pytest.mark.parametrize("nodes", [3])  # two nodes: the crash loop (tests/chaos) runs them
async def test_several_nodes_on_one_postgresql_never_double_a_fire_and_never_lose_one(
    nodes: int, postgres_url: str, user_service: UserService, tmp_path: Path
) -> None:
    """N nodes start together on one PostgreSQL with 50 tasks firing every second and run for
    15 s. Every fire time in the window has exactly one execution, triggered once under one
    execution id and ended SUCCESS; the work is spread over more than one node; every node
    stops on SIGTERM with exit status 0."""
    user_service.duration = 0.15
    names = [f"tick-{n:02d}" for n in range(TASKS)]
    tasks = "tasks:\n" + "".join(
        task_yaml(
            name,
            f"{user_service.url}/jobs/tick",
            schedule="{every: 1s}",
            poll_interval="100ms",
            concurrency="allow",
        )
        for name in names
    )
    directory = write_config(tmp_path / "config", "node_id: auto\ntick: 100ms\n" + JSON_LOG, tasks)
    running: list[Node] = []
    try:
        running = [
            start_warm_node(f"node{n}", directory, postgres_url, tmp_path) for n in range(nodes)
        ]
        await asyncio.gather(*(wait_ready(node) for node in running))
        ready_at = datetime.now(UTC)
        node_ids = [await node_id(node) for node in running]
        await let_time_pass(RUN_SECONDS)
        stopping_at = datetime.now(UTC)
        codes = await asyncio.gather(*(stop_node(node) for node in running))
    finally:
        clean_up(running)
    logs = "\n".join(node.log_tail(10) for node in running)
    assert codes == [0] * nodes, logs
    rows = await execution_rows(postgres_url)
    window = fire_times(ready_at + WARM_UP, stopping_at - COOL_DOWN)
    report = fire_report(rows, user_service, window, names, node_ids)
    text = summary(report)
    print(f"\n{nodes} nodes: {text}")
    assert len(window) >= RUN_SECONDS - 10, text
    assert report["duplicate_keys"] == [], text
    assert report["double_starts"] == [], text
    assert report["fires_with_two_eids"] == {}, text
    assert report["posts_unknown_to_db"] == [], text
    assert report["missing"] == [], f"{text}\nmissing: {report['missing'][:20]}"
    assert report["window_not_triggered"] == [], text
    assert report["window_not_success"] == [], f"{text}\n{report['window_not_success'][:20]}"
    assert sum(count > 0 for count in report["per_node"].values()) >= 2, text


# --- b, c: kill -9 while executions run ---------------------------------------------------------


@pytest.mark.postgres
async def test_a_node_killed_while_its_executions_run_has_them_adopted_by_another_node(
    postgres_url: str, user_service: UserService, tmp_path: Path
) -> None:
    """Two nodes on PostgreSQL, lease_ttl 3 s. Four 8-second executions run under node A; A is
    killed with SIGKILL. Node B takes every one of them over within lease_ttl + one poll
    interval + a margin, by polling (no second trigger), and each ends SUCCESS with exactly
    one trigger POST at the service."""
    user_service.duration = LONG_JOB
    settings = f"node_id: auto\ntick: 100ms\nlease_ttl: {SHORT_LEASE:g}s\n" + JSON_LOG
    directory = write_config(tmp_path / "config", settings, long_task(user_service.url))
    running: list[Node] = []
    try:
        running = [start_warm_node(name, directory, postgres_url, tmp_path) for name in ("a", "b")]
        first, second = running
        await asyncio.gather(wait_ready(first), wait_ready(second))
        owner_a, owner_b = await node_id(first), await node_id(second)
        eids = await start_running(first, owner_a, 4)
        killed_at = time.monotonic()
        await kill_node(first)
        adopted = await adoption_times(second, eids, owner_b, killed_at, ADOPTION_BOUND + 10)
        print(f"\nadoption after kill -9 (s): {sorted(round(t, 2) for t in adopted.values())}")
        finals = await finish_successfully(second, eids)
        code = await stop_node(second)
    finally:
        clean_up(running)
    assert code == 0, second.log_tail()
    assert max(adopted.values()) <= ADOPTION_BOUND, (adopted, second.log_tail())
    assert {s["status"] for s in finals.values()} == {"SUCCESS"}, finals
    assert {s["owner"] for s in finals.values()} == {owner_b}
    assert posts_per_eid(user_service, eids) == dict.fromkeys(eids, 1)
    assert all(user_service.starts[eid] == 1 for eid in eids)


async def test_a_lone_sqlite_node_killed_while_executions_run_adopts_them_when_it_restarts(
    user_service: UserService, tmp_path: Path
) -> None:
    """One node on a SQLite file, lease_ttl 3 s: three 8-second executions run, the node is
    killed with SIGKILL and started again on the same file. The new process takes its old
    executions over within lease_ttl + one poll interval + a margin of the kill, and each ends
    SUCCESS with exactly one trigger POST."""
    user_service.duration = LONG_JOB
    database = f"sqlite+aiosqlite:///{tmp_path / 'ecron.db'}"
    settings = f"node_id: auto\ntick: 100ms\nlease_ttl: {SHORT_LEASE:g}s\n" + JSON_LOG
    directory = write_config(tmp_path / "config", settings, long_task(user_service.url))
    running: list[Node] = []
    try:
        running.append(start_warm_node("before", directory, database, tmp_path))
        await wait_ready(running[0])
        owner_before = await node_id(running[0])
        eids = await start_running(running[0], owner_before, 3)
        killed_at = time.monotonic()
        await kill_node(running[0])
        running.append(start_warm_node("after", directory, database, tmp_path))
        again = running[1]
        await wait_ready(again)
        restarted = time.monotonic() - killed_at
        owner_after = await node_id(again)
        adopted = await adoption_times(again, eids, owner_after, killed_at, ADOPTION_BOUND + 10)
        print(
            f"\nrestarted after {restarted:.2f}s; adoption after kill -9 (s): "
            f"{sorted(round(t, 2) for t in adopted.values())}"
        )
        finals = await finish_successfully(again, eids)
        code = await stop_node(again)
    finally:
        clean_up(running)
    assert owner_after != owner_before
    assert code == 0, again.log_tail()
    assert max(adopted.values()) <= ADOPTION_BOUND, (adopted, restarted, again.log_tail())
    assert {s["status"] for s in finals.values()} == {"SUCCESS"}, finals
    assert posts_per_eid(user_service, eids) == dict.fromkeys(eids, 1)


# --- a dead node's claims cost about a second ---------------------------------------------------

#: Tasks of the test below, and how long the survivor runs on after the kill.
CLAIM_TASKS = 20
AFTER_KILL = 6.0


def trigger_arrivals(service: UserService) -> dict[str, list[tuple[float, datetime, str]]]:
    """Per task, the POSTs as the service saw them: (arrival, wall clock; fire time; eid),
    in order of arrival."""
    offset = time.time() - time.monotonic()
    found: dict[str, list[tuple[float, datetime, str]]] = defaultdict(list)
    for call in service.calls:
        if call.method == "POST":
            when = datetime.fromisoformat(call.headers["X-Ecron-Scheduled-At"])
            found[call.headers["X-Ecron-Task"]].append((offset + call.at, when, call.eid))
    return {task: sorted(posts) for task, posts in found.items()}


def after_the_kill(
    arrivals: dict[str, list[tuple[float, datetime, str]]],
    rows: dict[str, Row],
    names: list[str],
    killed: float,
    until: float,
) -> tuple[list[Any], list[Any], list[Any]]:
    """Per task: triggers more than 2 s apart after the kill (but after one of node a's),
    fire times after the kill triggered more than 2.5 s late, and fire times from the kill
    to ``until`` never triggered."""
    gaps, late, lost = [], [], []
    first = datetime.fromtimestamp(int(killed) + 1, UTC)
    expected = [first + timedelta(seconds=n) for n in range(int(until - first.timestamp()))]
    for name in names:
        posts = arrivals.get(name, [])
        for (before, _, eid), (after, when, _) in itertools.pairwise(posts):
            if after > killed and after - before > 2.0 and rows[eid].owner != "a":
                gaps.append((name, when.isoformat(), round(after - before, 2)))
        for arrival, when, _ in posts:
            if when.timestamp() >= killed and arrival - when.timestamp() > 2.5:
                late.append((name, when.isoformat(), round(arrival - when.timestamp(), 2)))
        seen = {when for _, when, _ in posts}
        lost += [(name, when.isoformat()) for when in expected if when not in seen]
    return gaps, late, lost


def story(
    arrivals: dict[str, list[tuple[float, datetime, str]]],
    rows: dict[str, Row],
    found: list[Any],
    killed: float,
) -> str:
    """What a failure's tasks went through: each execution row (by fire time) with its
    trigger's arrival, in seconds from the kill."""
    lines = []
    for name in sorted({entry[0] for entry in found}):
        posts = {eid: arrival - killed for arrival, _, eid in arrivals.get(name, [])}
        lines.append(f"{name}:")
        for row in sorted(
            (r for r in rows.values() if r.task == name), key=lambda r: r.scheduled_at
        ):
            post = posts.get(row.eid)
            at = "no trigger" if post is None else f"triggered at {post:+.2f} s"
            lines.append(
                f"  {row.scheduled_at.timestamp() - killed:+.2f} s {row.eid[-6:]} "
                f"{row.status} owner={row.owner} {row.trigger_kind}: {at}"
            )
    return "\n".join(lines)


async def adopted_and_ended(database_url: str, eids: set[str]) -> bool:
    """True once every execution of ``eids`` has ended (adopted by the survivor and polled)."""
    if not eids:
        return True
    rows = await execution_rows(database_url)
    return all(r.status not in ACTIVE for r in rows if r.eid in eids)


async def a_started(database_url: str, count: int) -> bool:
    """True once node a has triggered at least ``count`` executions that it still owns."""
    rows = await execution_rows(database_url)
    return sum(r.owner == "a" and r.status != "SCHEDULED" for r in rows) >= count


@pytest.mark.postgres
async def test_a_killed_node_costs_its_own_claims_about_a_second_not_the_lease(
    postgres_url: str, user_service: UserService, tmp_path: Path
) -> None:
    """Two nodes on PostgreSQL, 20 tasks every second under the default forbid, lease_ttl
    5 s. Node A is killed with SIGKILL while it holds fire times claimed ahead. Node B
    triggers them, with their own eids, about a second after their time: per task no two
    triggers more than 2 s apart (but after one of A's), no fire time after the kill more
    than 2.5 s late, none lost, none triggered twice, none SKIPPED.

    The kill is sent mid-second, when A's triggers of the second are answered and recorded;
    a task whose execution A had started and not yet ended when it died (the kill fell
    between a trigger and the write of its answer: a loaded machine stretches that) costs
    the lease instead, as documented (G4): B adopts that execution by polling once its
    lease runs out, and the task's fire times meanwhile are SKIPPED ``overlap``. Such a task
    is checked for that (adopted, never triggered twice), and the claims on all others."""
    user_service.duration = 0.0  # each job succeeds at its trigger: nothing overlaps
    names = [f"tick-{n:02d}" for n in range(CLAIM_TASKS)]
    tasks = "tasks:\n" + "".join(
        task_yaml(name, f"{user_service.url}/jobs/tick", schedule="{every: 1s}") for name in names
    )
    settings = "tick: 100ms\nlease_ttl: 5s\n" + JSON_LOG
    directory = write_config(tmp_path / "config", settings, tasks)
    running: list[Node] = []
    try:
        running = [
            start_warm_node(name, directory, postgres_url, tmp_path, ECRON_NODE_ID=name)
            for name in ("a", "b")
        ]
        await asyncio.gather(*(wait_ready(node) for node in running))
        # Both nodes trigger their share: node a has started fire times, and holds more ahead.
        await wait_for(lambda: a_started(postgres_url, 20), timeout=30, interval=0.2)
        await let_time_pass((0.5 - time.time()) % 1.0)  # mid-second: the second's triggers done
        killed = time.time()
        await kill_node(running[0])
        at_kill = await execution_rows(postgres_url)  # nothing of a's changes for 0.5 s
        await let_time_pass(AFTER_KILL)
        until = time.time() - 1.5  # fire times the survivor had time to reach
        caught = {r.eid for r in at_kill if r.owner == "a" and r.status in ACTIVE}
        await wait_for(lambda: adopted_and_ended(postgres_url, caught), timeout=15, interval=0.2)
        code = await stop_node(running[1])
    finally:
        clean_up(running)
    assert code == 0, running[1].log_tail()
    claims = [r for r in at_kill if r.owner == "a" and r.status == "SCHEDULED"]
    caught_tasks = {r.eid: r.task for r in at_kill if r.eid in caught}
    print(f"\nat the kill node a held {len(claims)} claims, {len(caught)} started: {caught_tasks}")
    assert len(caught) <= CLAIM_TASKS // 2, caught_tasks
    rows = {row.eid: row for row in await execution_rows(postgres_url)}
    arrivals = trigger_arrivals(user_service)
    checked = [name for name in names if name not in caught_tasks.values()]
    assert any(r.task in checked for r in claims), "node a held no claim the test can check"
    gaps, late, lost = after_the_kill(arrivals, rows, checked, killed, until)
    worst = max(
        (
            arrival - when.timestamp()
            for name in checked
            for arrival, when, _ in arrivals.get(name, [])
            if when.timestamp() >= killed
        ),
        default=float("nan"),
    )
    print(f"latest trigger of a fire time after the kill: {worst:.2f} s")
    assert gaps == [], f"{gaps}\n{story(arrivals, rows, gaps, killed)}"
    assert late == [], f"{late}\n{story(arrivals, rows, late, killed)}"
    assert lost == [], f"{lost}\n{story(arrivals, rows, lost, killed)}"
    assert [eid for eid, n in user_service.starts.items() if n > 1] == []
    assert [r for r in rows.values() if r.status == "SKIPPED" and r.task in checked] == []
    # What a had started: adopted by b and followed to its end, not triggered again.
    assert {eid: (rows[eid].owner, rows[eid].status) for eid in caught} == dict.fromkeys(
        caught, ("b", "SUCCESS")
    ), story(arrivals, rows, [(task,) for task in caught_tasks.values()], killed)
    assert any(r.owner == "a" for r in rows.values()), "node a never triggered anything"


# --- d: SIGHUP ---------------------------------------------------------------------------------


async def task_names(node: Node) -> set[str]:
    status, answer = await request(node, "GET", "/api/v1/tasks")
    assert status == 200, answer
    return {item["name"] for item in answer["items"]}


async def test_sighup_reloads_the_task_files_adding_and_retiring_tasks(
    user_service: UserService, tmp_path: Path
) -> None:
    """One node on SQLite. A task file added while it runs appears in GET /api/v1/tasks within
    a few seconds of SIGHUP; once the file is removed, the next SIGHUP retires the task (it
    leaves the list and GET /api/v1/tasks/{name} answers 404), and the node still exits 0."""
    database = f"sqlite+aiosqlite:///{tmp_path / 'ecron.db'}"
    first = "tasks:\n" + task_yaml("first", f"{user_service.url}/jobs/a", schedule="manual")
    directory = write_config(tmp_path / "config", "tick: 100ms\n" + JSON_LOG, first)
    extra = directory / "tasks" / "extra.yaml"
    running: list[Node] = []
    try:
        running.append(start_warm_node("node", directory, database, tmp_path))
        node = running[0]
        await wait_ready(node)
        assert await task_names(node) == {"first"}
        extra.write_text(
            "tasks:\n" + task_yaml("added", f"{user_service.url}/jobs/b", schedule="manual")
        )
        node.process.send_signal(signal.SIGHUP)
        await wait_for(lambda: _names_are(node, {"first", "added"}), timeout=5)
        extra.unlink()
        node.process.send_signal(signal.SIGHUP)
        await wait_for(lambda: _names_are(node, {"first"}), timeout=5)
        status, _ = await request(node, "GET", "/api/v1/tasks/added")
        code = await stop_node(node)
    finally:
        clean_up(running)
    assert status == 404
    assert code == 0, node.log_tail()
    reloads = [e for e in node.events() if e.get("event") == "tasks_reloaded"]
    assert len(reloads) == 2, node.log_tail()


async def _names_are(node: Node, names: set[str]) -> bool:
    return await task_names(node) == names


# --- e: SIGTERM hands over at once -------------------------------------------------------------


@pytest.mark.postgres
async def test_sigterm_during_a_running_execution_hands_it_to_another_node_at_once(
    postgres_url: str, user_service: UserService, tmp_path: Path
) -> None:
    """Two nodes on PostgreSQL with lease_ttl 30 s. While an 8-second execution runs under
    node A, A gets SIGTERM: it exits 0 and releases its lease, so node B adopts the execution
    in well under the lease TTL (under 5 s), by polling; it ends SUCCESS with one trigger."""
    user_service.duration = LONG_JOB
    settings = "node_id: auto\ntick: 100ms\nlease_ttl: 30s\n" + JSON_LOG
    directory = write_config(tmp_path / "config", settings, long_task(user_service.url))
    running: list[Node] = []
    try:
        running = [start_warm_node(name, directory, postgres_url, tmp_path) for name in ("a", "b")]
        first, second = running
        await asyncio.gather(wait_ready(first), wait_ready(second))
        owner_a, owner_b = await node_id(first), await node_id(second)
        eids = await start_running(first, owner_a, 1)
        stopped_at = time.monotonic()
        first.process.send_signal(signal.SIGTERM)
        code_a = await wait_exit(first, 15)
        stop_took = time.monotonic() - stopped_at
        adopted = await adoption_times(second, eids, owner_b, stopped_at, 30)
        print(f"\nSIGTERM: stopped in {stop_took:.2f}s, adopted after {adopted[eids[0]]:.2f}s")
        finals = await finish_successfully(second, eids)
        code_b = await stop_node(second)
    finally:
        clean_up(running)
    assert code_a == 0, first.log_tail()
    assert code_b == 0, second.log_tail()
    stopped = [e for e in first.events() if e.get("event") == "daemon_stopped"]
    assert stopped and stopped[0]["released"] == 1, first.log_tail()
    assert adopted[eids[0]] < 5.0, (adopted, second.log_tail())
    assert [s["status"] for s in finals.values()] == ["SUCCESS"], finals
    assert posts_per_eid(user_service, eids) == dict.fromkeys(eids, 1)


async def test_retiring_a_task_by_sighup_while_it_runs_leaves_the_node_driving_its_other_work(
    user_service: UserService, tmp_path: Path
) -> None:
    """One node on SQLite runs an execution of ``keep`` and one of ``gone``; the file declaring
    ``gone`` is removed and the node gets SIGHUP while both run. ``gone`` is retired, and the
    node goes on polling ``keep``'s execution to SUCCESS and exits 0 on SIGTERM: a retired
    task must not stop the node's other work."""
    user_service.duration = 3.0
    database = f"sqlite+aiosqlite:///{tmp_path / 'ecron.db'}"
    keep = "tasks:\n" + task_yaml(
        "keep", f"{user_service.url}/jobs/k", schedule="manual", poll_interval="300ms"
    )
    directory = write_config(tmp_path / "config", "tick: 100ms\n" + JSON_LOG, keep)
    extra = directory / "tasks" / "extra.yaml"
    extra.write_text(
        "tasks:\n"
        + task_yaml("gone", f"{user_service.url}/jobs/g", schedule="manual", poll_interval="300ms")
    )
    running: list[Node] = []
    try:
        running.append(start_warm_node("node", directory, database, tmp_path))
        node = running[0]
        await wait_ready(node)
        owner = await node_id(node)
        gone = await run_now(node, "gone")
        kept = await run_now(node, "keep")
        await wait_snapshots(
            node, [gone, kept], lambda s: s["status"] == "RUNNING" and s["owner"] == owner, 10
        )
        extra.unlink()
        node.process.send_signal(signal.SIGHUP)
        await wait_for(lambda: _names_are(node, {"keep"}), timeout=5)
        try:
            finals = await wait_snapshots(node, [kept], lambda s: s["finished_at"], timeout=15)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{node.log_tail(40)}") from exc
        code = await stop_node(node)
    finally:
        clean_up(running)
    assert finals[kept]["status"] == "SUCCESS", finals
    assert code == 0, node.log_tail(40)


# --- fire times handed back at shutdown ---------------------------------------------------------


#: The misfire grace of the test below, and how much later than it the node comes back.
GRACE, DOWN_MARGIN = 1.0, 1.0


async def ran_and_claimed_ahead(database_url: str) -> bool:
    """True once a fire time ran to its end and later ones are claimed ahead (SCHEDULED)."""
    rows = await execution_rows(database_url)
    return any(r.status == "SUCCESS" for r in rows) and any(r.status == "SCHEDULED" for r in rows)


async def fired_after(database_url: str, when: datetime) -> bool:
    """True once a fire time later than ``when`` ran to its end and nothing is PENDING or
    RUNNING from before it (the handed-back fire times were dealt with)."""
    rows = await execution_rows(database_url)
    done = any(r.scheduled_at > when and r.status == "SUCCESS" for r in rows)
    return done and not any(
        r.scheduled_at <= when and r.status in ("SCHEDULED", "PENDING", "RUNNING") for r in rows
    )


async def test_fire_times_claimed_ahead_by_a_stopped_node_are_not_run_after_the_misfire_grace(
    user_service: UserService, tmp_path: Path
) -> None:
    """One node on SQLite, a task every second with misfire {policy: skip, grace: 1s}. On
    SIGTERM the node hands back the fire times it had claimed ahead (prefetch) unrun; started
    again once the last of them is more than the grace late, it must skip them like any other
    missed fire time: no trigger leaves more than the grace after its fire time, and the
    handed-back fire times end SKIPPED."""
    user_service.duration = 0.1
    database = f"sqlite+aiosqlite:///{tmp_path / 'ecron.db'}"
    tasks = "tasks:\n" + task_yaml(
        "tick",
        f"{user_service.url}/jobs/t",
        schedule="{every: 1s}",
        poll_interval="100ms",
        concurrency="allow",
        misfire=f"{{policy: skip, grace: {GRACE:g}s}}",
    )
    directory = write_config(tmp_path / "config", "tick: 100ms\n" + JSON_LOG, tasks)
    running: list[Node] = []
    try:
        running.append(start_warm_node("before", directory, database, tmp_path))
        await wait_ready(running[0])
        await wait_for(lambda: ran_and_claimed_ahead(database), timeout=15, interval=0.1)
        first_code = await stop_node(running[0])
        handed_back = [r for r in await execution_rows(database) if r.status == "SCHEDULED"]
        if handed_back:  # down until the last of them is more than the grace late
            latest = max(r.scheduled_at for r in handed_back).timestamp()
            await let_time_pass(latest + GRACE + DOWN_MARGIN - time.time())
        running.append(start_warm_node("after", directory, database, tmp_path))
        await wait_ready(running[1])
        restarted = datetime.now(UTC)
        await wait_for(lambda: fired_after(database, restarted), timeout=15, interval=0.1)
        code = await stop_node(running[1])
    finally:
        clean_up(running)
    assert (first_code, code) == (0, 0)
    assert handed_back, "the stopped node had claimed no fire time ahead"
    offset = time.time() - time.monotonic()
    lateness = {
        call.headers["X-Ecron-Scheduled-At"]: round(
            offset
            + call.at
            - datetime.fromisoformat(call.headers["X-Ecron-Scheduled-At"]).timestamp(),
            2,
        )
        for call in user_service.calls
        if call.method == "POST"
    }
    late = {when: seconds for when, seconds in lateness.items() if seconds > GRACE + 0.5}
    rows = {r.eid: r for r in await execution_rows(database)}
    after = {iso(r.scheduled_at): rows[r.eid].status for r in handed_back}
    assert late == {}, f"triggers later than the grace (s): {late}; handed back: {after}"
    assert set(after.values()) == {"SKIPPED"}, after
