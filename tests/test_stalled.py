"""Stalled executions (DESIGN.md, "Stalled executions"): ``expect: {progress_within: D}``
raises ``execution_stalled`` once per execution whose progress has not moved for ``D``
while RUNNING, and never for one whose progress moves; the snapshot's ``stalled`` says so,
and ``ecron show`` marks it."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from aiohttp import web
from pydantic import ValidationError
from rich.text import Text

from ecron.cli.display import stalled_text
from ecron.config.model import TaskSpec
from ecron.core import Execution, Reported, Status, apply, is_stalled, parse_report
from ecron.core.status import Channel
from ecron.daemon import Daemon
from ecron.executor import recorder
from ecron.planning import FirstFireTimes
from ecron.stalled import Stalled
from ecron.store.sql import SqlStore
from tests.support.daemon import DaemonFactory, task
from tests.support.rig import FakeClock
from tests.support.service import UserService, wait_for
from tests.test_cli_client import ecron
from tests.test_daemon import api
from tests.test_overdue import Alerts, alerts  # noqa: F401  (the webhook receiver fixture)

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
MINUTE = timedelta(minutes=1)
#: How far the clock moves between two patrol rounds (a poll in between).
STEP = timedelta(seconds=5)


def running(**changes: Any) -> Execution:
    """A RUNNING execution triggered at T0, at 10 %."""
    base = Execution(
        eid="01J0000000000000000000000",
        task="t",
        scheduled_at=T0,
        created_at=T0,
        status=Status.RUNNING,
        progress=10.0,
        triggered_at=T0,
    )
    return base.evolve(**changes)


@pytest.mark.parametrize(
    ("changes", "at", "expected"),
    [
        ({}, T0 + MINUTE, True),  # no change of progress yet: from its trigger
        ({}, T0 + MINUTE - timedelta(milliseconds=1), False),
        ({"progress_at": T0 + 30 * timedelta(seconds=1)}, T0 + MINUTE, False),
        ({"progress_at": T0 + 30 * timedelta(seconds=1)}, T0 + 2 * MINUTE, True),
        ({"status": Status.PENDING}, T0 + 5 * MINUTE, False),
        ({"status": Status.SUCCESS, "finished_at": T0}, T0 + 5 * MINUTE, False),
    ],
)
def test_a_running_execution_is_stalled_once_its_progress_has_not_moved_for_the_limit(
    changes: dict[str, Any], at: datetime, expected: bool
) -> None:
    """progress_within 1m: stalled a minute after its last change of progress (or, before
    any, its trigger), only while RUNNING."""
    assert is_stalled(running(**changes), MINUTE, at) is expected


def test_a_task_without_progress_within_never_has_stalled_executions() -> None:
    """No ``progress_within``: never stalled, however long the progress stands still."""
    assert is_stalled(running(), None, T0 + 100 * MINUTE) is False


def report(progress: float, message: str) -> Reported:
    return Reported(
        parse_report({"status": "RUNNING", "progress": progress, "message": message}),
        Channel.CALLBACK,
    )


def test_progress_at_moves_with_the_progress_and_only_with_it() -> None:
    """A report that changes the progress sets progress_at to its moment; one that only
    changes the message (or repeats the progress) leaves it."""
    moved = apply(running(), report(20.0, "a"), T0 + MINUTE).after
    same = apply(moved, report(20.0, "b"), T0 + 2 * MINUTE).after
    assert moved.progress_at == T0 + MINUTE
    assert same.message == "b" and same.last_report_at == T0 + 2 * MINUTE
    assert same.progress_at == T0 + MINUTE


@pytest.mark.parametrize(
    ("expect", "error"),
    [
        ({"progress_within": "0s"}, "longer than zero"),
        ({}, "success_within, progress_within or both"),
    ],
)
def test_expect_needs_a_positive_duration(expect: dict[str, Any], error: str) -> None:
    """``progress_within`` must be longer than zero; ``expect`` must say something."""
    with pytest.raises(ValidationError, match=error):
        task("t", "http://h/x", expect=expect)


def test_progress_within_alone_is_a_valid_expect() -> None:
    """``expect: {progress_within: 30m}`` without ``success_within`` is accepted."""
    spec = task("t", "http://h/x", expect={"progress_within": "30m"})
    assert spec.expect is not None and spec.expect.progress_within == 30 * MINUTE
    assert spec.expect.success_within is None


@pytest.mark.parametrize(
    ("item", "expected"),
    [
        ({"stalled": True, "progress_at": "2026-06-01T11:29:00Z"}, "stalled 31 min"),
        ({"stalled": True, "progress_at": None, "triggered_at": "2026-06-01T10:00:00Z"},
         "stalled 2 h"),
        ({"stalled": True, "progress_at": "2026-05-20T12:00:00Z"},
         "stalled since 2026-05-20 12:00:00 UTC"),
        ({"stalled": True, "progress_at": "2026-06-01T12:05:00Z"}, "stalled"),  # clock behind
        ({"stalled": False, "progress_at": "2026-06-01T11:29:00Z"}, ""),
    ],
)  # fmt: skip
def test_the_cli_says_for_how_long_a_stalled_execution_has_not_moved(
    item: dict[str, Any], expected: str
) -> None:
    """``stalled 31 min`` after the progress, from progress_at (or the trigger), by the
    computer's clock; the date past a day; nothing for an execution that is not stalled."""
    text = Text.from_markup(stalled_text(item, T0)).plain
    assert text.startswith(expected) and (expected or not text)


