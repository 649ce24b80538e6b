"""A chain across a node's death: two real ``ecron run`` processes on one PostgreSQL, one of
them killed with SIGKILL while chained runs are being set off; every upstream fire time that
succeeded still gets exactly one chained run, started once at the user service."""

from __future__ import annotations

import asyncio
from collections import Counter, defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from ecron.core import Execution, Status, TriggerKind
from ecron.store.sql import SqlStore
from tests.chaos.launcher import start_warm_node
from tests.support.cluster import (
    Node,
    clean_up,
    kill_node,
    stop_node,
    task_yaml,
    wait_ready,
    write_config,
)
from tests.support.service import UserService, wait_for
from tests.test_cluster import node_id, postgres_url  # noqa: F401  (postgres_url: the fixture)

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

SETTINGS = (
    "node_id: auto\ntick: 100ms\nlease_ttl: 3s\npatrol_interval: 1s\n"
    "log: {format: json, level: info}\n"
)


async def executions_of(database_url: str, name: str) -> list[Execution]:
    """Every execution of ``name`` in the database (SCHEDULED ones too)."""
    store = SqlStore.open(database_url)
    try:
        page = await store.list_executions(task=name, limit=500)
        claimed = await store.list_executions(task=name, status=Status.SCHEDULED, limit=500)
    finally:
        await store.close()
    return [*page.items, *claimed.items]


@pytest.mark.postgres
async def test_a_chain_runs_once_per_upstream_fire_time_across_a_nodes_sigkill(
    postgres_url: str,  # noqa: F811  (the fixture)
    user_service: UserService,
    tmp_path: Path,
) -> None:
    """``down`` runs after ``up`` (every second) on two nodes; one is killed with SIGKILL
    once chained runs are going (the one that did most of the work). For every fire time of
    ``up`` that succeeded up to two seconds after the kill, ``down`` has exactly one chained
    run, of that fire time and set off by that success, and the service saw each chained run
    that ended start once."""
    user_service.durations = {"up": 0.3, "down": 0.1}
    url = user_service.url
    tasks = "tasks:\n" + task_yaml(
        "up", f"{url}/jobs/up", schedule="{every: 1s}", poll_interval="200ms"
    )
    tasks += task_yaml(
        "down",
        f"{url}/jobs/down",
        schedule="{after_task: up}",
        poll_interval="200ms",
        concurrency="allow",  # several may start at once after an adoption: none is skipped
    )
    directory = write_config(tmp_path / "config", SETTINGS, tasks)
    running: list[Node] = []
    try:
        running = [start_warm_node(name, directory, postgres_url, tmp_path) for name in ("a", "b")]
        await asyncio.gather(*(wait_ready(node) for node in running))

        async def chained(count: int) -> bool:
            return len(await executions_of(postgres_url, "down")) >= count

        await wait_for(lambda: chained(3), timeout=20, interval=0.2)
        ids = {await node_id(node): node for node in running}
        owners = Counter(e.owner for e in await executions_of(postgres_url, "up"))
        killed = max(ids, key=lambda name: owners[name])
        victim = ids[killed]  # the node that has done most of the work
        survivor = next(node for node in running if node is not victim)
        await kill_node(victim)
        cutoff = datetime.now(UTC) + timedelta(seconds=2)

        async def caught_up() -> tuple[list[Execution], list[Execution]] | None:
            ups = await executions_of(postgres_url, "up")
            downs = await executions_of(postgres_url, "down")
            wanted = {e.scheduled_at for e in ups if e.status is Status.SUCCESS}
            wanted = {when for when in wanted if when <= cutoff}
            done = {e.scheduled_at for e in downs if e.is_final}
            late = any(e.scheduled_at <= cutoff and not e.is_final for e in ups)
            past = any(e.scheduled_at > cutoff for e in ups)  # every earlier one is claimed
            return (ups, downs) if past and wanted <= done and not late else None

        ups, downs = await wait_for(caught_up, timeout=30, interval=0.3)
        code = await stop_node(survivor)
    finally:
        clean_up(running)
    assert code == 0, survivor.log_tail()
    assert killed in {e.owner for e in [*ups, *downs]}  # the killed node had done its share
    succeeded = {e.eid: e for e in ups if e.status is Status.SUCCESS}
    per_fire_time: dict[datetime, list[Execution]] = defaultdict(list)
    for down in downs:
        if down.trigger_kind is TriggerKind.CHAIN:
            per_fire_time[down.scheduled_at].append(down)
    expected = {e.scheduled_at for e in succeeded.values() if e.scheduled_at <= cutoff}
    assert expected and expected <= set(per_fire_time)
    assert all(len(runs) == 1 for runs in per_fire_time.values()), per_fire_time
    for when, (run,) in per_fire_time.items():
        assert run.upstream in succeeded and succeeded[run.upstream].scheduled_at == when
        if run.is_final:
            assert run.status is Status.SUCCESS and user_service.starts.get(run.eid) == 1
