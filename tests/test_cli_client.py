"""The client commands in a terminal of 80 columns, against a live daemon and a real user
service: short ids that can be copied back, wall times in each task's zone (``--utc``),
``--wide``, ``--json``, ``watch``, unique prefixes, one-line errors, and Ctrl-C leaving the
execution running."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from click.testing import CliRunner, Result

from ecron.cli import action_cmds, client_cmds, watch  # noqa: F401  (registers commands)
from ecron.cli.display import relative, short_length
from ecron.cli.group import cli
from ecron.clock import iso
from ecron.config.model import TaskSpec
from ecron.core import Execution, Reason, Status, TriggerKind
from ecron.daemon import Daemon
from ecron.wall import took, wall, wall_today
from tests.protocol_support import ended, reply, run_once
from tests.support.daemon import DaemonFactory, task
from tests.support.processes import finished, reaped
from tests.support.service import UserService, wait_for

#: The worktree, whose ``ecron`` the subprocesses run.
ROOT = Path(__file__).resolve().parent.parent
#: A time to the millisecond (a schedule's own text, ``from 2026-12-03T14:30:05.817Z``,
#: aside).
MILLISECONDS = r"\d\d:\d\d:\d\d\.\d{3}(?!Z)"
#: What a time looks like in a table: to the second, with its zone, no milliseconds (a
#: day other than today has its month and day first).
WALL = r"((Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) \d\d )?\d\d:\d\d:\d\d [A-Z]{2,6}"

pytestmark = pytest.mark.usefixtures("logs_to_stderr")


@pytest.fixture
def database_url(tmp_path: Path) -> str:
    """The CLI does not depend on the database: SQLite here."""
    return f"sqlite+aiosqlite:///{tmp_path / 'ecron.db'}"


@pytest.fixture
async def daemon(make_daemon: DaemonFactory, user_service: UserService) -> AsyncIterator[Daemon]:
    """A daemon with a short job, a long one, a failing one, a 02:30 one in Asia/Shanghai,
    one whose service answers 500 and a three-step one."""
    user_service.durations.update(quick=0.3, long=30.0)
    url = user_service.url
    # Hourly from half an hour after now: a test never sees it fire. (Plain ``every: 1h``
    # fires at the top of each hour, so a test in an hour's last minute saw "in 55 s" as
    # its next fire time, and one across the hour saw a run of it that it did not ask for.)
    hourly = {"every": "1h", "start": iso(datetime.now(UTC) + timedelta(minutes=30))}
    specs = [
        task("quick", f"{url}/jobs/quick", concurrency="allow"),
        task("long", f"{url}/jobs/long", schedule=hourly),
        task("broken", f"{url}/jobs/broken"),
        task("nightly", f"{url}/jobs/quick", schedule="30 2 * * *", timezone="Asia/Shanghai"),
        task("disk", f"{url}/jobs/disk", trigger_retry={"attempts": 1}),
        TaskSpec.model_validate(
            {
                "name": "etl",
                "schedule": "manual",
                "poll_interval": "100ms",
                "steps": [
                    {"name": n, "url": f"{url}/jobs/quick"} for n in ("fetch", "load", "report")
                ],
            }
        ),
    ]
    async with make_daemon(specs) as running:
        yield running


async def ecron(daemon: Daemon, *args: str, columns: int = 80) -> Result:
    """``ecron ARGS --api <daemon>`` in a terminal of ``columns``, from a thread (the
    daemon goes on serving)."""
    env = {"COLUMNS": str(columns), "ECRON_API_URL": f"http://127.0.0.1:{daemon.port}"}
    runner = CliRunner()
    return await asyncio.to_thread(runner.invoke, cli, list(args), env=env)


async def fail_next(service: UserService) -> None:
    """The next trigger is answered FAILED, with a long message."""
    message = "the warehouse refused the load: disk quota exceeded on volume /data/x " * 3
    service.script["POST"] = [reply(200, {"status": "FAILED", "message": message})]


def table_rows(output: str) -> list[list[str]]:
    """The rows of a printed table (two spaces or more between cells), header and rule
    left out."""
    lines = output.splitlines()
    rule = next(n for n, line in enumerate(lines) if line.startswith("──"))
    return [re.split(r"\s{2,}", line.strip()) for line in lines[rule + 1 :] if line.strip()]


async def test_executions_fit_80_columns_with_short_copyable_ids_and_wall_times(
    daemon: Daemon, user_service: UserService
) -> None:
    """Every line fits 80 columns; each id is the shortest prefix (8 at least) telling
    apart those shown, whole and accepted by ``ecron show``; times are wall times of the
    task's zone to the second (``14:05:09 UTC``), how long each ended one took is shown
    (``0.3 s``; ``-`` while one runs); a long message is cut with ``…``, not the rest."""
    done = [await run_once(daemon, "quick") for _ in range(3)]
    for eid in done:
        await ended(daemon, eid)
    await fail_next(user_service)
    failed = await run_once(daemon, "broken")
    await ended(daemon, failed)
    running = await run_once(daemon, "long")
    await wait_for(lambda: _progressing(daemon, running), timeout=10)
    result = await ecron(daemon, "executions")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert all(len(line) <= 80 for line in lines), result.output
    assert lines[0].split() == ["id", "task", "status", "scheduled", "took", "message"]
    rows = table_rows(result.output)
    ids = [row[0] for row in rows]
    everyone = [running, failed, *reversed(done)]
    length = short_length(everyone)
    assert 8 <= length < 36 and ids == [eid[:length] for eid in everyone]
    assert len(set(ids)) == len(ids)
    by_id = dict(zip(ids, rows, strict=True))
    assert re.fullmatch(r"RUNNING \d+%", by_id[running[:length]][2])
    assert by_id[running[:length]][4] == "-"
    assert by_id[failed[:length]][2] == "FAILED (remote_failed)"
    assert by_id[failed[:length]][-1].endswith("…")
    for eid in done:
        assert re.fullmatch(r"0\.\d s", by_id[eid[:length]][4]), by_id[eid[:length]]
    for row in rows:
        assert re.fullmatch(WALL, row[3]), row
    shown = await ecron(daemon, "show", ids[1])
    assert shown.exit_code == 0 and failed in shown.output


async def test_a_0230_shanghai_job_shows_0230_with_its_zone_and_utc_shows_1830(
    daemon: Daemon,
) -> None:
    """In 80 columns, the 02:30 Asia/Shanghai job's next fire time (``tasks``, ``tasks
    --next``), a backfilled run of it (``executions``, ``show``) and its backfill's period
    are shown at 02:30 with the zone, to the second and no milliseconds; ``--utc`` shows
    the same moments at 18:30 UTC."""
    day = (datetime.now(UTC) + timedelta(hours=8)).date() - timedelta(days=2)
    period = ["--from", day.isoformat(), "--to", (day + timedelta(days=1)).isoformat()]
    backfilled = await ecron(daemon, "backfill", "nightly", *period)
    assert backfilled.exit_code == 0, backfilled.output
    eid = backfilled.output.splitlines()[1].split()[1]
    assert backfilled.output.splitlines()[0] == (
        f"nightly: {day} 00:00:00 CST to {day + timedelta(days=1)} 00:00:00 CST"
    )
    await ended(daemon, eid)
    for utc, clock, zone in ((False, "02:30:00", "CST"), (True, "18:30:00", "UTC")):
        extra = ["--utc"] if utc else []
        outputs = {
            command[0]: (await ecron(daemon, *command, *extra)).output
            for command in (["tasks"], ["tasks", "--next", "1"], ["executions"], ["show", eid])
        }
        for output in outputs.values():
            assert all(len(line) <= 80 for line in output.splitlines()), output
            assert re.search(MILLISECONDS, output) is None, output
        next_fire = next(r for r in table_rows(outputs["tasks"]) if r[0] == "nightly")[2]
        assert next_fire.endswith(f"{clock} {zone}"), outputs["tasks"]
        upcoming = outputs["tasks"].split("fire time")[-1]
        assert re.search(rf"nightly\s+1\s+\d{{4}}-\d\d-\d\d {clock} {zone}", upcoming), upcoming
        run = next(r for r in table_rows(outputs["executions"]) if eid.startswith(r[0]))
        assert run[3].endswith(f"{clock} {zone}"), run
        scheduled = rf"scheduled_at\s+\d{{4}}-\d\d-\d\d {clock} {zone}\s*\n"
        assert re.search(scheduled, outputs["show"]), outputs["show"]


async def test_a_500_with_an_error_field_is_shown_whole_by_show_and_cut_by_executions(
    daemon: Daemon, user_service: UserService
) -> None:
    """A service answering the trigger 500 ``{"error": "disk full", ...}``: the run ends
    FAILED trigger_failed, and its message says what happened and what the service said,
    ``trigger answered HTTP 500: {"error": "disk full"}`` (never "could not be
    delivered"); ``ecron show`` prints it whole in 80 columns, with when the run ended and
    how long it took (no deadline, no ETA: it has ended); ``ecron executions`` cuts it with
    ``…`` to fit them. (``ecron pools``, this daemon having none, says so.)"""
    said = {"error": "disk full", "trace": "at write() " * 40}
    user_service.script["POST"] = [reply(500, said)]
    failed = await ended(daemon, await run_once(daemon, "disk"))
    message = 'trigger answered HTTP 500: {"error": "disk full"}'
    assert (failed.status, failed.reason, failed.message) == (
        Status.FAILED,
        Reason.TRIGGER_FAILED,
        message,
    )
    shown = await ecron(daemon, "show", failed.eid)
    assert shown.exit_code == 0 and f"message         {message}\n" in shown.output, shown.output
    listed = await ecron(daemon, "executions", "--task", "disk")
    assert all(len(line) <= 80 for line in listed.output.splitlines()), listed.output
    [row] = table_rows(listed.output)
    assert row[-1].endswith("…") and message.startswith(row[-1][:-1]), row
    assert "could not be delivered" not in shown.output
    assert failed.finished_at is not None and failed.triggered_at is not None
    assert f"finished_at     {wall(failed.finished_at, 'UTC')}" in shown.output, shown.output
    took_s = (failed.finished_at - failed.triggered_at).total_seconds()
    assert f"took            {took(took_s)} (first trigger call to end)" in shown.output
    assert "\ndeadline " not in shown.output and "\neta " not in shown.output, shown.output
    pools = await ecron(daemon, "pools")
    assert pools.exit_code == 0 and pools.output.startswith("no pools: the config defines none")
    assert all(len(line) <= 80 for line in pools.output.splitlines()), pools.output


async def _progressing(daemon: Daemon, eid: str) -> bool:
    execution = await daemon.store.get_execution(eid)
    return execution is not None and execution.status is Status.RUNNING and execution.progress > 0


async def test_wide_shows_full_ids_dated_wall_times_and_cuts_nothing(
    daemon: Daemon, user_service: UserService
) -> None:
    """``--wide``: the whole id, every time with its date in the task's zone to the
    second (no milliseconds), when it ended, the whole message, even past 80 columns."""
    await fail_next(user_service)
    failed = await ended(daemon, await run_once(daemon, "broken"))
    result = await ecron(daemon, "executions", "--wide")
    assert result.exit_code == 0, result.output
    assert failed.eid in result.output and failed.message is not None
    assert failed.message.strip() in " ".join(result.output.split())
    assert wall(failed.scheduled_at, "UTC") in result.output
    assert wall(failed.scheduled_at, "UTC") == failed.scheduled_at.strftime("%Y-%m-%d %H:%M:%S UTC")
    assert failed.finished_at is not None
    for command in (["tasks", "--wide"], ["show", failed.eid[:20], "--wide"]):
        shown = await ecron(daemon, *command)
        assert shown.exit_code == 0 and failed.eid in shown.output, command
        assert wall(failed.finished_at, "UTC") in shown.output
        assert re.search(MILLISECONDS, shown.output) is None, shown.output


async def test_tasks_show_the_next_fire_time_and_the_last_result(
    daemon: Daemon, user_service: UserService
) -> None:
    """One row per task: its schedule, when it fires next (a wall time of its zone;
    ``paused`` while paused), its last run's status, when it ended, and its short id. In 80
    columns whole columns are left out, never a name or a schedule cut, and the table says
    which."""
    eid = await run_once(daemon, "quick")
    await ended(daemon, eid)
    assert (await ecron(daemon, "pause", "broken")).exit_code == 0
    narrow = await ecron(daemon, "tasks")
    assert narrow.exit_code == 0, narrow.output
    assert all(len(line) <= 80 for line in narrow.output.splitlines())
    assert narrow.output.splitlines()[0].split()[:4] == ["task", "schedule", "next", "fire"]
    assert "left out to fit; --wide shows all)" in narrow.output
    result = await ecron(daemon, "tasks", columns=140)
    assert result.exit_code == 0, result.output
    rows = {row[0]: row for row in table_rows(result.output)}
    assert rows["quick"][1:4] == ["manual", "-", "SUCCESS"] and rows["quick"][5] == eid[:8]
    assert re.fullmatch(WALL, rows["quick"][4]), rows["quick"]
    assert re.fullmatch(WALL, rows["long"][2]) and rows["long"][3:] == ["-", "-", "-"]
    assert rows["broken"][2] == "paused"


async def test_read_commands_print_the_apis_json_with_json(daemon: Daemon) -> None:
    """``--json`` on tasks, executions, show and steps prints what the API answered (here
    about executions that have ended, whose answers no longer change)."""
    eid = await run_once(daemon, "etl")
    await ended(daemon, eid)
    base = f"http://127.0.0.1:{daemon.port}/api/v1"
    for command, path in (
        (["tasks"], "/tasks"),
        (["executions", "--task", "etl"], "/executions?task=etl&limit=20"),
        (["show", eid[:13]], f"/executions/{eid}"),
        (["steps", eid[:13]], f"/executions/{eid}/steps"),
    ):
        result = await ecron(daemon, *command, "--json")
        async with aiohttp.ClientSession() as session, session.get(base + path) as response:
            expected = await response.json()
        assert result.exit_code == 0 and json.loads(result.output) == expected, command


async def test_steps_and_show_list_the_steps_with_short_remote_ids(daemon: Daemon) -> None:
    """``ecron steps`` and ``ecron show`` list each step: name, status, times, its remote
    id as ``<short id>.<n>``."""
    eid = await run_once(daemon, "etl")
    await ended(daemon, eid)
    for command in (["steps", eid[:13]], ["show", eid[:13]]):
        result = await ecron(daemon, *command)
        assert result.exit_code == 0, result.output
        rows = table_rows(result.output)[-3:]
        assert [row[:3] for row in rows] == [
            ["1", "fetch", "SUCCESS"],
            ["2", "load", "SUCCESS"],
            ["3", "report", "SUCCESS"],
        ]
        assert [row[-1] for row in rows] == [f"{eid[:8]}.{n}" for n in (1, 2, 3)]
    one_call = await run_once(daemon, "quick")
    result = await ecron(daemon, "steps", one_call)
    assert result.exit_code == 0 and "no steps" in result.output


async def test_every_eid_command_takes_a_unique_prefix_and_says_which_when_ambiguous(
    daemon: Daemon,
) -> None:
    """show, steps, watch, cancel and resume take a unique prefix; an ambiguous one is one
    line naming each candidate (exit 1), an unknown one a one-line 404 (exit 1)."""
    at = datetime(2026, 1, 1, tzinfo=UTC)
    twins = ["01a2276a-4480-73e8-967c-b18487cf0001", "01a2276a-4480-73e8-967c-b18487cf0002"]
    for n, eid in enumerate(twins):
        failed = Execution(
            eid=eid,
            task="quick",
            scheduled_at=at + timedelta(hours=n),
            created_at=at,
            status=Status.FAILED,
            reason=Reason.REMOTE_FAILED,
            triggered_at=at,
            finished_at=at,
        )
        assert await daemon.store.create_execution(failed) is not None
    for command in ("show", "steps", "watch", "cancel", "resume"):
        result = await ecron(daemon, command, "01a2276a-4480")
        assert result.exit_code == 1, command
        assert result.stderr.count("\n") == 1 and result.stdout == "", command
        assert "'01a2276a-4480' is the start of 2 execution ids" in result.stderr
        assert all(f"{eid} (quick, FAILED)" in result.stderr for eid in twins)
        missing = await ecron(daemon, command, "01a2276b")
        assert missing.exit_code == 1 and missing.stderr.count("\n") == 1, command
        assert "404 no execution '01a2276b'" in missing.stderr
    watched = await ecron(daemon, "watch", twins[0])
    assert watched.exit_code == 1 and "FAILED (remote_failed)" in watched.output
    resumed = await ecron(daemon, "resume", twins[1].upper())
    assert resumed.exit_code == 0 and f"resumed {twins[1]} as " in resumed.output
    running = await run_once(daemon, "long")
    cancelled = await ecron(daemon, "cancel", running[:30])
    assert cancelled.exit_code == 0 and f"{running} CANCELLED" in cancelled.output


async def test_watch_follows_an_execution_to_its_end_and_its_exit_status_tells_how_it_ended(
    daemon: Daemon, user_service: UserService
) -> None:
    """``ecron watch`` draws the bar until the end: exit 0 for SUCCESS, 1 for FAILED;
    ``--json`` prints one snapshot per line, per change, the last the final one."""
    eid = await run_once(daemon, "etl")
    result = await ecron(daemon, "watch", eid[:13], "--json")
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.output.splitlines()]
    assert all(line["id"] == eid for line in lines) and lines[-1]["status"] == "SUCCESS"
    progress = [line["progress"] for line in lines]
    assert progress == sorted(progress) and len(lines) >= 2
    await fail_next(user_service)
    failed = await run_once(daemon, "broken")
    result = await ecron(daemon, "watch", failed)
    assert result.exit_code == 1 and "FAILED (remote_failed)" in result.output
    quick = await run_once(daemon, "quick")
    result = await ecron(daemon, "watch", quick)
    assert result.exit_code == 0 and "SUCCESS" in result.output and "100%" in result.output


async def test_errors_are_one_line_with_a_non_zero_exit(daemon: Daemon) -> None:
    """An unknown task, a usage mistake, a bad filter, and no daemon at all: each is one
    line on stderr and a non-zero exit status."""
    cases = [
        (["trigger", "nope"], 1, "404 no task 'nope'"),
        (["show"], 2, "Missing argument 'EID'"),
        (["executions", "--status", "done"], 1, "400 unknown status (SCHEDULED, PENDING, RUNNING"),
        (["tasks", "--api", "http://127.0.0.1:9"], 1, "cannot reach ecron at"),
        (["nosuch"], 2, "No such command 'nosuch'"),
    ]
    for args, code, text in cases:
        result = await ecron(daemon, *args)
        assert result.exit_code == code, (args, result.output)
        assert result.stdout == "" and result.stderr.count("\n") == 1, (args, result.stderr)
        assert result.stderr.startswith("Error: ") and text in result.stderr, result.stderr


async def test_backfill_lists_a_periods_fire_times_runs_them_once_and_names_a_bad_field(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """``ecron backfill NAME --from --to``: ``--dry-run`` prints the period and its fire times
    in the task's zone (New Year's Day at midnight in Tokyo, three of them) and what would
    run, and creates
    nothing; without it, one ``started <id>`` line per new execution, which run one after
    another (``forbid``) and end SUCCESS as backfills; again, nothing starts (all three
    already run); ``--json`` prints the API's answer; a period ending in the future is one
    line naming the field, exit 1."""
    user_service.durations.update(quick=0.2)
    spec = task("new-year", f"{user_service.url}/jobs/quick", schedule="0 0 1 1 *")
    spec = spec.model_copy(update={"timezone": "Asia/Tokyo"})
    period = ["--from", "2023-01-01T00:00:00+09:00", "--to", "2026-01-01T00:00:00+09:00"]
    async with make_daemon([spec]) as daemon:
        dry = await ecron(daemon, "backfill", "new-year", *period, "--dry-run")
        created_by_dry = (await daemon.store.list_executions(task="new-year")).items
        real = await ecron(daemon, "backfill", "new-year", *period)
        eids = [line.split()[1] for line in real.output.splitlines() if line.startswith("started")]
        runs = [await ended(daemon, eid) for eid in eids]
        again = await ecron(daemon, "backfill", "new-year", *period, "--json")
        future = await ecron(
            daemon,
            "backfill",
            "new-year",
            "--from",
            "2026-01-01T00:00:00Z",
            "--to",
            "2999-01-01T00:00:00Z",
        )
    assert dry.exit_code == 0 and created_by_dry == []
    assert dry.output.splitlines() == [
        "new-year: 2023-01-01 00:00:00 JST to 2026-01-01 00:00:00 JST",
        "2023-01-01 00:00:00 JST",
        "2024-01-01 00:00:00 JST",
        "2025-01-01 00:00:00 JST",
        "3 fire times, 0 already run: 3 would run (dry run: nothing was created)",
    ]
    assert all(len(line) <= 80 for line in [*dry.output.splitlines(), *real.output.splitlines()])
    assert real.exit_code == 0 and len(eids) == 3
    assert real.output.splitlines()[-1] == "3 fire times, 0 already run: 3 started"
    assert [(r.trigger_kind, r.status) for r in runs] == [
        (TriggerKind.BACKFILL, Status.SUCCESS)
    ] * 3
    for before, following in pairwise(runs):
        assert before.finished_at is not None and following.triggered_at is not None
        assert following.triggered_at >= before.finished_at  # one after another
    answer = json.loads(again.output)
    assert (answer["count"], answer["already_run"], answer["executions"]) == (3, 3, [])
    assert future.exit_code == 1 and future.stdout == ""
    assert future.stderr.startswith("Error: POST /api/v1/tasks/new-year/backfill: 400 task ")
    assert "field 'to': 2999-01-01T00:00:00.000Z is in the future" in future.stderr


@pytest.mark.parametrize("command", ["trigger", "watch"])
async def test_ctrl_c_stops_watching_leaves_the_execution_running_and_says_how_to_follow_it(
    daemon: Daemon, command: str
) -> None:
    """SIGINT to ``trigger --wait`` or ``watch`` (a real process, once it follows the
    execution): exit status 130, a line saying the execution goes on and the ``ecron
    watch`` command that follows it; the execution is still RUNNING."""
    if command == "trigger":
        args = ["trigger", "long", "--wait"]
    else:
        args = ["watch", (await run_once(daemon, "long"))[:13], "--json"]
    async with api_tap(daemon) as tap, cli_process(*args, "--api", tap.url) as process:
        assert process.stdout is not None
        first = await asyncio.wait_for(process.stdout.readline(), timeout=20)
        active = await wait_for(lambda: _one_running(daemon), timeout=20)
        # It follows now: it has polled the execution (``trigger`` prints its first line
        # before it starts following, and a Ctrl-C then would be an ordinary abort).
        await wait_for(lambda: tap.polled(active.eid), timeout=20)
        masks = signal_masks(process.pid)  # said if it does not end: was SIGINT caught?
        process.send_signal(signal.SIGINT)
        try:
            out, err = await finished(process, timeout=20, stuck=signal.SIGABRT)
        except AssertionError as exc:
            raise AssertionError(
                f"{exc}\nthe child's signals as SIGINT was sent: {masks}"
            ) from None
    assert process.returncode == 130, (first, out, err)
    assert active.eid in first.decode()
    assert err.decode().splitlines() == [
        f"stopped watching; execution {active.eid} goes on. "
        f"Follow it again with: ecron watch {active.eid}"
    ]
    still = await daemon.store.get_execution(active.eid)
    assert still is not None and still.status is Status.RUNNING


@dataclass
class ApiTap:
    """A proxy in front of a daemon's API that notes the path of each GET it answered."""

    target: str
    url: str = ""
    gets: list[str] = field(default_factory=list)

    def polled(self, eid: str) -> bool:
        """True once execution ``eid`` was read by its whole id (as ``follow`` polls it)."""
        return f"/api/v1/executions/{eid}" in self.gets

    async def forward(self, request: web.Request) -> web.Response:
        session: aiohttp.ClientSession = request.app[TAP_SESSION]
        async with session.request(
            request.method,
            self.target + request.path_qs,
            data=await request.read(),
            headers={k: v for k, v in request.headers.items() if k.lower() != "host"},
        ) as answer:
            response = web.Response(
                status=answer.status, body=await answer.read(), content_type=answer.content_type
            )
        if request.method == "GET":
            self.gets.append(request.path)
        return response


