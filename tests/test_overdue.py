"""Overdue tasks and skipped fire times as alerts (DESIGN.md, "Overdue"): ``task_overdue``
once per overdue period, from one node only; the last-success gauge; ``fire_skipped`` for a
fire time skipped for overlap."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from aiohttp import web

from ecron.config.model import TaskSpec
from ecron.metrics import Metrics
from ecron.overdue import Overdue, overdue_at
from ecron.planning import FirstFireTimes
from ecron.store.records import TaskState
from ecron.store.sql import SqlStore
from tests.support.daemon import DaemonFactory, task
from tests.support.rig import FakeClock
from tests.support.service import UserService, wait_for
from tests.test_daemon import api, final

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)


class Alerts:
    """A webhook receiver on 127.0.0.1: the alerts it got, and when (the daemon's clock)."""

    def __init__(self) -> None:
        self.received: list[dict[str, Any]] = []
        self.url = ""

    async def handle(self, request: web.Request) -> web.Response:
        self.received.append(json.loads(await request.read()))
        return web.Response(status=204)

    def of(self, event: str) -> list[dict[str, Any]]:
        return [alert for alert in self.received if alert["event"] == event]


@pytest.fixture
async def alerts() -> AsyncIterator[Alerts]:
    hook = Alerts()
    app = web.Application()
    app.router.add_post("/alerts", hook.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    hook.url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}/alerts"  # type: ignore[union-attr]
    yield hook
    await runner.cleanup()


def state(**values: Any) -> TaskState:
    defaults: dict[str, Any] = {
        "name": "t",
        "spec": task("t", "http://h/x"),
        "next_fire_at": None,
        "last_end_at": None,
        "paused": False,
        "paused_reason": None,
        "consecutive_failures": 0,
        "retired": False,
        "version": 1,
        "created_at": T0,
    }
    return TaskState(**{**defaults, **values})


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ({}, T0 + HOUR),  # never succeeded: from when it was added
        ({"last_success_at": T0 + 3 * HOUR}, T0 + 4 * HOUR),
        ({"overdue_at": T0 + HOUR}, None),  # raised already, no success since
        ({"overdue_at": T0 + HOUR, "last_success_at": T0 + 2 * HOUR}, T0 + 3 * HOUR),
        ({"overdue_at": T0 + 4 * HOUR, "last_success_at": T0 + 2 * HOUR}, None),
    ],
)
def test_a_task_is_overdue_a_period_after_its_newest_success_once_per_success(
    values: dict[str, Any], expected: datetime | None
) -> None:
    """success_within 1h: overdue an hour after the newest success (or the task's addition),
    and not again until a newer success."""
    spec = task("t", "http://h/x", expect={"success_within": "1h"})
    assert overdue_at(spec, state(**values)) == expected


async def test_two_nodes_checking_at_once_raise_task_overdue_once(database_url: str) -> None:
    """Two nodes' checks of one overdue task, at the same moment on one database: one of
    them records and raises the alert, the other does not; neither raises it again."""
    spec = task("t", "http://h/x", expect={"success_within": "1h"})
    stores = [SqlStore.open(database_url) for _ in range(2)]
    sent: list[tuple[str, str]] = []
    try:
        await stores[0].sync_tasks({"t": spec}, FirstFireTimes(T0))
        checks = [
            Overdue(
                store=store,
                specs={"t": spec},
                metrics=Metrics(),
                alert=lambda kind, name, **_: sent.append((kind, name)),
            )
            for store in stores
        ]
        raised = await asyncio.gather(*(check.check(T0 + 2 * HOUR) for check in checks))
        again = await asyncio.gather(*(check.check(T0 + 3 * HOUR) for check in checks))
    finally:
        for store in stores:
            await store.close()
    assert sorted(raised) == [0, 1] and again == [0, 0]
    assert sent == [("task_overdue", "t")]


def gauge(metrics: Metrics, name: str) -> float | None:
    for family in metrics.last_success.collect():
        for sample in family.samples:
            if sample.labels == {"task": name}:
                return float(sample.value)
    return None


