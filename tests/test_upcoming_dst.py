"""``GET /api/v1/tasks/{name}/upcoming?from=TIME`` and ``ecron tasks --next N --from TIME``
on a live daemon: any period previewed, with what each task's ``dst`` policy does to its
fire times around the 2027 changes of Europe/Berlin and Australia/Sydney; and the
scheduler, on a clock the test moves, firing the times the preview lists."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp
import pytest
from click.testing import CliRunner

from ecron.api.schemas import Upcoming
from ecron.cli import cli, client_cmds  # noqa: F401  (registers the commands)
from ecron.clock import iso
from ecron.daemon import Daemon
from ecron.wall import wall as wall_time
from tests.support.daemon import DaemonFactory, task
from tests.support.rig import FakeClock
from tests.support.service import UserService, wait_for
from tests.test_daemon import api


def at(text: str) -> str:
    """An instant written with its offset, as the API writes it (UTC, milliseconds, Z)."""
    when = datetime.fromisoformat(text)
    assert when.tzinfo is not None, text
    return iso(when.astimezone(UTC)) or ""


def local(text: str, zone: str = "Europe/Berlin") -> str:
    """An instant as the CLI shows a task's fire times: its date and time in the task's
    zone, with the zone."""
    return wall_time(datetime.fromisoformat(text), zone)


def note(when: str | None, wall: str, change: str) -> dict[str, Any]:
    return {"at": None if when is None else at(when), "wall": wall, "change": change}


BERLIN_GAP, BERLIN_FOLD = "2027-03-28T02:30:00", "2027-10-31T02:30:00"
SYDNEY_GAP, SYDNEY_FOLD = "2027-10-03T02:30:00", "2027-04-04T02:30:00"

#: task name, zone, dst, from, the three fire times listed, the dst notes.
ROWS: list[tuple[str, str, dict[str, str], str, list[str], list[dict[str, Any]]]] = [
    ("berlin-shift", "Europe/Berlin", {"gap": "shift"}, "2027-03-27T03:00+01:00",
     ["2027-03-28T03:30+02:00", "2027-03-29T02:30+02:00", "2027-03-30T02:30+02:00"],
     [note("2027-03-28T03:30+02:00", BERLIN_GAP, "shifted")]),
    ("berlin-skip", "Europe/Berlin", {"gap": "skip"}, "2027-03-27T00:00+01:00",
     ["2027-03-27T02:30+01:00", "2027-03-29T02:30+02:00", "2027-03-30T02:30+02:00"],
     [note(None, BERLIN_GAP, "skipped")]),
    ("berlin-jump", "Europe/Berlin", {"gap": "jump"}, "2027-03-27T03:00+01:00",
     ["2027-03-28T03:00+02:00", "2027-03-29T02:30+02:00", "2027-03-30T02:30+02:00"],
     [note("2027-03-28T03:00+02:00", BERLIN_GAP, "jumped")]),
    ("berlin-first", "Europe/Berlin", {"fold": "first"}, "2027-10-30T03:00+02:00",
     ["2027-10-31T02:30+02:00", "2027-11-01T02:30+01:00", "2027-11-02T02:30+01:00"],
     [note("2027-10-31T02:30+02:00", BERLIN_FOLD, "repeated")]),
    ("berlin-last", "Europe/Berlin", {"fold": "last"}, "2027-10-30T03:00+02:00",
     ["2027-10-31T02:30+01:00", "2027-11-01T02:30+01:00", "2027-11-02T02:30+01:00"],
     [note("2027-10-31T02:30+01:00", BERLIN_FOLD, "repeated")]),
    ("berlin-both", "Europe/Berlin", {"fold": "both"}, "2027-10-30T03:00+02:00",
     ["2027-10-31T02:30+02:00", "2027-10-31T02:30+01:00", "2027-11-01T02:30+01:00"],
     [note("2027-10-31T02:30+02:00", BERLIN_FOLD, "repeated"),
      note("2027-10-31T02:30+01:00", BERLIN_FOLD, "repeated")]),
    ("sydney-shift", "Australia/Sydney", {"gap": "shift"}, "2027-10-02T03:00+10:00",
     ["2027-10-03T03:30+11:00", "2027-10-04T02:30+11:00", "2027-10-05T02:30+11:00"],
     [note("2027-10-03T03:30+11:00", SYDNEY_GAP, "shifted")]),
    ("sydney-skip", "Australia/Sydney", {"gap": "skip"}, "2027-10-02T00:00+10:00",
     ["2027-10-02T02:30+10:00", "2027-10-04T02:30+11:00", "2027-10-05T02:30+11:00"],
     [note(None, SYDNEY_GAP, "skipped")]),
    ("sydney-jump", "Australia/Sydney", {"gap": "jump"}, "2027-10-02T03:00+10:00",
     ["2027-10-03T03:00+11:00", "2027-10-04T02:30+11:00", "2027-10-05T02:30+11:00"],
     [note("2027-10-03T03:00+11:00", SYDNEY_GAP, "jumped")]),
    ("sydney-first", "Australia/Sydney", {"fold": "first"}, "2027-04-03T03:00+11:00",
     ["2027-04-04T02:30+11:00", "2027-04-05T02:30+10:00", "2027-04-06T02:30+10:00"],
     [note("2027-04-04T02:30+11:00", SYDNEY_FOLD, "repeated")]),
    ("sydney-last", "Australia/Sydney", {"fold": "last"}, "2027-04-03T03:00+11:00",
     ["2027-04-04T02:30+10:00", "2027-04-05T02:30+10:00", "2027-04-06T02:30+10:00"],
     [note("2027-04-04T02:30+10:00", SYDNEY_FOLD, "repeated")]),
    ("sydney-both", "Australia/Sydney", {"fold": "both"}, "2027-04-03T03:00+11:00",
     ["2027-04-04T02:30+11:00", "2027-04-04T02:30+10:00", "2027-04-05T02:30+10:00"],
     [note("2027-04-04T02:30+11:00", SYDNEY_FOLD, "repeated"),
      note("2027-04-04T02:30+10:00", SYDNEY_FOLD, "repeated")]),
]  # fmt: skip


async def test_upcoming_from_previews_each_dst_policy_around_the_2027_changes(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """``30 2 * * *`` under each policy in Berlin and Sydney, looked at from before each
    change with ``from``: the fire times listed are those of the policy (shifted by the gap,
    skipped, at the jump; the first, last or both passes of the fold), ``dst`` notes each
    of them and the skipped wall time, and every answer matches the documented schema."""
    url = f"{user_service.url}/jobs/x"
    specs = [
        task(name, url, schedule="30 2 * * *", timezone=zone, dst=dst)
        for name, zone, dst, *_ in ROWS
    ]
    async with make_daemon(specs) as daemon:
        answers = {}
        for name, _, _, start, _, _ in ROWS:
            query = {"from": start, "count": "3"}
            status, answers[name] = await api(
                daemon, "GET", f"/api/v1/tasks/{name}/upcoming", params=query
            )
            assert status == 200, answers[name]
    for name, _, _, start, items, notes in ROWS:
        Upcoming.model_validate(answers[name])
        assert answers[name] == {
            "task": name,
            "paused": False,
            "from": at(start),
            "items": [at(text) for text in items],
            "dst": notes,
        }, name


async def test_a_bad_from_is_refused_naming_the_field_and_an_unencoded_plus_is_read(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """``from`` that is not a time, or has no UTC offset, answers 400 naming ``from``; a
    ``+02:00`` whose ``+`` reached the daemon as a space is read as the offset; a job by the
    clock (``0 * * * *``) across Berlin's gap has no ``dst`` notes whatever its policy."""
    url = f"{user_service.url}/jobs/x"
    specs = [
        task("nightly", url, schedule="30 2 * * *", timezone="Europe/Berlin"),
        task("hourly", url, schedule="0 * * * *", timezone="Europe/Berlin", dst={"gap": "skip"}),
    ]
    async with make_daemon(specs) as daemon:
        junk, junk_answer = await api(
            daemon, "GET", "/api/v1/tasks/nightly/upcoming", params={"from": "soon"}
        )
        naive, naive_answer = await api(
            daemon, "GET", "/api/v1/tasks/nightly/upcoming", params={"from": "2027-03-27T00:00"}
        )
        raw = (
            f"http://127.0.0.1:{daemon.port}/api/v1/tasks/nightly/upcoming"
            "?count=1&from=2027-03-28T00:00:00+01:00"
        )
        async with aiohttp.ClientSession() as session, session.get(raw) as response:
            plus = response.status, await response.json()
        _, hourly = await api(
            daemon,
            "GET",
            "/api/v1/tasks/hourly/upcoming",
            params={"from": "2027-03-28T01:00:00+01:00", "count": "3"},
        )
    assert junk == 400 and "'from'" in junk_answer["error"], junk_answer
    assert naive == 400 and "no UTC offset" in naive_answer["error"], naive_answer
    assert plus[0] == 200 and plus[1]["items"] == [at("2027-03-28T03:30+02:00")], plus
    assert plus[1]["dst"] == [note("2027-03-28T03:30+02:00", BERLIN_GAP, "shifted")]
    assert hourly["items"] == [
        at("2027-03-28T01:00+01:00"),
        at("2027-03-28T03:00+02:00"),
        at("2027-03-28T04:00+02:00"),
    ]
    assert hourly["dst"] == []