class Answering:
    """A behaviour: every poll is answered RUNNING at the next of ``progress``; triggers go
    on as usual. ``last``: the progress answered last."""

    def __init__(self, progress: Iterator[float]) -> None:
        self.progress = progress
        self.last: float | None = None

    async def __call__(self, request: web.Request) -> web.StreamResponse | None:
        if request.method != "GET":
            return None
        self.last = next(self.progress)
        return web.json_response(
            {"status": "RUNNING", "progress": self.last, "message": f"{self.last}%"}
        )


async def drive(
    daemon: Daemon, clock: FakeClock, service: UserService, eid: str, rounds: int
) -> list[int]:
    """``rounds`` times: move the clock ``STEP`` on, wait for the execution's poll and for
    its progress to be in the database, then run one patrol round; what the stalled job
    raised in each."""
    answering = service.behaviour
    assert isinstance(answering, Answering)
    raised = []
    for _ in range(rounds):
        seen = len(service.calls_for(eid, "GET"))
        clock.advance(STEP)
        await wait_for(lambda: len(service.calls_for(eid, "GET")) > seen, timeout=5)  # noqa: B023

        async def stored() -> bool:
            execution = await daemon.store.get_execution(eid)
            return execution is not None and execution.progress == answering.last

        await wait_for(stored, timeout=5)
        counts = await daemon.patrol.run_once()
        assert counts is not None
        raised.append(counts["stalled"])
    return raised


async def test_a_frozen_job_raises_execution_stalled_once_and_shows_stalled(
    make_daemon: DaemonFactory,
    user_service: UserService,
    alerts: Alerts,  # noqa: F811
) -> None:
    """progress_within 1m, a job whose polls say 10 % forever: over 24 patrol rounds 5 s
    apart, one execution_stalled (a minute after its progress last moved, through the
    webhook, with its snapshot), its snapshot stalled from then on, and ``ecron show``
    says "stalled"; before the minute, stalled is false."""
    clock = FakeClock(T0)
    user_service.behaviour = Answering(itertools.repeat(10.0))
    user_service.duration = 3600
    spec: TaskSpec = task("frozen", f"{user_service.url}/jobs/f", expect={"progress_within": "1m"})
    notify = {"webhooks": [{"url": alerts.url, "events": ["execution_stalled"]}]}
    async with make_daemon([spec], notify=notify, patrol_interval="1h", clock=clock) as daemon:
        _, started = await api(daemon, "POST", "/api/v1/tasks/frozen/run")
        eid = started["id"]
        await wait_for(lambda: daemon.engine.settled(clock.now()), timeout=5)  # triggered
        early = await drive(daemon, clock, user_service, eid, 3)
        _, before = await api(daemon, "GET", f"/api/v1/executions/{eid}")
        later = await drive(daemon, clock, user_service, eid, 21)
        await wait_for(lambda: alerts.of("execution_stalled"), timeout=5)
        _, after = await api(daemon, "GET", f"/api/v1/executions/{eid}")
        shown = await ecron(daemon, "show", eid)
    [alert] = alerts.of("execution_stalled")
    assert early == [0, 0, 0] and sum(later) == 1
    assert before["status"] == "RUNNING" and before["stalled"] is False
    assert before["progress_at"] is not None
    moved = datetime.fromisoformat(before["progress_at"])
    assert after["status"] == "RUNNING" and after["stalled"] is True
    assert after["progress_at"] == before["progress_at"]  # 10 % all along: it never moved
    assert alert["task"] == "frozen" and alert["execution"]["id"] == eid
    assert alert["execution"]["stalled"] is True and alert["progress_within"] == "1m"
    assert alert["stalled_since"] == before["progress_at"]
    assert datetime.fromisoformat(alert["at"]) >= moved + MINUTE
    assert shown.exit_code == 0, shown.output
    assert "stalled" in shown.output


