"""Backfill (DESIGN.md, "Scheduling rules", Backfill): a period's past fire times, as the
task's schedule, time zone, calendar and blackouts give them, listed by a dry run that
creates nothing, and run once each, oldest first, through the one start path: under
``forbid`` one after another at a real user service, none SKIPPED; a second backfill of the
same period runs none again. Requests that cannot be carried out answer 400 naming the task
and the field."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from click.testing import CliRunner

import ecron.starts as starts_module
from ecron.backfill import (
    MAX_FIRE_TIMES,
    BadBackfill,
    period_fire_times,
    read_request,
)
from ecron.cli import audit_cmd, cli  # noqa: F401  (registers the command)
from ecron.clock import iso
from ecron.config.model import TaskSpec
from ecron.config.rules import PoolSpec
from ecron.core import Execution, Status, TriggerKind
from ecron.core.audit import AuditQuery
from ecron.daemon import Daemon
from ecron.planning import Claim, FirstFireTimes, plan_fires
from tests.protocol_support import reply
from tests.support.daemon import DaemonFactory, task
from tests.support.rig import FakeClock, rig
from tests.support.service import UserService, wait_for

#: The daemons' clock: Friday 2026-11-20, 12:00 UTC.
NOW = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)
#: Monday to Saturday: Sunday is left out.
NO_SUNDAYS = {"weekdays": ["mon", "tue", "wed", "thu", "fri", "sat"]}
#: Thursday 2026-11-12, the whole UTC day.
BLACKOUT = [{"from": "2026-11-12T00:00:00Z", "to": "2026-11-13T00:00:00Z"}]
#: 09:30 in New York (EST, UTC-5 after 2026-11-01) on the days the calendar and the
#: blackout leave between Sunday 2026-11-08 and Sunday 2026-11-15: not Sunday the 8th (the
#: calendar), not Thursday the 12th (the blackout).
WEEK = [datetime(2026, 11, day, 14, 30, tzinfo=UTC) for day in (9, 10, 11, 13, 14)]
WEEK_FROM, WEEK_TO = "2026-11-08T00:00:00Z", "2026-11-15T00:00:00Z"


def at(text: str) -> datetime:
    return datetime.fromisoformat(text)


def report_task(url: str, **keys: Any) -> TaskSpec:
    """09:30 in New York, Monday to Saturday, not on 2026-11-12 (UTC)."""
    values: dict[str, Any] = {
        "schedule": "30 9 * * *",
        "timezone": "America/New_York",
        "calendar": NO_SUNDAYS,
        "blackout": BLACKOUT,
    }
    values.update(keys)
    return task("report", url, **values)


def live_fire_times(spec: TaskSpec, start: datetime, end: datetime) -> list[datetime]:
    """The fire times the live scheduler runs in ``[start, end)``: its claims (``plan_fires``)
    one after another from the task's first fire time at ``start``, each on time."""
    found: list[datetime] = []
    following = FirstFireTimes(start).of(spec)
    while following is not None and following < end:
        claim = Claim(node="n", now=following, horizon=following)
        plan = plan_fires(spec.name, spec, following, claim)
        found += [e.scheduled_at for e in plan.executions if e.status is Status.SCHEDULED]
        following = plan.next_fire_at
    return [when for when in found if start <= when < end]


# -- the fire times of a period ----------------------------------------------------------


def test_a_period_holds_the_fire_times_of_the_cron_in_its_zone_less_calendar_and_blackouts() -> (
    None
):
    """09:30 in New York over a week: Sunday (the calendar) and Thursday (a blackout) are
    left out; the others are at 14:30 UTC, oldest first."""
    spec = report_task("http://127.0.0.1:1/jobs/x")
    assert period_fire_times(spec, at(WEEK_FROM), at(WEEK_TO), NOW) == WEEK


