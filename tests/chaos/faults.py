"""What the database-fault tests share: one node, a user service, a task firing every
second and two manual ones (a job that runs through the fault, a job whose deadline passes
during it), a probe of the health endpoints, and the checks made afterwards."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp

from ecron.clock import iso
from tests.chaos.checks import FINAL_NAMES, Tables, chains, fire_times
from tests.chaos.launcher import start_warm_node
from tests.support.cluster import (
    Node,
    clean_up,
    execution,
    let_time_pass,
    run_now,
    stop_node,
    wait_ready,
    write_config,
)
from tests.support.service import UserService, wait_for

#: The deadline job's task timeout, and how long the job that runs through a fault lasts
#: past the fault's end.
DEADLINE = 3.0
THROUGH_AFTER = 3.0
#: Fire times of ``tick`` from this long after the node is up, up to this long before the
#: checks, are checked.
WARM_UP, COOL_DOWN = timedelta(seconds=1), timedelta(seconds=1.5)


def tasks_yaml(url: str) -> str:
    """``tick`` every second, and two tasks run by hand: ``through`` (a job that runs
    through the fault) and ``deadline`` (a job with a DEADLINE-second task timeout); how
    long each job lasts is the service's ``durations``."""
    return f"""\
tasks:
  - name: tick
    schedule: {{every: 1s}}
    url: {url}/jobs/tick
    poll_interval: 200ms
    concurrency: allow
  - name: through
    schedule: manual
    url: {url}/jobs/through
    poll_interval: 300ms
    task_timeout: 2m
  - name: deadline
    schedule: manual
    url: {url}/jobs/deadline
    poll_interval: 300ms
    task_timeout: {DEADLINE:g}s
"""


@dataclass
class Probe:
    """Asks ``/healthz`` and ``/readyz`` every ``every`` seconds; what each answered, by
    time (None: no answer within ``timeout``)."""

    node: Node
    every: float = 0.2
    timeout: float = 2.0
    health: list[tuple[float, int | None]] = field(default_factory=list)
    ready: list[tuple[float, int | None]] = field(default_factory=list)

    async def _status(self, session: aiohttp.ClientSession, path: str) -> int | None:
        try:
            async with session.get(f"{self.node.api}{path}") as answer:
                await answer.read()
                return answer.status
        except (aiohttp.ClientError, TimeoutError):
            return None

    async def run(self) -> None:
        timeout = aiohttp.ClientTimeout(total=self.timeout)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            while True:
                now = time.monotonic()
                self.health.append((now, await self._status(session, "/healthz")))
                self.ready.append((now, await self._status(session, "/readyz")))
                await let_time_pass(self.every)

    def ready_since(self, since: float) -> list[int | None]:
        return [status for at, status in self.ready if at >= since]

    def unhealthy(self) -> list[tuple[float, int | None]]:
        return [(at, status) for at, status in self.health if status != 200]


@dataclass
class FaultRun:
    """One node under a fault: its config, its process, the probe, the service."""

    node: Node
    probe: Probe
    service: UserService
    database_url: str
    began: datetime
    prober: asyncio.Task[None] | None = None

    async def fired(self, count: int = 2, timeout: float = 15.0) -> None:
        """Wait until ``tick`` has fired ``count`` times (triggers at the service): fire times
        ran before the fault."""
        await wait_for(
            lambda: len(_triggers(self.service, "tick")) >= count, timeout=timeout, interval=0.1
        )

    async def start_work(self) -> tuple[str, str]:
        """Start ``through`` and ``deadline``; wait until both are RUNNING."""
        through = await run_now(self.node, "through")
        deadline = await run_now(self.node, "deadline")
        await wait_for(
            lambda: _all_running(self.node, [through, deadline]), timeout=10, interval=0.1
        )
        return through, deadline

    async def wait_ready_again(self, since: float, timeout: float = 30.0) -> None:
        """Wait until ``/readyz`` answered 200 after ``since`` (monotonic)."""
        await wait_for(lambda: 200 in self.probe.ready_since(since), timeout=timeout)

    async def wait_new_fire_time_done(self, after: datetime, timeout: float = 30.0) -> None:
        """Wait until a fire time of ``tick`` later than ``after`` has ended SUCCESS."""

        async def done() -> bool:
            rows = await rows_of(self.database_url)
            return any(
                r["task"] == "tick" and r["scheduled_at"] > after and r["status"] == "SUCCESS"
                for r in rows.values()
            )

        await wait_for(done, timeout=timeout, interval=0.2)


def _triggers(service: UserService, task: str) -> list[str]:
    """The execution ids ``service`` was asked to start for ``task``."""
    return [
        c.eid for c in service.calls if c.method == "POST" and c.headers.get("X-Ecron-Task") == task
    ]