TAP_SESSION = web.AppKey("session", aiohttp.ClientSession)


@asynccontextmanager
async def api_tap(daemon: Daemon) -> AsyncIterator[ApiTap]:
    """An ``ApiTap`` in front of ``daemon``, on a free port of 127.0.0.1."""
    tap = ApiTap(f"http://127.0.0.1:{daemon.port}")
    app = web.Application()
    app.router.add_route("*", "/{path:.*}", tap.forward)
    async with aiohttp.ClientSession() as session:
        app[TAP_SESSION] = session
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        tap.url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
        try:
            yield tap
        finally:
            await runner.cleanup()


@asynccontextmanager
async def cli_process(*args: str) -> AsyncIterator[asyncio.subprocess.Process]:
    """``python -m ecron ARGS`` in a terminal of 80 columns (``AS_IN_A_TERMINAL``), its output
    piped; ended and reaped at the end whatever happened (``-X faulthandler``: if it is
    stuck, SIGABRT shows where)."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-X",
        "faulthandler",
        "-c",
        AS_IN_A_TERMINAL,
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "COLUMNS": "80"},
        cwd=ROOT,
    )
    try:
        yield process
    finally:
        await reaped(process)


#: ``python -m ecron`` with SIGINT as a terminal's shell leaves it for a foreground command:
#: not blocked, not ignored, raising KeyboardInterrupt. A child inherits its parent's signal
#: mask and ignored signals, and what a test worker has of them is not the test's to choose.
AS_IN_A_TERMINAL = (
    "import runpy, signal, sys;"
    "signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT]);"
    "signal.signal(signal.SIGINT, signal.default_int_handler);"
    "sys.argv[0] = 'ecron';"
    "runpy.run_module('ecron', run_name='__main__', alter_sys=True)"
)


def signal_masks(pid: int) -> str:
    """The blocked, ignored and caught signals of process ``pid`` (``/proc``'s hex masks)."""
    with open(f"/proc/{pid}/status") as status:
        return " ".join(
            line.strip() for line in status if line.startswith(("SigBlk", "SigIgn", "SigCgt"))
        )


async def _one_running(daemon: Daemon) -> Any:
    active = await daemon.store.active_executions("long")
    return active[0] if active and active[0].status is Status.RUNNING else None


def test_a_time_is_a_wall_time_of_its_zone_to_the_second_with_its_abbreviation_or_offset() -> None:
    """``wall``: the date and time in the zone, no milliseconds, and the zone's abbreviation
    (CST, CEST, UTC) or, for a zone without one, its offset; a table's ``wall_today``
    leaves out today's date and shortens this year's; ``relative`` says how long ago."""
    at = datetime(2026, 12, 3, 18, 30, 0, 123000, tzinfo=UTC)
    assert wall(at, "Asia/Shanghai") == "2026-12-04 02:30:00 CST"
    assert wall(at, "UTC") == "2026-12-03 18:30:00 UTC"
    assert wall(at, "Asia/Singapore") == "2026-12-04 02:30:00 +08:00"
    assert wall(at, "Asia/Kathmandu") == "2026-12-04 00:15:00 +05:45"
    assert wall(datetime(2027, 3, 28, 1, 30, tzinfo=UTC), "Europe/Berlin").endswith("03:30:00 CEST")
    now = datetime(2026, 12, 4, 1, 0, tzinfo=UTC)  # 09:00 on the 4th in Shanghai
    assert wall_today(at, "Asia/Shanghai", now) == "02:30:00 CST"
    assert wall_today(at, "UTC", now) == "Dec 03 18:30:00 UTC"
    assert wall_today(at - timedelta(days=400), "UTC", now) == "2025-10-29 18:30:00 UTC"
    assert relative(now - timedelta(seconds=3.7), now) == "3 s ago"
    assert relative(now + timedelta(minutes=2, seconds=50), now) == "in 2 min"


def test_short_ids_are_the_shortest_prefix_that_tells_apart_those_shown() -> None:
    """Eight characters at least, more until every id shown differs, never ending on a
    dash."""
    a, b = "01a2276a-4480-73e8-967c-b18487cfd3d1", "01a2276a-5e56-72c0-85ae-075f0d458b52"
    assert short_length([a]) == 8
    assert short_length([a, b]) == 10
    assert short_length([a, a[:-1] + "0"]) == 36
    assert short_length([a, "01a2276b-0000-7000-8000-000000000000"]) == 8