async def test_task_overdue_is_sent_once_per_overdue_period(
    make_daemon: DaemonFactory, user_service: UserService, alerts: Alerts
) -> None:
    """``success_within: 1s`` on a task that has not run: one ``task_overdue`` a second
    after it was added, however many patrol rounds follow; after a success, the gauge shows
    it, and the next alert comes a second after it, naming it, and only then. (The daemon
    and the job run on a clock the test moves; it runs a patrol round every 100 ms of it.)"""
    user_service.duration = 0.05
    clock = FakeClock(T0)
    user_service.on_clock(clock)
    spec: TaskSpec = task("watched", f"{user_service.url}/jobs/w", expect={"success_within": "1s"})
    notify = {"webhooks": [{"url": alerts.url, "events": ["task_overdue"]}]}
    async with make_daemon([spec], notify=notify, patrol_interval="1h", clock=clock) as daemon:

        async def patrol_until(alerted: int) -> None:
            """A patrol round every 100 ms of the clock until ``alerted`` alerts came."""
            raised = len(alerts.of("task_overdue"))
            for _ in range(50):
                clock.advance(timedelta(milliseconds=100))
                counts = await daemon.patrol.run_once()
                assert counts is not None
                raised += counts["overdue"]
                await wait_for(lambda: len(alerts.of("task_overdue")) >= raised, timeout=5)  # noqa: B023
                if raised >= alerted:
                    return
            raise AssertionError(f"{alerted} task_overdue alerts did not come")

        added = await daemon.store.get_task("watched")
        await patrol_until(1)
        rounds = daemon.metrics.patrol_runs._value.get()
        _, started = await api(daemon, "POST", "/api/v1/tasks/watched/run")
        await wait_for(lambda: daemon.engine.settled(clock.now()), timeout=5)  # triggered
        clock.advance(timedelta(milliseconds=100))  # its poll: the job has ended
        ended = await final(daemon, started["id"])
        await patrol_until(2)
        rounds_between = daemon.metrics.patrol_runs._value.get() - rounds
        shown = gauge(daemon.metrics, "watched")
    first, second = alerts.of("task_overdue")
    assert added is not None and added.created_at is not None
    assert first["last_success_at"] is None and first["success_within"] == "1s"
    assert datetime.fromisoformat(first["at"]) >= added.created_at + timedelta(seconds=1)
    assert rounds_between >= 5  # rounds went by between the two alerts without a third
    assert second["last_success_at"] == ended["finished_at"]
    finished = datetime.fromisoformat(ended["finished_at"])
    assert datetime.fromisoformat(second["at"]) >= finished + timedelta(seconds=1)
    assert second["overdue_since"] == (finished + timedelta(seconds=1)).isoformat(
        timespec="milliseconds"
    ).replace("+00:00", "Z")
    assert shown is not None and abs(shown - finished.timestamp()) < 0.001  # shown to the ms


async def test_a_fire_time_skipped_for_overlap_sends_fire_skipped(
    make_daemon: DaemonFactory, user_service: UserService, alerts: Alerts
) -> None:
    """``every: 500ms`` with jobs of 1.2 s under forbid: the fire times that find the
    previous run still going are SKIPPED overlap, and each sends ``fire_skipped`` with its
    reason and snapshot."""
    user_service.duration = 1.2
    spec = task("busy", f"{user_service.url}/jobs/b", schedule={"every": "500ms"})
    notify = {"webhooks": [{"url": alerts.url, "events": ["fire_skipped"]}]}
    async with make_daemon([spec], notify=notify) as daemon:
        skipped = await wait_for(lambda: alerts.of("fire_skipped"), timeout=10)
        stored = await daemon.store.get_execution(skipped[0]["execution"]["id"])
    assert skipped[0]["task"] == "busy" and skipped[0]["reason"] == "overlap"
    assert skipped[0]["execution"]["status"] == "SKIPPED"
    assert stored is not None and str(stored.reason) == "overlap"


async def test_the_last_success_gauge_shows_what_other_nodes_recorded(store: SqlStore) -> None:
    """A node that saw no success itself exports, after its refresh, the newest success the
    database holds of each task in its config: stamped by another node's batch, or recorded
    with the end of a failing streak; a task without one has no series."""
    specs = {name: task(name, "http://h/x") for name in ("a", "b", "c")}
    await store.sync_tasks(specs, FirstFireTimes(T0))
    await store.task_finished("b", T0, False, None)  # b had a failure in a row
    await store.tasks_succeeded({"a": T0 + HOUR, "b": T0 + 2 * HOUR}, stamp={"a"})
    metrics = Metrics()
    await Overdue(store=store, specs=specs, metrics=metrics, alert=lambda *_, **__: None).refresh()
    assert gauge(metrics, "a") == (T0 + HOUR).timestamp()
    assert gauge(metrics, "b") == (T0 + 2 * HOUR).timestamp()
    assert gauge(metrics, "c") is None