@pytest.mark.parametrize(
    ("schedule", "timezone", "keys", "start", "end"),
    [
        # a fixed-time job across the spring gap and the autumn fold (Paris)
        ("30 2 * * *", "Europe/Paris", {}, "2026-03-27T00:00:00Z", "2026-04-01T00:00:00Z"),
        ("30 2 * * *", "Europe/Paris", {}, "2026-10-23T00:00:00Z", "2026-10-28T00:00:00Z"),
        # a job by the clock across the fold: both passes of the repeated hour
        ("*/20 * * * *", "Europe/Paris", {}, "2026-10-24T22:00:00Z", "2026-10-25T03:00:00Z"),
        # seconds, in a zone a half hour off UTC, with a calendar and a blackout
        (
            "15 */7 9-17 * * *",
            "Asia/Kolkata",
            {"calendar": NO_SUNDAYS, "blackout": BLACKOUT},
            "2026-11-07T00:00:00Z",
            "2026-11-14T00:00:00Z",
        ),
        ({"every": "7m"}, "UTC", {}, "2026-11-01T00:03:00Z", "2026-11-01T05:00:00Z"),
        (
            {"every": "90m", "start": "2026-11-01T00:10:00+01:00"},
            "UTC",
            {"blackout": BLACKOUT},
            "2026-11-10T00:00:00Z",
            "2026-11-14T00:00:00Z",
        ),
        ({"at": "2026-11-02T10:00:00Z"}, "UTC", {}, "2026-11-01T00:00:00Z", "2026-11-03T00:00:00Z"),
        ({"at": "2026-10-02T10:00:00Z"}, "UTC", {}, "2026-11-01T00:00:00Z", "2026-11-03T00:00:00Z"),
    ],
)
def test_a_periods_fire_times_are_those_the_live_scheduler_runs(
    schedule: Any, timezone: str, keys: dict[str, Any], start: str, end: str
) -> None:
    """Whatever the schedule (cron across DST changes, by the clock, with seconds; every,
    aligned or from a start; at, in the period or before it), calendar and blackouts, the
    period's fire times are exactly those the scheduler's claims run, one by one, on time."""
    spec = task("t", "http://127.0.0.1:1/jobs/x", schedule=schedule, timezone=timezone, **keys)
    found = period_fire_times(spec, at(start), at(end), NOW)
    assert found == live_fire_times(spec, at(start), at(end))
    assert found == sorted(set(found))
    if not (isinstance(schedule, dict) and "at" in schedule):
        assert len(found) > 2


def test_the_period_is_from_included_to_left_out() -> None:
    """A fire time at ``from`` is in the period, one at ``to`` is not."""
    spec = task("t", "http://127.0.0.1:1/jobs/x", schedule={"every": "1h"})
    found = period_fire_times(spec, at("2026-11-01T00:00:00Z"), at("2026-11-01T03:00:00Z"), NOW)
    assert found == [at(f"2026-11-01T0{h}:00:00Z") for h in (0, 1, 2)]


def test_up_to_10000_fire_times_a_request_and_one_more_is_refused() -> None:
    """Every second: 10,000 seconds' fire times are listed; 10,001 are refused, naming the
    task, the limit and the field ``to``."""
    spec = task("busy", "http://127.0.0.1:1/jobs/x", schedule={"every": "1s"})
    start = at("2026-11-01T00:00:00Z")
    found = period_fire_times(spec, start, start + timedelta(seconds=MAX_FIRE_TIMES), NOW)
    assert len(found) == MAX_FIRE_TIMES == 10_000
    with pytest.raises(BadBackfill) as refused:
        period_fire_times(spec, start, start + timedelta(seconds=MAX_FIRE_TIMES + 1), NOW)
    assert refused.value.field == "to"
    assert "task 'busy'" in str(refused.value) and "more than 10,000" in str(refused.value)