async def _all_running(node: Node, eids: list[str]) -> bool:
    statuses = [(await execution(node, eid))["status"] for eid in eids]
    return statuses == ["RUNNING"] * len(eids)


async def all_final(database_url: str, eids: list[str]) -> bool:
    """True when every one of ``eids`` is final, as the table says."""
    rows = await rows_of(database_url)
    return all(rows[eid]["status"] in FINAL_NAMES for eid in eids)


async def rows_of(database_url: str) -> dict[str, Any]:
    tables = Tables.open(database_url)
    try:
        executions, _ = await tables.read()
    finally:
        await tables.close()
    return executions


@asynccontextmanager
async def fault_run(
    database_url: str,
    tmp_path: Path,
    service: UserService,
    *,
    settings: str = "",
) -> AsyncIterator[FaultRun]:
    """One node (``settings`` added to its ecron.yaml) with the tasks above and a probe of
    its health endpoints; stopped (SIGTERM) at the end, exit status checked by the caller
    from ``stop_and_read``."""
    directory = write_config(
        tmp_path / "config",
        "tick: 100ms\nlog: {format: json, level: info}\n" + settings,
        tasks_yaml(service.url),
    )
    node = start_warm_node("node", directory, database_url, tmp_path)
    run: FaultRun | None = None
    try:
        await wait_ready(node)
        probe = Probe(node)
        run = FaultRun(node, probe, service, database_url, datetime.now(UTC))
        run.prober = asyncio.create_task(probe.run())
        yield run
    finally:
        if run is not None and run.prober is not None:
            run.prober.cancel()
        clean_up([node])


async def stop_and_read(run: FaultRun) -> tuple[int, dict[str, Any]]:
    """The node's exit status after SIGTERM (the probe stopped first), and every
    execution row."""
    if run.prober is not None:
        run.prober.cancel()
    alive = run.node.process.poll() is None
    assert alive, f"the node died during the fault\n{run.node.log_tail(40)}"
    code = await stop_node(run.node)
    return code, await rows_of(run.database_url)


async def settle_and_read(
    run: FaultRun, since: datetime, eids: list[str], timeout: float = 30.0
) -> tuple[datetime, int, dict[str, Any]]:
    """After a fault that ended at ``since``: wait until a fire time after it is done and
    the executions ``eids`` are final, then stop the node; when that was seen, the node's
    exit status, and every execution row."""
    await run.wait_new_fire_time_done(since)
    try:
        await wait_for(lambda: all_final(run.database_url, eids), timeout=timeout, interval=0.2)
    except AssertionError:
        rows = await rows_of(run.database_url)
        seen = {eid: rows.get(eid) for eid in eids}
        raise AssertionError(f"not final: {seen}\n{run.node.log_tail(60)}") from None
    ended = datetime.now(UTC)
    code, rows = await stop_and_read(run)
    return ended, code, rows


def tick_problems(
    rows: dict[str, Any], service: UserService, began: datetime, ended: datetime
) -> tuple[int, list[str]]:
    """Fire times of ``tick`` in the window: how many, and what is wrong with them (none
    missing, each one chain that ended SUCCESS, no remote id started twice, no fire time
    started under two ids)."""
    expected = fire_times({"tick": 1}, began + WARM_UP, ended - COOL_DOWN)
    groups = chains(rows).chains
    problems = [
        f"tick@{iso(when)}: no execution" for _, when in expected if ("tick", when) not in groups
    ]
    for fire in expected:
        statuses = [r["status"] for r in groups.get(fire, [])]
        if fire in groups and statuses != ["SUCCESS"]:
            problems.append(f"tick@{iso(fire[1])}: {statuses}")
    problems += [f"{rid} started {n} times" for rid, n in service.starts.items() if n != 1]
    per_fire: dict[str, set[str]] = {}
    for call in service.calls:
        if call.method == "POST" and call.headers.get("X-Ecron-Task") == "tick":
            per_fire.setdefault(call.headers["X-Ecron-Scheduled-At"], set()).add(call.eid)
    problems += [f"{when} triggered as {eids}" for when, eids in per_fire.items() if len(eids) > 1]
    return len(expected), problems


def ended_as(rows: dict[str, Any], eid: str) -> tuple[str, str | None]:
    row = rows[eid]
    assert row["status"] in FINAL_NAMES, row
    return row["status"], row["reason"]


def cancels(service: UserService, eid: str) -> int:
    return service.methods_for(eid).count("DELETE")


def events_of(node: Node) -> Counter[str]:
    """How many times each event was logged by the node."""
    return Counter(str(event.get("event")) for event in node.events())