async def test_a_moving_job_never_raises_execution_stalled(
    make_daemon: DaemonFactory,
    user_service: UserService,
    alerts: Alerts,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """progress_within 1m, a job whose progress moves a little at each poll (5 s apart):
    over 24 patrol rounds (two minutes), no execution_stalled, and its snapshot says
    stalled false. Each round's progress is written before the patrol reads it: the writer
    lets a change of progress settle for ``PROGRESS_SETTLE`` of real time (2 s, against a
    ``progress_within`` of minutes), which on this clock's two minutes in a few seconds
    would be 24 rounds of waiting, so it settles for none here."""
    monkeypatch.setattr(recorder, "PROGRESS_SETTLE", timedelta(0))
    clock = FakeClock(T0)
    user_service.behaviour = Answering(n / 10 for n in itertools.count(1))
    spec: TaskSpec = task("moving", f"{user_service.url}/jobs/m", expect={"progress_within": "1m"})
    notify = {"webhooks": [{"url": alerts.url, "events": ["execution_stalled"]}]}
    async with make_daemon([spec], notify=notify, patrol_interval="1h", clock=clock) as daemon:
        _, started = await api(daemon, "POST", "/api/v1/tasks/moving/run")
        eid = started["id"]
        await wait_for(lambda: daemon.engine.settled(clock.now()), timeout=5)  # triggered
        raised = await drive(daemon, clock, user_service, eid, 24)
        _, shown = await api(daemon, "GET", f"/api/v1/executions/{eid}")
    assert raised == [0] * 24 and alerts.of("execution_stalled") == []
    assert shown["status"] == "RUNNING" and shown["stalled"] is False
    assert datetime.fromisoformat(shown["progress_at"]) == T0 + 24 * STEP


async def test_two_nodes_checking_at_once_raise_execution_stalled_once(
    database_url: str,
) -> None:
    """Two nodes' checks of one stalled execution at the same moment, on one database: one
    records and raises the alert; neither raises it again later, nor does a third check
    made afresh (a node started later, or after a restart)."""
    spec = task("t", "http://h/x", expect={"progress_within": "1m"})
    stores = [SqlStore.open(database_url) for _ in range(3)]
    sent: list[tuple[str, str]] = []

    def alert(kind: str, name: str, **_: Any) -> None:
        sent.append((kind, name))

    try:
        await stores[0].sync_tasks({"t": spec}, FirstFireTimes(T0))
        await stores[0].create_execution(running(progress_at=T0))
        checks = [Stalled(store=store, specs={"t": spec}, alert=alert) for store in stores]
        none = await asyncio.gather(*(c.check(T0 + MINUTE / 2) for c in checks[:2]))
        raised = await asyncio.gather(*(c.check(T0 + MINUTE) for c in checks[:2]))
        again = [await c.check(T0 + 2 * MINUTE) for c in checks]
    finally:
        for store in stores:
            await store.close()
    assert none == [0, 0] and sorted(raised) == [0, 1] and again == [0, 0, 0]
    assert sent == [("execution_stalled", "t")]