async def test_the_cli_lists_fire_times_from_a_moment_with_a_note_per_dst_change(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """``ecron tasks --next 3 --from TIME`` prints the fire times of the period with what
    daylight saving time did to each, as a sentence (02:30 happens twice: twice under
    ``fold: both``, once under the default ``fold: first``; does not exist, no run that
    day, on a row of its own); ``--from`` without ``--next`` is a usage error."""
    url = f"{user_service.url}/jobs/x"
    specs = [
        task("both", url, schedule="30 2 * * *", timezone="Europe/Berlin", dst={"fold": "both"}),
        task("skip", url, schedule="30 2 * * *", timezone="Europe/Berlin", dst={"gap": "skip"}),
    ]
    async with make_daemon(specs) as daemon:
        where = ["--api", f"http://127.0.0.1:{daemon.port}"]
        folds, gaps, alone = [
            await asyncio.to_thread(
                CliRunner().invoke, cli, ["tasks", *args, *where], env={"COLUMNS": "200"}
            )
            for args in (
                ["--next", "3", "--from", "2027-10-30T03:00:00+02:00"],
                ["--next", "2", "--from", "2027-03-27T12:00:00Z"],
                ["--from", "2027-03-27T12:00:00Z"],
            )
        ]
    assert folds.exit_code == 0, folds.output
    # twice for ``fold: both``, once for the other task's first pass (the default)
    assert folds.output.count("02:30 happens twice on 31 October: runs at 02:30 C") == 3
    assert "runs at 02:30 CEST" in folds.output and "runs at 02:30 CET" in folds.output
    # the date and time in the task's zone with the zone, which tells the two 02:30s apart
    assert local("2027-10-31T02:30+01:00") in folds.output, folds.output
    assert local("2027-10-31T02:30+01:00").endswith("02:30:00 CET")
    assert local("2027-10-31T02:30+02:00").endswith("02:30:00 CEST")
    assert gaps.exit_code == 0, gaps.output
    assert "02:30 does not exist on 28 March: no run that day" in gaps.output, gaps.output
    assert alone.exit_code != 0 and "--from goes with --next" in alone.output


def triggers(service: UserService) -> list[Any]:
    """The trigger calls the service received, in order (polls left out)."""
    return [call for call in service.calls if call.method == "POST"]


async def step(daemon: Daemon, clock: FakeClock) -> None:
    """Move the clock 100 ms on; wait until the scheduler went round at the new time and the
    engine carried out what is due by then."""
    now = clock.advance(timedelta(milliseconds=100))
    daemon.scheduler.wake()
    await wait_for(lambda: (daemon.scheduler.last_tick or now) >= now, timeout=5)
    await wait_for(lambda: daemon.engine.settled(now), timeout=5)


@pytest.mark.parametrize(
    ("zone", "dst", "start"),
    [
        ("Europe/Berlin", {"fold": "both"}, "2027-10-31T02:00+02:00"),
        ("Australia/Sydney", {"gap": "jump"}, "2027-10-03T01:00+10:00"),
    ],
)
async def test_the_scheduler_fires_the_times_the_preview_lists(
    make_daemon: DaemonFactory,
    user_service: UserService,
    zone: str,
    dst: dict[str, str],
    start: str,
) -> None:
    """On a clock the test moves: the fire times the preview lists from ``start`` (Berlin's
    02:30 twice under ``fold: both``; Sydney's 02:30 at the jump, 03:00, under ``gap:
    jump``) are the ones the scheduler triggers, ``X-Ecron-Scheduled-At`` and all, at those
    moments; preview and scheduler come from the same fire-time function."""
    user_service.duration = 0.05
    first = datetime.fromisoformat(start).astimezone(UTC)
    clock = FakeClock(first)
    user_service.on_clock(clock)
    spec = task(
        "nightly",
        f"{user_service.url}/jobs/n",
        schedule="30 2 * * *",
        timezone=zone,
        dst=dst,
        concurrency="allow",  # the second 02:30 does not wait for the first one's end
    )
    query = {"from": iso(first), "count": "2"}
    async with make_daemon([spec], clock=clock) as daemon:
        _, preview = await api(daemon, "GET", "/api/v1/tasks/nightly/upcoming", params=query)
        fired: list[str] = []
        for when in preview["items"]:
            moment = datetime.fromisoformat(when)
            clock.set(moment - timedelta(milliseconds=300))
            for _ in range(20):
                if len(triggers(user_service)) > len(fired):
                    break
                await step(daemon, clock)
            assert clock.now() >= moment, "triggered before its fire time"
            fired.append(triggers(user_service)[len(fired)].headers["X-Ecron-Scheduled-At"])
    assert fired == preview["items"][: len(fired)]
    assert len(fired) == 2