@pytest.mark.parametrize(
    ("schedule", "start", "end", "field", "words"),
    [
        ("manual", WEEK_FROM, WEEK_TO, "schedule", "'manual' has no fire times"),
        ({"after": "10m"}, WEEK_FROM, WEEK_TO, "schedule", "'after 10m' has no fire times"),
        ({"after_task": "up"}, WEEK_FROM, WEEK_TO, "schedule", "'after task up' has no fire"),
        ("0 * * * *", WEEK_TO, WEEK_TO, "from", "is not before 'to'"),
        ("0 * * * *", WEEK_TO, WEEK_FROM, "from", "is not before 'to'"),
        ("0 * * * *", WEEK_FROM, "2026-11-20T12:00:00.001Z", "to", "is in the future"),
    ],
)
def test_a_period_that_cannot_be_backfilled_is_refused_naming_the_task_and_the_field(
    schedule: Any, start: str, end: str, field: str, words: str
) -> None:
    """A manual, ``after`` or chained task has no fire times of its own; a period must not
    be empty nor end after now (``to`` = now is fine)."""
    spec = task("t", "http://127.0.0.1:1/jobs/x", schedule=schedule)
    with pytest.raises(BadBackfill) as refused:
        period_fire_times(spec, at(start), at(end), NOW)
    assert refused.value.field == field
    assert str(refused.value).startswith("task 't': ") and words in str(refused.value)
    if schedule == "0 * * * *":  # a period may end at now
        assert period_fire_times(spec, at(WEEK_FROM), NOW, NOW)[-1] == NOW - timedelta(hours=1)


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        (None, "body", "must be a JSON object"),
        (["2026-11-01T00:00:00Z"], "body", "must be a JSON object"),
        ({"to": WEEK_TO}, "from", "field 'from' is missing"),
        ({"from": WEEK_FROM}, "to", "field 'to' is missing"),
        ({"from": WEEK_FROM, "to": WEEK_TO, "until": 1}, "until", "field 'until' is unknown"),
        ({"from": WEEK_FROM, "to": WEEK_TO, "dry_run": "yes"}, "dry_run", "is not true or"),
        ({"from": "2026-11-01T00:00:00", "to": WEEK_TO}, "from", "has no UTC offset"),
        ({"from": "last week", "to": WEEK_TO}, "from", "is not a time"),
        ({"from": WEEK_FROM, "to": 1700000000}, "to", "is not a time"),
        ({"from": "0001-01-01T00:00:00+01:00", "to": WEEK_TO}, "from", "years 1 to 9999"),
    ],
)
def test_a_request_that_is_not_a_period_is_refused_naming_the_field(
    body: Any, field: str, words: str
) -> None:
    """The body is ``{"from", "to", "dry_run"?}``, times with their offset."""
    with pytest.raises(BadBackfill) as refused:
        read_request("t", body)
    assert refused.value.field == field and words in str(refused.value)
    assert str(refused.value).startswith("task 't': ")


def test_a_request_reads_times_with_any_offset_in_utc() -> None:
    """``+02:00`` and ``Z`` both name an instant; ``dry_run`` defaults to false."""
    start, end, dry_run = read_request(
        "t", {"from": "2026-11-08T02:00:00+02:00", "to": "2026-11-15T00:00:00.250Z"}
    )
    assert (start, end, dry_run) == (
        at("2026-11-08T00:00:00Z"),
        at("2026-11-15T00:00:00.250Z"),
        False,
    )


def test_a_date_is_its_midnight_in_the_tasks_zone_and_a_time_of_day_needs_an_offset() -> None:
    """``2026-11-08`` for a task in New York is 05:00 UTC (EST); ``2026-11-08T00:00:00``
    without an offset is still refused, naming the field."""
    start, end, _ = read_request(
        "t", {"from": "2026-11-08", "to": "2026-11-15"}, "America/New_York"
    )
    assert (start, end) == (at("2026-11-08T05:00:00Z"), at("2026-11-15T05:00:00Z"))
    assert read_request("t", {"from": "2026-11-08", "to": WEEK_TO})[0] == at(WEEK_FROM)
    with pytest.raises(BadBackfill) as refused:
        read_request("t", {"from": "2026-11-08T00:00:00", "to": WEEK_TO}, "America/New_York")
    assert refused.value.field == "from" and "has no UTC offset" in str(refused.value)


# -- through the API, against a real user service ----------------------------------------


