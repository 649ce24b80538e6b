"""Pools and back-pressure on a live daemon (DESIGN.md, "Scheduling rules": Pools;
PROTOCOL.md, back-pressure), against a real service that keeps its jobs: how many ran at
once, in which order they started, what each trigger was answered."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from click.testing import CliRunner

from ecron.cli import client_cmds  # noqa: F401  (registers the commands)
from ecron.cli.group import cli
from ecron.config.loader import load_config
from ecron.config.rules import PoolSpec
from ecron.core import Status
from ecron.errors import ConfigError
from tests.protocol_support import ended, reply
from tests.support.daemon import DaemonFactory, task
from tests.support.rig import FakeClock, rig
from tests.support.service import UserService, wait_for

RUNS = 20


async def run(session: aiohttp.ClientSession, port: int, name: str) -> dict[str, Any]:
    """Ask for a run of ``name``; the execution the answer carries."""
    async with session.post(
        f"http://127.0.0.1:{port}/api/v1/tasks/{name}/run", json={}
    ) as response:
        assert response.status == 202, await response.text()
        answer: dict[str, Any] = await response.json()
        return answer


def pooled(service: UserService, name: str, pool: PoolSpec, **keys: Any) -> Any:
    keys.setdefault("concurrency", "allow")
    return task(name, f"{service.url}/jobs/{name}", pool=pool, poll_interval="50ms", **keys)


async def test_two_tasks_in_a_pool_of_three_never_run_more_than_three_and_start_oldest_first(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """20 runs of two tasks of one pool (max_running 3) asked at once: never more than 3
    jobs at the service at once, all SUCCESS, started in the order of their fire times; the
    runs that waited said so while they waited."""
    user_service.duration = 0.3
    pool = PoolSpec(name="reports", max_running=3)
    specs = [pooled(user_service, "a", pool), pooled(user_service, "b", pool)]
    async with make_daemon(specs) as daemon, aiohttp.ClientSession() as session:
        asked = await asyncio.gather(*(run(session, daemon.port, "ab"[n % 2]) for n in range(RUNS)))
        waiting = [e for e in asked if e["status"] == "SCHEDULED"]
        finals = [await ended(daemon, e["id"], timeout=30) for e in asked]
    eids = [e["id"] for e in asked]
    assert all(e.status is Status.SUCCESS for e in finals)
    assert user_service.most_at_once(eids) == 3
    started = sorted(eids, key=lambda eid: user_service.jobs[eid].started)
    by_fire_time = [e.eid for e in sorted(finals, key=lambda e: (e.scheduled_at, e.eid))]
    assert started == by_fire_time
    assert len(waiting) >= RUNS - 3
    assert all(e["message"].startswith("waiting for pool reports") for e in waiting)


async def test_a_429_with_retry_after_pauses_the_pool_and_costs_no_attempt(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """The service answers the first trigger 429 with Retry-After: 2. No trigger of the
    pool reaches it for those 2 s (the other task's runs asked meanwhile wait too); then the
    refused run is triggered again with the same id, and every run ends SUCCESS at attempt
    1, its trigger_retry budget untouched (one try allowed)."""
    user_service.duration = 0.1
    user_service.script["POST"] = [reply(429, {"error": "busy"}, **{"Retry-After": "2"})]
    pool = PoolSpec(name="partner", max_running=10)
    once = {"attempts": 1, "backoff": "100ms"}
    specs = [
        pooled(user_service, "a", pool, trigger_retry=once),
        pooled(user_service, "b", pool, trigger_retry=once),
    ]
    async with make_daemon(specs) as daemon, aiohttp.ClientSession() as session:
        first = await run(session, daemon.port, "a")
        refused_at = await wait_for(lambda: _answered_429(user_service), timeout=10)
        others = [await run(session, daemon.port, name) for name in ("a", "b", "b")]
        eids = [first["id"], *(e["id"] for e in others)]
        finals = [await ended(daemon, eid, timeout=20) for eid in eids]
    posts = [c for c in user_service.calls if c.method == "POST"]
    after = [c for c in posts if c.at > refused_at]
    assert after and min(c.at for c in after) - refused_at >= 2.0 - 0.05
    assert [e.status for e in finals] == [Status.SUCCESS] * 4
    assert [e.attempt for e in finals] == [1] * 4
    assert [c.eid for c in posts].count(first["id"]) == 2  # refused, then the same id again
    assert all(user_service.methods_for(eid).count("DELETE") == 0 for eid in eids)


def _answered_429(service: UserService) -> float | None:
    """When the scripted 429 was taken (the first POST's time), or None before."""
    if service.script["POST"]:
        return None
    return next(c.at for c in service.calls if c.method == "POST")


async def test_a_run_still_held_back_at_its_deadline_times_out_without_a_cancel(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """The service keeps answering 429 Retry-After: 1 past the run's 1.5 s task_timeout:
    the run ends TIMED_OUT, and no cancel call is sent (nothing was started). On a clock the
    test moves: refused at 0 s, sent again and refused at 1.1 s, timed out at 1.6 s."""
    user_service.script["POST"] = [reply(429, {}, **{"Retry-After": "1"}) for _ in range(10)]
    spec = task("job", f"{user_service.url}/jobs/x", task_timeout="1500ms")
    clock = FakeClock(datetime(2026, 3, 1, 12, 0, tzinfo=UTC))

    async def refused(times: int) -> bool:
        """The ``times``-th POST was answered 429 and that answer recorded (held back until
        a moment still ahead of the clock)."""
        execution = await daemon.store.get_execution(eid)
        posts = user_service.methods_for(eid).count("POST")
        held_until = None if execution is None else execution.not_before
        return posts == times and held_until is not None and held_until > clock.now()

    async with make_daemon([spec], clock=clock) as daemon, aiohttp.ClientSession() as session:
        eid = (await run(session, daemon.port, "job"))["id"]
        await wait_for(lambda: refused(1), timeout=10)
        clock.advance(timedelta(milliseconds=1100))  # past the Retry-After: sent again
        await wait_for(lambda: refused(2), timeout=10)
        clock.advance(timedelta(milliseconds=500))  # past the task_timeout
        final = await ended(daemon, eid, timeout=10)
    assert final.status is Status.TIMED_OUT
    assert "DELETE" not in user_service.methods_for(eid)
    assert user_service.methods_for(eid).count("POST") == 2


async def test_the_pools_endpoint_the_gauges_and_the_cli_show_running_and_waiting_runs(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """Five hour-long runs in a pool of 2: GET /pools shows 2 running and 3 waiting, the
    pool's limits and tasks; so do the gauges and ``ecron pools``; a pool defined with no
    task is listed empty."""
    user_service.duration = 3600
    pool = PoolSpec(name="exports", max_running=2, max_per_second=5)
    spare = PoolSpec(name="spare", max_running=1)
    specs = [pooled(user_service, "x", pool)]
    async with (
        make_daemon(specs, pools={"exports": pool, "spare": spare}) as daemon,
        aiohttp.ClientSession() as session,
    ):
        for _ in range(5):
            await run(session, daemon.port, "x")
        api = f"http://127.0.0.1:{daemon.port}"

        async def two_running() -> dict[str, Any] | None:
            async with session.get(f"{api}/api/v1/pools") as response:
                answer: dict[str, Any] = await response.json()
            return answer if answer["items"][0]["running"] == 2 else None

        answer = await wait_for(two_running, timeout=10)
        async with session.get(f"{api}/metrics") as response:
            metrics = await response.text()
        printed = await ecron_cli(daemon, "pools")
    exports, empty = answer["items"]
    assert exports == {
        "name": "exports",
        "max_running": 2,
        "max_per_second": 5.0,
        "running": 2,
        "waiting": 3,
        "paused_until": None,
        "tasks": ["x"],
    }
    assert empty["name"] == "spare" and empty["tasks"] == [] and empty["running"] == 0
    assert 'ecron_pool_running{pool="exports"} 2.0' in metrics
    assert 'ecron_pool_waiting{pool="exports"} 3.0' in metrics
    assert printed.exit_code == 0, printed.output
    assert any(line.split()[:3] == ["exports", "2/2", "3"] for line in printed.output.splitlines())


async def ecron_cli(daemon: Any, *args: str) -> Any:
    """``ecron ARGS`` against the daemon's API, from a thread (the daemon goes on serving)."""
    env = {"COLUMNS": "100", "ECRON_API_URL": f"http://127.0.0.1:{daemon.port}"}
    return await asyncio.to_thread(CliRunner().invoke, cli, list(args), env=env)


def test_a_task_naming_an_unknown_pool_is_an_error_naming_the_file_task_and_field(
    tmp_path: Path,
) -> None:
    """``pool: NAME`` must name a pool defined under ``pools`` (in ecron.yaml or any tasks
    file); a pool's limits are checked like any field; pools defined in a tasks file serve
    the tasks of every file."""
    (tmp_path / "tasks").mkdir()
    (tmp_path / "ecron.yaml").write_text("pools:\n  reports: {max_running: 0}\n")
    (tmp_path / "tasks" / "a.yaml").write_text(
        "pools:\n  partner: {max_per_second: 2}\n"
        "tasks:\n"
        "  - {name: a, schedule: manual, url: 'http://127.0.0.1:1/x', pool: nope}\n"
        "  - {name: b, schedule: manual, url: 'http://127.0.0.1:1/x', pool: partner}\n"
    )
    with pytest.raises(ConfigError) as caught:
        load_config(tmp_path)
    problems = caught.value.problems
    assert any(
        p.startswith("tasks/a.yaml: task 'a': field 'pool': no pool named 'nope' is defined")
        and "(defined: partner, reports)" in p
        for p in problems
    ), problems
    assert any(
        p.startswith("ecron.yaml: pool 'reports': field 'max_running':") for p in problems
    ), problems
    assert not any("task 'b'" in p for p in problems)
    (tmp_path / "ecron.yaml").write_text("pools:\n  reports: {max_running: 3}\n")
    (tmp_path / "tasks" / "a.yaml").write_text(
        "pools:\n  partner: {max_per_second: 2}\n"
        "tasks:\n  - {name: b, schedule: manual, url: 'http://127.0.0.1:1/x', pool: partner}\n"
    )
    config = load_config(tmp_path)
    assert config.tasks["b"].pool == PoolSpec(name="partner", max_per_second=2)
    assert sorted(config.pools) == ["partner", "reports"]


async def test_a_run_waiting_for_its_pool_keeps_its_lease_while_it_waits(
    database_url: str, user_service: UserService
) -> None:
    """A run that waits for its pool longer than a lease leans on its node's lease (no claim
    of its own that could run out), which the node's renewal keeps: no other node takes it
    over only to find it waiting too."""
    user_service.duration = 3600
    t0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
    pool = PoolSpec(name="one", max_running=1)
    spec = pooled(user_service, "job", pool, task_timeout="1h")
    async with (
        rig(database_url, [spec], t0) as r,
        rig(database_url, [spec], t0, node_id="n2") as other,
    ):
        await r.commands.run_now("job")
        waiting, _ = await r.commands.run_now("job")
        stored = await r.store.get_execution(waiting.eid)
        later = r.clock.set(t0 + timedelta(minutes=5))
        kept = await r.parts.leases.renew()
        taken = await other.parts.leases.take_over(later, lambda _task: True)
        after = await r.store.get_execution(waiting.eid)
    assert stored is not None and stored.status is Status.SCHEDULED
    assert stored.waiting_for == "pool"
    assert stored.lease_until is None and stored.owner_epoch == r.parts.held.lease.epoch
    assert kept is True
    assert taken == []
    assert after is not None and after.owner == stored.owner and after.fence == stored.fence
