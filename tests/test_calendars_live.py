"""Calendars and blackouts on a live daemon (SQLite and PostgreSQL, a real user service):
fire times they exclude make no execution, and the next fire time shown is the one that
will run; a reload that changes the calendar is followed at once."""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from ecron.clock import iso
from ecron.daemon import Daemon
from tests.support.daemon import DaemonFactory, task
from tests.support.rig import FakeClock
from tests.support.service import UserService, wait_for
from tests.test_daemon import api

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
SECOND = timedelta(seconds=1)


def zone_near_noon(now: datetime) -> str:
    """A fixed-offset zone whose clock reads about noon at ``now``: far from any midnight,
    so "today" stays today for the whole test."""
    offset = max(-12, min(14, 12 - now.hour))
    return "UTC" if offset == 0 else f"Etc/GMT{'-' if offset > 0 else '+'}{abs(offset)}"


async def step(daemon: Daemon, clock: FakeClock) -> None:
    """Move the clock 100 ms on; wait until the scheduler went round at the new time and the
    engine carried out what is due by then. (The scheduler is woken as well: a round that
    began before the move and ended after it would otherwise wait for the next move.)"""
    now = clock.advance(timedelta(milliseconds=100))
    daemon.scheduler.wake()
    await wait_for(lambda: (daemon.scheduler.last_tick or now) >= now, timeout=5)
    await wait_for(lambda: daemon.engine.settled(now), timeout=5)


async def executions(daemon: Daemon, name: str) -> list[dict[str, Any]]:
    _, page = await api(daemon, "GET", "/api/v1/executions", params={"task": name})
    items: list[dict[str, Any]] = page["items"]
    return sorted(items, key=lambda item: item["scheduled_at"])


def excluded_count(daemon: Daemon, name: str, reason: str) -> float:
    """``ecron_fires_excluded_total{task, reason}`` as the daemon counts it."""
    for family in daemon.metrics.fires_excluded.collect():
        for sample in family.samples:
            if sample.name.endswith("_total") and sample.labels == {"task": name, "reason": reason}:
                return float(sample.value)
    return 0.0


async def test_a_blackout_covering_now_delays_the_first_trigger_to_its_end(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """``every: 500ms`` under a window that began an hour ago and ends in two seconds: the
    task shows the window's end as its next fire time, its first trigger carries that fire
    time and leaves no earlier, nothing is recorded inside the window, and the fire times
    planned out are counted. (The daemon and the jobs run on a clock the test moves 100 ms
    at a time.)"""
    user_service.duration = 0.05
    clock = FakeClock(T0)
    user_service.on_clock(clock)
    end = T0 + timedelta(seconds=2)
    window = {"from": iso(end - timedelta(hours=1)), "to": iso(end)}
    spec = task(
        "quiet", f"{user_service.url}/jobs/q", schedule={"every": "500ms"}, blackout=[window]
    )
    async with make_daemon([spec], clock=clock) as daemon:
        _, shown = await api(daemon, "GET", "/api/v1/tasks/quiet")
        inside: list[Any] = []
        found: list[dict[str, Any]] = []
        while sum(1 for e in found if e["finished_at"]) < 2 and clock.now() < end + SECOND:
            if clock.now() < end:
                inside += await executions(daemon, "quiet") + user_service.calls
            await step(daemon, clock)
            found = await executions(daemon, "quiet")
        first = user_service.calls[0]
        counted = excluded_count(daemon, "quiet", "blackout")
    assert shown["next_fire_at"] == iso(end)
    assert inside == []
    assert first.method == "POST" and first.headers["X-Ecron-Scheduled-At"] == iso(end)
    assert found[0]["scheduled_at"] == iso(end)
    assert all(datetime.fromisoformat(e["scheduled_at"]) >= end for e in found)
    assert datetime.fromisoformat(found[0]["triggered_at"]) >= end
    assert counted >= 2  # at least the fire times between the start and the window's end


async def test_a_calendar_excluding_today_fires_nothing_today_until_a_reload_allows_it(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """``every: 1s`` on a calendar that excludes today: the next fire time shown is
    tomorrow's first instant, and while the scheduler goes round for over a second nothing is
    fired or recorded. A reload (what SIGHUP does) that drops the exclusion is followed at
    once: the task fires today. (The daemon runs on a clock the test moves 100 ms, one
    round of the scheduler, at a time.)"""
    user_service.duration = 0.05
    clock = FakeClock(T0)
    user_service.on_clock(clock)
    zone = zone_near_noon(T0)
    today = T0.astimezone(ZoneInfo(zone)).date()
    tomorrow = datetime.combine(today + timedelta(days=1), time(), ZoneInfo(zone))
    keys: dict[str, Any] = {"schedule": {"every": "1s"}, "timezone": zone}
    closed = task("closed", f"{user_service.url}/jobs/c", calendar={"exclude": [today]}, **keys)
    async with make_daemon([closed], clock=clock) as daemon:
        _, shown = await api(daemon, "GET", "/api/v1/tasks/closed")
        for _ in range(12):  # 1.2 s of the scheduler going round
            await step(daemon, clock)
        quiet = (await executions(daemon, "closed"), list(user_service.calls))
        opened = task("closed", f"{user_service.url}/jobs/c", **keys)
        config = daemon.config.model_copy(update={"tasks": {"closed": opened}})
        await daemon.reload(config)
        for _ in range(20):  # at once: within the next fire time or two
            if user_service.calls:
                break
            await step(daemon, clock)
        first = user_service.calls[0]
    assert shown["next_fire_at"] == iso(tomorrow.astimezone(UTC))
    assert quiet == ([], [])
    scheduled = datetime.fromisoformat(first.headers["X-Ecron-Scheduled-At"])
    assert scheduled.astimezone(ZoneInfo(zone)).date() == today
