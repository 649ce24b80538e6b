"""A pool shared by two ``ecron run`` processes on one PostgreSQL (DESIGN.md, "Pools": the
limit holds across the cluster, and through a node's death): a real service counts the
jobs that run at once."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

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
    write_config,
)
from tests.support.postgres import PostgresServer
from tests.support.service import UserService, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

JOB = 1.0
LEASE = 3.0


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> Iterator[str]:
    """A fresh database for the nodes of one test."""
    url = postgres_server.new_database()
    yield url
    postgres_server.drop_database(url)


def config(directory: Path, service: UserService) -> Path:
    settings = (
        f"node_id: auto\ntick: 100ms\nlease_ttl: {LEASE:g}s\npools:\n  shared: {{max_running: 2}}\n"
    )
    tasks = "tasks:\n" + task_yaml(
        "job",
        f"{service.url}/jobs/job",
        schedule="manual",
        poll_interval="100ms",
        concurrency="allow",
        pool="shared",
    )
    return write_config(directory, settings, tasks)


async def all_succeed(node: Node, eids: list[str], timeout: float) -> bool:
    async def done() -> bool:
        statuses = [(await execution(node, eid))["status"] for eid in eids]
        return statuses == ["SUCCESS"] * len(eids)

    return bool(await wait_for(done, timeout=timeout, interval=0.2))


async def test_two_nodes_sharing_a_pool_of_two_never_run_more_than_two_even_when_one_is_killed(
    postgres_url: str, user_service: UserService, tmp_path: Path
) -> None:
    """Nodes A and B share pool ``shared`` (max_running 2). Six runs asked of both at once:
    never more than two jobs at the service. Then four more asked of A, which is killed
    (SIGKILL) while two of them run and two wait: B takes them over when their leases lapse
    (polling the running ones, starting the waiting ones), runs two more asked of it, and
    still never more than two jobs run at once; every run ends SUCCESS, each started once."""
    user_service.duration = JOB
    directory = config(tmp_path / "config", user_service)
    nodes: list[Node] = []
    try:
        nodes = [start_warm_node(name, directory, postgres_url, tmp_path) for name in ("a", "b")]
        a, b = nodes
        await asyncio.gather(wait_ready(a), wait_ready(b))
        first = await asyncio.gather(*(run_now(node, "job") for node in (a, b) * 3))
        await all_succeed(b, first, timeout=30)
        held = [await run_now(a, "job") for _ in range(4)]
        await wait_for(lambda: sum(eid in user_service.jobs for eid in held) == 2, timeout=10)
        await kill_node(a)
        late = [await run_now(b, "job") for _ in range(2)]
        await all_succeed(b, [*held, *late], timeout=LEASE + 30)
        code = await stop_node(b)
    finally:
        clean_up(nodes)
    everything = [*first, *held, *late]
    assert code == 0, b.log_tail()
    assert user_service.most_at_once(everything) == 2
    assert all(user_service.starts[eid] == 1 for eid in everything)
