"""``GET /api/v1/tasks/{name}/upcoming?count=N`` and ``ecron tasks --next N`` on a live
daemon: the next fire times that will run, calendars and blackouts applied."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from click.testing import CliRunner

from ecron.cli import cli, client_cmds  # noqa: F401  (registers the commands)
from ecron.clock import iso
from ecron.wall import wall
from tests.support.daemon import DaemonFactory, task
from tests.support.service import UserService
from tests.test_daemon import api

HOUR = timedelta(hours=1)


async def test_upcoming_lists_the_next_fire_times_that_will_run_and_the_cli_prints_them(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """Hourly under a blackout over the next hours and a calendar leaving out the day after
    tomorrow: the first three fire times listed are the hours from the blackout's end, and
    none falls on the excluded day; ``count`` is bounded; a paused task says so; a manual and
    a chained task have none; ``ecron tasks --next 2`` prints them."""
    hour = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    end = hour + 5 * HOUR
    excluded = (hour + timedelta(days=2)).date()
    url = f"{user_service.url}/jobs/x"
    hourly = task(
        "hourly",
        url,
        schedule={"every": "1h"},
        blackout=[{"from": iso(hour - HOUR), "to": iso(end)}],
        calendar={"exclude": [excluded]},
    )
    specs = [hourly, task("by-hand", url), task("after", url, schedule={"after_task": "hourly"})]
    async with make_daemon(specs) as daemon:
        _, three = await api(daemon, "GET", "/api/v1/tasks/hourly/upcoming", params={"count": 3})
        _, many = await api(daemon, "GET", "/api/v1/tasks/hourly/upcoming", params={"count": 100})
        too_many, _ = await api(
            daemon, "GET", "/api/v1/tasks/hourly/upcoming", params={"count": 101}
        )
        _, manual = await api(daemon, "GET", "/api/v1/tasks/by-hand/upcoming")
        _, chained = await api(daemon, "GET", "/api/v1/tasks/after/upcoming")
        missing, _ = await api(daemon, "GET", "/api/v1/tasks/nope/upcoming")
        printed = await asyncio.to_thread(
            CliRunner().invoke,
            cli,
            ["tasks", "--next", "2", "--api", f"http://127.0.0.1:{daemon.port}"],
            env={"COLUMNS": "200"},
        )
        await api(daemon, "POST", "/api/v1/tasks/hourly/pause")
        _, paused = await api(daemon, "GET", "/api/v1/tasks/hourly/upcoming", params={"count": 1})
    assert {key: value for key, value in three.items() if key != "from"} == {
        "task": "hourly",
        "paused": False,
        "items": [iso(end), iso(end + HOUR), iso(end + 2 * HOUR)],
        "dst": [],
    }
    assert datetime.fromisoformat(three["from"]) <= end  # now: no ``from`` was asked for
    times = [datetime.fromisoformat(when) for when in many["items"]]
    assert len(times) == 100 and times[0] == end
    assert all(when.date() != excluded for when in times)
    assert any(when.date() == excluded + timedelta(days=1) for when in times)
    assert too_many == 400 and missing == 404
    assert manual["items"] == [] and chained["items"] == []
    assert paused["paused"] is True and len(paused["items"]) == 1
    assert printed.exit_code == 0, printed.output
    # wall times of the task's zone with their date and zone, even without --wide
    assert wall(end, "UTC") in printed.output and wall(end + HOUR, "UTC") in printed.output
    assert "fire time" in printed.output and "┃" not in printed.output  # the CLI's style