async def test_dates_are_read_in_the_tasks_zone_and_the_audit_says_the_period_and_if_dry(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """A backfill of New York's 8 to 15 November given as dates, once as a dry run and once
    for real: both answer the period from 05:00 UTC (midnight in New York) and the same 5
    fire times; the audit log has each request with its period and whether it was a dry
    run, and ``ecron audit`` says so in its detail column (the period in the task's zone)."""
    clock = FakeClock(NOW)
    spec = report_task(f"{user_service.url}/jobs/report")
    async with make_daemon([spec], clock=clock) as daemon:
        body = {"from": "2026-11-08", "to": "2026-11-15"}
        dry = await post(daemon, "report", {**body, "dry_run": True})
        real = await post(daemon, "report", body)
        entries = (await daemon.audit.page(AuditQuery(action="backfill", limit=10))).items
        env = {"COLUMNS": "120", "ECRON_API_URL": f"http://127.0.0.1:{daemon.port}"}
        shown = await asyncio.to_thread(CliRunner().invoke, cli, ["audit"], env=env)
    period = {"from": "2026-11-08T05:00:00.000Z", "to": "2026-11-15T05:00:00.000Z"}
    for status, answer in (dry, real):
        assert (answer["from"], answer["to"]) == (period["from"], period["to"])
        assert answer["fire_times"] == [iso(when) for when in WEEK], status
    assert (dry[0], real[0]) == (200, 202)
    assert [entry.detail for entry in entries] == [
        {**period, "dry_run": False},
        {**period, "dry_run": True},
    ]
    rows = [line.rstrip() for line in shown.output.splitlines() if " backfill " in line]
    assert shown.exit_code == 0 and len(rows) == 2, shown.output
    assert rows[0].endswith("2026-11-08 00:00:00 EST to 2026-11-15 00:00:00 EST"), rows
    assert rows[1].endswith("2026-11-08 00:00:00 EST to 2026-11-15 00:00:00 EST (dry run)"), rows


class Concurrency:
    """What a user service sees: which backfilled jobs run at once (from the trigger until
    the poll that answers their end), the most at once, and the fire times in the order
    their triggers came."""

    def __init__(self, service: UserService) -> None:
        self.service = service
        self.running: set[str] = set()
        self.most = 0
        self.triggered: list[str] = []

    async def __call__(self, request: web.Request) -> None:
        eid = request.match_info.get("eid") or request.headers.get("X-Ecron-Execution-Id", "")
        if request.method == "POST":
            self.running.add(eid)
            self.most = max(self.most, len(self.running))
            self.triggered.append(request.headers["X-Ecron-Scheduled-At"])
            return
        job = self.service.jobs.get(eid)
        if job is not None and job.report(self.service.job_time())["status"] != "RUNNING":
            self.running.discard(eid)


async def post(daemon: Daemon, name: str, body: Any, **headers: str) -> tuple[int, Any]:
    """POST ``body`` to the task's backfill endpoint; the status and the JSON answer."""
    url = f"http://127.0.0.1:{daemon.port}/api/v1/tasks/{name}/backfill"
    async with (
        aiohttp.ClientSession() as session,
        session.post(url, json=body, headers=headers) as response,
    ):
        return response.status, await response.json()


async def every_execution(daemon: Daemon, name: str) -> list[Execution]:
    """The task's executions, claimed ones included, by fire time."""
    store = daemon.store
    page = await store.list_executions(task=name, limit=500)
    claimed = await store.list_executions(task=name, status=Status.SCHEDULED, limit=500)
    return sorted([*page.items, *claimed.items], key=lambda e: (e.scheduled_at, e.eid))


async def run_clock(daemon: Daemon, clock: FakeClock, name: str, count: int) -> list[Execution]:
    """Move ``clock`` 100 ms at a time, each time until the engine has carried out what is
    due, until the task has ``count`` executions, all final; them, by fire time."""
    for _ in range(600):
        found = await every_execution(daemon, name)
        if len(found) == count and all(e.is_final for e in found):
            await daemon.writer.drain()
            return found
        now = clock.advance(timedelta(milliseconds=100))
        await wait_for(lambda: daemon.engine.settled(now), timeout=5)  # noqa: B023
    raise AssertionError("the backfilled runs did not all end within a minute of the clock")


async def test_a_dry_run_lists_the_periods_fire_times_and_creates_nothing(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """``"dry_run": true``: 200, the fire times of the cron in New York less the calendar's
    Sunday and the blackout's Thursday, ``count`` 5, nothing already run, no executions;
    nothing is created and the user service hears nothing."""
    clock = FakeClock(NOW)
    spec = report_task(f"{user_service.url}/jobs/report")
    async with make_daemon([spec], clock=clock) as daemon:
        body = {"from": WEEK_FROM, "to": WEEK_TO, "dry_run": True}
        status, answer = await post(daemon, "report", body)
        created = await every_execution(daemon, "report")
    assert status == 200, answer
    assert answer == {
        "task": "report",
        "from": "2026-11-08T00:00:00.000Z",
        "to": "2026-11-15T00:00:00.000Z",
        "fire_times": [iso(when) for when in WEEK],
        "count": 5,
        "already_run": 0,
        "executions": [],
    }
    assert created == [] and user_service.calls == []


async def test_a_backfill_runs_each_fire_time_once_oldest_first_one_at_a_time_under_forbid(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """202 and one execution per fire time (``trigger_kind: backfill``, ``scheduled_at`` that
    fire time; the service is told ``X-Ecron-Trigger-Kind: backfill``). Under ``forbid`` the
    user service sees them one at a time, oldest fire time first; each starts the moment
    the one before ends (woken, not polled for), and all end SUCCESS, none SKIPPED. A second
    backfill of the period creates nothing: ``already_run`` is all of them, and no trigger
    reaches the service again; a dry run says the same."""
    clock = FakeClock(NOW)
    user_service.on_clock(clock)
    user_service.duration = 1.0
    seen = Concurrency(user_service)
    user_service.behaviour = seen
    spec = report_task(f"{user_service.url}/jobs/report", concurrency="forbid")
    async with make_daemon([spec], clock=clock) as daemon:
        status, answer = await post(daemon, "report", {"from": WEEK_FROM, "to": WEEK_TO})
        ran = await run_clock(daemon, clock, "report", len(WEEK))
        again_status, again = await post(daemon, "report", {"from": WEEK_FROM, "to": WEEK_TO})
        preview = await post(daemon, "report", {"from": WEEK_FROM, "to": WEEK_TO, "dry_run": True})
        after = await every_execution(daemon, "report")
    assert status == 202, answer
    assert (answer["count"], answer["already_run"]) == (5, 0)
    assert answer["executions"] == [e.eid for e in ran]
    assert [e.scheduled_at for e in ran] == WEEK
    assert {(e.trigger_kind, e.status, e.attempt) for e in ran} == {
        (TriggerKind.BACKFILL, Status.SUCCESS, 1)
    }
    assert seen.most == 1
    assert seen.triggered == [iso(when) for when in WEEK]
    for before, following in pairwise(ran):
        assert following.triggered_at == before.finished_at  # woken by the end
    assert again_status == 202
    assert (again["count"], again["already_run"], again["executions"]) == (5, 5, [])
    assert again["fire_times"] == answer["fire_times"]
    assert preview == (200, again)
    assert [e.eid for e in after] == [e.eid for e in ran]
    assert sorted(user_service.starts.values()) == [1] * 5
    headers = [user_service.calls_for(e.eid, "POST")[0].headers for e in ran]
    assert {(h["X-Ecron-Trigger-Kind"], h["X-Ecron-Attempt"]) for h in headers} == {
        ("backfill", "1")
    }


async def test_a_backfill_outlives_a_restart_of_its_node_and_runs_each_fire_time_once(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """The daemon stops while the first backfilled run runs and the four others wait; a new
    one on the same database takes them over: the running one is followed, never triggered
    again, and the others run after it, one at a time, oldest first. Every fire time ran
    once, SUCCESS."""
    clock = FakeClock(NOW)
    user_service.on_clock(clock)
    user_service.duration = 1.0
    seen = Concurrency(user_service)
    user_service.behaviour = seen
    spec = report_task(f"{user_service.url}/jobs/report")
    async with make_daemon([spec], clock=clock) as first:
        status, answer = await post(first, "report", {"from": WEEK_FROM, "to": WEEK_TO})
        await wait_for(lambda: seen.triggered, timeout=5)
        waiting = [e for e in await every_execution(first, "report") if e.waiting_for]
    async with make_daemon([spec], clock=clock) as second:
        ran = await run_clock(second, clock, "report", len(WEEK))
    assert status == 202 and len(waiting) == 4
    assert [e.eid for e in ran] == answer["executions"]
    assert [(e.scheduled_at, e.status) for e in ran] == [(when, Status.SUCCESS) for when in WEEK]
    assert seen.most == 1 and seen.triggered == [iso(when) for when in WEEK]
    assert sorted(user_service.starts.values()) == [1] * 5
    assert [len(user_service.calls_for(e.eid, "POST")) for e in ran] == [1] * 5
    assert {e.waiting_for for e in ran} == {None}  # the wait is over, and said so
    assert not [e.message for e in ran if "waiting for" in (e.message or "")]


async def test_backfilled_runs_wait_in_their_pool_behind_a_live_run_of_another_task(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """A week backfilled (``allow``) in a pool of ``max_running: 1`` that another task
    shares, whose run is asked while the first backfilled one runs: never two jobs at once
    at the service; when the slot frees, the other task's run goes first (live runs before
    backfilled ones in a pool's line), then the backfilled ones, oldest fire time first;
    all SUCCESS, none SKIPPED."""
    clock = FakeClock(NOW)
    user_service.on_clock(clock)
    user_service.duration = 1.0
    seen = Concurrency(user_service)
    user_service.behaviour = seen
    pool = PoolSpec(name="reports", max_running=1)
    url = f"{user_service.url}/jobs/report"
    specs = [report_task(url, concurrency="allow", pool=pool), task("other", url, pool=pool)]
    async with make_daemon(specs, clock=clock) as daemon:
        status, _ = await post(daemon, "report", {"from": WEEK_FROM, "to": WEEK_TO})
        await wait_for(lambda: seen.triggered, timeout=5)
        other, _ = await daemon.parts.commands.run_now("other")
        ran = await run_clock(daemon, clock, "report", len(WEEK))
        [other_done] = await run_clock(daemon, clock, "other", 1)
    assert status == 202 and seen.most == 1
    assert [(e.scheduled_at, e.status) for e in ran] == [(when, Status.SUCCESS) for when in WEEK]
    week = [iso(when) for when in WEEK]
    assert seen.triggered == [week[0], iso(other.scheduled_at), *week[1:]]
    assert other_done.status is Status.SUCCESS


async def test_fire_times_with_an_execution_already_are_counted_and_not_run_again(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """A backfill of the first three days, then of the week: the second runs only the two
    fire times the first did not, and counts the three as ``already_run``."""
    clock = FakeClock(NOW)
    user_service.on_clock(clock)
    user_service.duration = 0.2
    spec = report_task(f"{user_service.url}/jobs/report", concurrency="allow")
    async with make_daemon([spec], clock=clock) as daemon:
        _, first = await post(daemon, "report", {"from": WEEK_FROM, "to": "2026-11-12T00:00:00Z"})
        await run_clock(daemon, clock, "report", 3)
        status, week = await post(daemon, "report", {"from": WEEK_FROM, "to": WEEK_TO})
        ran = await run_clock(daemon, clock, "report", 5)
    assert len(first["executions"]) == 3
    assert status == 202 and (week["count"], week["already_run"]) == (5, 3)
    assert week["executions"] == [e.eid for e in ran[3:]]
    assert [e.scheduled_at for e in ran] == WEEK
    assert all(e.status is Status.SUCCESS for e in ran)
    assert sorted(user_service.starts.values()) == [1] * 5


async def test_requests_that_cannot_be_carried_out_answer_400_naming_the_task_and_field(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """400 for a manual, ``after`` (even disabled) or chained task, an empty period, one
    ending in the future, over 10,000 fire times, or a body that is not a period; 404 for an
    unknown task; 409 for a paused one (a dry run still answers); 401 without the API token.
    Nothing is created by any of them."""
    url = f"{user_service.url}/jobs/x"
    specs = [
        report_task(url),
        task("by-hand", url),
        task("spaced", url, schedule={"after": "10m"}, enabled=False),  # else it fires now
        task("chained", url, schedule={"after_task": "report"}),
        task("busy", url, schedule="* * 0-5 * * *"),  # every second from 00:00 to 06:00
        task("held", url, schedule="0 0 * * *"),
    ]
    week = {"from": WEEK_FROM, "to": WEEK_TO}
    token = {"Authorization": "Bearer t0k-0123456789abcdef"}
    async with make_daemon(specs, clock=FakeClock(NOW), api_token="t0k-0123456789abcdef") as daemon:
        answers = {
            "manual": await post(daemon, "by-hand", week, **token),
            "after": await post(daemon, "spaced", week, **token),
            "chained": await post(daemon, "chained", week, **token),
            "empty": await post(daemon, "report", {**week, "to": WEEK_FROM}, **token),
            "future": await post(daemon, "report", {**week, "to": "2026-11-21T00:00:00Z"}, **token),
            "many": await post(daemon, "busy", week, **token),
            "body": await post(daemon, "report", {"from": WEEK_FROM}, **token),
            "unknown": await post(daemon, "nope", week, **token),
            "no token": await post(daemon, "report", week),
        }
        await daemon.parts.commands.pause("held", "maintenance")
        answers["paused"] = await post(daemon, "held", week, **token)
        dry = await post(daemon, "held", {**week, "dry_run": True}, **token)
        created = [
            e for name in ("report", "busy", "held") for e in await every_execution(daemon, name)
        ]
    statuses = {case: status for case, (status, _) in answers.items()}
    assert statuses == {
        "manual": 400, "after": 400, "chained": 400, "empty": 400, "future": 400,
        "many": 400, "body": 400, "unknown": 404, "no token": 401, "paused": 409,
    }  # fmt: skip
    fields = {case: body["detail"]["field"] for case, (s, body) in answers.items() if s == 400}
    assert fields == {
        "manual": "schedule", "after": "schedule", "chained": "schedule", "empty": "from",
        "future": "to", "many": "to", "body": "to",
    }  # fmt: skip
    assert answers["manual"][1]["error"].startswith("task 'by-hand': field 'schedule': ")
    assert answers["future"][1]["error"].startswith("task 'report': field 'to': 2026-11-21T")
    assert answers["many"][1]["error"].startswith("task 'busy': field 'to': the period from ")
    assert answers["unknown"][1]["error"] == "no task 'nope'"
    assert answers["paused"][1]["error"] == "task 'held' is paused: unpause it first, then backfill"
    assert dry[0] == 200 and dry[1]["count"] == 7
    assert created == [] and user_service.calls == []


async def test_a_failed_backfilled_run_is_retried_before_the_next_fire_time_runs(
    database_url: str, user_service: UserService
) -> None:
    """Two fire times backfilled under ``forbid`` with ``retry.max_attempts: 1``: the first
    one's trigger is answered FAILED; its retry, 2 s later, runs and succeeds, and neither
    it nor the second fire time is SKIPPED."""
    user_service.duration = 5.0
    user_service.script["POST"] = [reply(200, {"status": "FAILED", "message": "no"})]
    spec = task(
        "b",
        f"{user_service.url}/jobs/x",
        schedule={"every": "1h"},
        retry={"max_attempts": 1, "backoff": "2s"},
        enabled=False,  # only the backfill runs it
    )
    async with rig(database_url, [spec], NOW) as r:
        user_service.on_clock(r.clock)
        await r.commands.backfill("b", NOW - timedelta(hours=2), NOW, dry_run=False)
        for _ in range(100):
            found = await r.executions("b")
            if len(found) == 3 and all(e.is_final for e in found):
                break
            now = r.clock.advance(timedelta(milliseconds=500))
            await wait_for(lambda: r.engine.settled(now), timeout=5)  # noqa: B023
        await r.parts.bookkeeping.flush()  # the successes' book-keeping, before the store closes
    ran = sorted(found, key=lambda e: (e.scheduled_at, e.attempt))
    assert [(e.trigger_kind, e.attempt, e.status) for e in ran] == [
        (TriggerKind.BACKFILL, 1, Status.FAILED),
        (TriggerKind.RETRY, 2, Status.SUCCESS),
        (TriggerKind.BACKFILL, 1, Status.SUCCESS),
    ]


@pytest.fixture
def asked(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The eid of every run the one start decision is asked about, in order (the real
    ``decide_start`` still decides)."""
    seen: list[str] = []
    real = starts_module.decide_start

    def counted(execution: Execution, spec: Any, gate: Any, now: datetime) -> Any:
        seen.append(execution.eid)
        return real(execution, spec, gate, now)

    monkeypatch.setattr(starts_module, "decide_start", counted)
    return seen


async def test_each_end_of_a_backfilled_run_wakes_only_the_next_one(
    database_url: str, user_service: UserService, asked: list[str]
) -> None:
    """Forty fire times backfilled under ``forbid``, each job done at its trigger: they run
    one after another, and each end asks the start decision about the next run only (the
    others could not start before it), so forty runs cost about eighty decisions, not the
    eight hundred of waking every waiting run at every end."""
    user_service.duration = 0.0
    spec = task("b", f"{user_service.url}/jobs/x", schedule={"every": "1h"}, enabled=False)
    async with rig(database_url, [spec], NOW) as r:
        done = await r.commands.backfill("b", NOW - timedelta(hours=40), NOW, dry_run=False)
        ran = await r.settled("b", 40)
    assert [e.eid for e in ran] == list(done.executions)
    assert all(e.status is Status.SUCCESS for e in ran)
    assert [user_service.starts.get(eid) for eid in done.executions] == [1] * 40
    assert len(asked) <= 2 * 40 + 5


async def test_while_a_long_backfill_runs_only_the_run_next_in_line_is_decided_again(
    database_url: str, user_service: UserService, asked: list[str]
) -> None:
    """Sixty fire times backfilled under ``forbid``, the first one running for a minute:
    over ten seconds the start decision is asked again about the run next in line, once a
    second, and not about the fifty-eight behind it (they cannot start before it does), so
    a backfill of thousands of fire times does not cost thousands of decisions a second."""
    user_service.duration = 60.0
    spec = task("b", f"{user_service.url}/jobs/x", schedule={"every": "1h"}, enabled=False)
    async with rig(database_url, [spec], NOW) as r:
        user_service.on_clock(r.clock)
        done = await r.commands.backfill("b", NOW - timedelta(hours=60), NOW, dry_run=False)
        await wait_for(lambda: r.engine.settled(r.clock.now()))
        first_round = len(asked)
        for _ in range(10):
            now = r.clock.advance(timedelta(seconds=1))
            await wait_for(lambda: r.engine.settled(now), timeout=5)  # noqa: B023
        again = asked[first_round:]
        waiting = [e for e in await r.executions("b") if e.status is Status.SCHEDULED]
    assert len(done.executions) == 60 and first_round == 60 and len(waiting) == 59
    assert set(again) == {done.executions[1]} and 9 <= len(again) <= 11


async def test_a_backfill_starts_at_most_backfill_max_runs_and_a_task_never_holds_more(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """With `backfill_max_runs: 5`, an hourly task: a period of 6 fire times to run answers
    400 naming the count and the limit, and creates nothing (one request made 10,000 runs
    in 0.37 s, and a node holding them queued used 80 % of a core); 3 of them are created
    and stay unfinished (the service holds them); 3 more answer 400 naming the 3 unfinished,
    and create nothing; a dry run of 10 still lists every fire time."""
    user_service.durations = {"x": 3600}
    hourly = task("hourly", f"{user_service.url}/jobs/x", schedule="0 * * * *", concurrency="allow")
    hours = [NOW - timedelta(hours=12) + timedelta(hours=n) for n in range(11)]
    async with make_daemon([hourly], clock=FakeClock(NOW), backfill_max_runs=5) as daemon:
        six = await post(daemon, "hourly", {"from": iso(hours[0]), "to": iso(hours[6])})
        after_six = await every_execution(daemon, "hourly")
        three = await post(daemon, "hourly", {"from": iso(hours[0]), "to": iso(hours[3])})
        more = await post(daemon, "hourly", {"from": iso(hours[3]), "to": iso(hours[6])})
        dry = await post(
            daemon, "hourly", {"from": iso(hours[0]), "to": iso(hours[10]), "dry_run": True}
        )
        held = [
            e
            for e in await every_execution(daemon, "hourly")
            if e.trigger_kind is TriggerKind.BACKFILL
        ]
    assert six[0] == 400 and not [e for e in after_six if e.trigger_kind is TriggerKind.BACKFILL]
    assert six[1]["detail"] == {"field": "to", "value": {"runs": 6, "backfill_max_runs": 5}}
    assert "6 fire times to run" in six[1]["error"] and "backfill_max_runs" in six[1]["error"]
    assert three[0] == 202 and len(three[1]["executions"]) == 3
    assert more[0] == 400
    assert more[1]["detail"]["value"] == {"runs": 3, "unfinished": 3, "backfill_max_runs": 5}
    assert "3 backfilled runs not ended" in more[1]["error"]
    assert dry[0] == 200 and dry[1]["count"] == 10
    assert len(held) == 3 and not any(e.is_final for e in held)
