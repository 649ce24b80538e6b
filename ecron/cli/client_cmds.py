"""Read commands: ``tasks``, ``executions``, ``show``, ``steps``, ``pools``; they talk to
the REST API.

Each prints a table that fits an 80-column terminal (short ids; times in each task's zone,
today's without their date) or, with ``--wide``, full ids and every time with its date;
``--utc`` shows times in UTC; ``--json`` prints the API's answer as is. An execution is
named by its id or a unique prefix of it (the API resolves it).
"""

from __future__ import annotations

import json
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from ecron.cli.client import ApiError, segment
from ecron.cli.display import (
    Times,
    Zones,
    columns_to_fit,
    progress_text,
    short_length,
    stalled_text,
    status_text,
    table,
    took_text,
)
from ecron.cli.group import cli
from ecron.cli.options import api_options, client, fail, json_option, utc_option, wide_option
from ecron.cli.outside import json_text, markup, plain
from ecron.cli.upcoming import print_upcoming


def print_json(answer: Any) -> None:
    """The API's answer, indented, as the API sent it."""
    click.echo(json_text(answer, indent=2))


def get(api: str, token: str | None, path: str, **query: Any) -> Any:
    """GET ``path`` of the daemon, or end the command with the error."""
    try:
        return client(api, token).get(path, **query)
    except ApiError as exc:
        fail(exc)


def id_length(api: str, token: str | None, ids: list[str]) -> int:
    """How long a table's ids are cut: enough for each to be the start of no other id in
    the daemon's whole history (``/api/v1/short-ids``), so that each works where a command
    takes an EID; enough to tell apart those shown when the daemon cannot say (an older
    one answers 404)."""
    distinct = list(dict.fromkeys(ids))
    among_shown = short_length(distinct)
    if not distinct:
        return among_shown
    try:
        answer = client(api, token).get("/api/v1/short-ids", id=distinct)
    except ApiError as exc:
        if exc.status == 404:
            return among_shown
        fail(exc)
    return max([among_shown, *(len(item["prefix"]) for item in answer["items"])])


@cli.command()
@click.option(
    "--next",
    "upcoming",
    type=click.IntRange(1, 100),
    default=None,
    metavar="N",
    help="Also list each task's next N fire times that will run (calendars applied), with "
    "a note on each that daylight saving time changed.",
)
@click.option(
    "--from",
    "start",
    default=None,
    metavar="TIME",
    help="With --next: list the fire times from TIME (RFC 3339 with its offset, like "
    "2027-10-31T00:00:00+01:00), to preview any period.",
)
@json_option
@wide_option
@utc_option
@api_options
def tasks(
    upcoming: int | None,
    start: str | None,
    as_json: bool,
    wide: bool,
    utc: bool,
    api: str,
    token: str | None,
) -> None:
    """List tasks: schedule, next fire time (or paused, disabled), how their last run
    went and when."""
    if start is not None and upcoming is None:
        raise click.UsageError("--from goes with --next N: it says where the N fire times start")
    answer = get(api, token, "/api/v1/tasks")
    if as_json:
        print_json(answer)
        return
    lasts = [item["last_execution"] for item in answer["items"] if item.get("last_execution")]
    length = 36 if wide else id_length(api, token, [last["id"] for last in lasts])
    known = {item["name"]: item["timezone"] for item in answer["items"]}
    zones = Zones(client(api, token), utc, known)
    _print_tasks(answer["items"], Times(zones, dated=wide), length)
    if upcoming is not None:
        try:
            print_upcoming(client(api, token), answer["items"], upcoming, zones, start, wide=wide)
        except ApiError as exc:
            fail(exc)


#: The columns ``ecron tasks`` leaves out, in this order, when a line would not fit the
#: terminal otherwise (task names and schedules are never wrapped or cut).
_LEFT_OUT_FIRST = ("at", "last id", "last run", "next fire")


def _print_tasks(items: list[dict[str, Any]], when: Times, length: int) -> None:
    """The tasks table (``--wide`` when ``when`` dates every time), last ids cut at
    ``length``; each task's times in its zone."""
    wide = when.dated
    rows = []
    for item in items:
        last = item.get("last_execution") or {}
        name = item["name"]
        state = "paused" if item["paused"] else ("disabled" if not item["enabled"] else "active")
        # a paused task keeps its stored fire time, but does not fire: say so, unless --wide
        upcoming = when(item["next_fire_at"], task=name) if wide or state == "active" else state
        rows.append(
            [
                markup(name),
                markup(item["schedule_text"]),
                *([state] if wide else []),
                upcoming,
                _last_run(last) if last else "-",
                when(_last_moment(last), task=name) if last else "-",
                markup(last["id"][:length]) if last else "-",
            ]
        )
    console = Console()
    columns = ["task", "schedule", *(["state"] if wide else []), "next fire", "last run", "at"]
    columns.append("last id")
    shown = columns
    if not wide:
        shown = columns_to_fit(columns, rows, console.width, _LEFT_OUT_FIRST)
        rows = [[row[columns.index(name)] for name in shown] for row in rows]
    grid = table(shown, rows, wide=wide, width=console.width, whole=shown)
    console.print(grid, crop=False)
    if len(shown) < len(columns):
        left_out = ", ".join(name for name in columns if name not in shown)
        console.print(f"({left_out} left out to fit; --wide shows all)", style="dim")


def _last_run(last: dict[str, Any]) -> str:
    """``SUCCESS``, ``FAILED (remote_failed)``, ``RUNNING 42%``: how the last run went."""
    return " ".join(part for part in (status_text(last), progress_text(last)) if part)


def _last_moment(last: dict[str, Any]) -> str:
    """When the last run ended, or else started, or else was due."""
    return str(last["finished_at"] or last["triggered_at"] or last["scheduled_at"])


@cli.command()
@click.option("--task", default=None, help="Only this task's executions.")
@click.option("--status", default=None, help="Only executions with this status.")
@click.option("--limit", default=20, show_default=True, help="How many, newest first.")
@click.option("--before", default=None, help="Only executions older than this one (next page).")
@json_option
@wide_option
@utc_option
@api_options
def executions(
    task: str | None,
    status: str | None,
    limit: int,
    before: str | None,
    as_json: bool,
    wide: bool,
    utc: bool,
    api: str,
    token: str | None,
) -> None:
    """Execution history, newest first, each time in its task's zone: how long an ended one
    took; with --wide also when it ended, or for one running its ETA."""
    page = get(
        api, token, "/api/v1/executions", task=task, status=status, limit=limit, before=before
    )
    if as_json:
        print_json(page)
        return
    when = Times(Zones(client(api, token), utc), dated=wide)
    shown = [item["id"] for item in page["items"]]
    length = 36 if wide else id_length(api, token, shown)
    try:
        rows = [
            [
                markup(item["id"][:length]),
                markup(item["task"]),
                " ".join(part for part in (status_text(item), progress_text(item)) if part),
                when(item["scheduled_at"], task=item["task"]),
                *([when(item["finished_at"] or item.get("eta"), task=item["task"])] * wide),
                took_text(item) or "-",
                markup(item["message"] or ""),
            ]
            for item in page["items"]
        ]
    except ApiError as exc:
        fail(exc)
    console = Console()
    columns = ("id", "task", "status", "scheduled", *(["end"] * wide), "took", "message")
    whole = ("task", "scheduled", "end", "took")
    grid = table(columns, rows, wide=wide, width=console.width, whole=whole)
    console.print(grid, crop=False)
    if page["next"]:
        console.print(f"more: --before {markup(page['next'])}", style="dim", soft_wrap=True)


#: The rows of ``ecron show``, in order; the times among them; those of a run still going.
_SHOWN = (
    "id",
    "task",
    "status",
    "progress",
    "message",
    "trigger_kind",
    "attempt",
    "scheduled_at",
    "triggered_at",
    "last_report_at",
    "finished_at",
    "took",
    "eta",
    "deadline",
    "resume_of",
    "resume_attempt",
    "resumed_by",
    "upstream",
    "downstream",
    "owner",
)
_TIMES = frozenset(
    {"scheduled_at", "triggered_at", "last_report_at", "finished_at", "eta", "deadline"}
)
_GOING = frozenset({"eta", "deadline"})


@cli.command()
@click.argument("eid")
@json_option
@wide_option
@utc_option
@api_options
def show(eid: str, as_json: bool, wide: bool, utc: bool, api: str, token: str | None) -> None:
    """Show execution EID (its id or a unique prefix): status, progress, times (in its
    task's zone), steps; an ended one says when it ended and how long it took."""
    item = get(api, token, f"/api/v1/executions/{segment(eid)}")
    if as_json:
        print_json(item)
        return
    zones = Zones(client(api, token), utc)
    try:
        grid = _show_grid(item, Times(zones, dated=True), wide)
    except ApiError as exc:
        fail(exc)
    console = Console()
    console.print(grid)
    if item["steps"]:
        console.print()
        when = Times(zones, dated=wide)  # a table's times: today's without their date
        shown = steps_table(item["steps"], when, wide, console.width, item["task"])
        console.print(shown, crop=False)


def _show_grid(item: dict[str, Any], when: Times, wide: bool) -> Table:
    """``ecron show``'s fields, one per line, the message and result whole (folded): an
    ended run's end and how long it took, not its ETA and deadline."""
    ended = item["status"] in ("SUCCESS", "FAILED", "TIMED_OUT", "CANCELLED", "SKIPPED")
    grid = Table(show_header=False, box=None, pad_edge=False)
    grid.add_column(no_wrap=True)
    grid.add_column(overflow="fold")
    for key in _SHOWN:
        value = item.get(key)
        if key == "status":
            text = status_text(item)
        elif key == "progress":
            shown = str(value) if wide else f"{value:.0f}%"
            text = " ".join(filter(None, (shown, stalled_text(item))))
        elif key == "took":
            if not ended:
                continue
            text = took_text(item) or "- (never triggered)"
            text += " (first trigger call to end)" if item.get("triggered_at") else ""
        elif key in _GOING and ended:
            continue
        elif key in _TIMES:
            text = when(value, task=item["task"])
        elif key == "downstream":
            text = markup(", ".join(value or ())) or "-"
        else:
            text = "-" if value is None else markup(str(value))
        grid.add_row(key, text)
    if item.get("result") is not None:
        grid.add_row("result", markup(json.dumps(item["result"])[: None if wide else 500]))
    return grid


def steps_table(
    steps: list[dict[str, Any]], when: Times, wide: bool, width: int, task: str
) -> Table:
    """The steps of one execution of ``task`` (its times in the task's zone); remote ids
    short like the execution's, or full."""
    eids = [step["remote_id"].rpartition(".")[0] for step in steps]
    length = 36 if wide else short_length(eids)
    rows = [
        [
            str(step["number"]),
            markup(step["name"]),
            " ".join(part for part in (status_text(step), progress_text(step)) if part),
            when(step["started_at"], task=task),
            when(step["finished_at"], task=task),
            markup(step["message"] or ""),
            markup(f"{eid[:length]}.{step['remote_id'].rpartition('.')[2]}"),
        ]
        for step, eid in zip(steps, eids, strict=True)
    ]
    columns = ("step", "name", "status", "started", "ended", "message", "remote id")
    whole = ("started", "ended", "remote id")
    return table(columns, rows, wide=wide, width=width, whole=whole)


@cli.command()
@click.argument("eid")
@json_option
@wide_option
@utc_option
@api_options
def steps(eid: str, as_json: bool, wide: bool, utc: bool, api: str, token: str | None) -> None:
    """The steps of execution EID (its id or a unique prefix); none for a one-call task."""
    answer = get(api, token, f"/api/v1/executions/{segment(eid)}/steps")
    if as_json:
        print_json(answer)
        return
    if not answer["items"]:
        click.echo(f"execution {plain(eid)} is a one-call task: it has no steps")
        return
    task = get(api, token, f"/api/v1/executions/{segment(eid)}")["task"]
    console = Console()
    try:
        when = Times(Zones(client(api, token), utc), dated=wide)
        shown = steps_table(answer["items"], when, wide, console.width, task)
    except ApiError as exc:
        fail(exc)
    console.print(shown, crop=False)


@cli.command()
@json_option
@wide_option
@utc_option
@api_options
def pools(as_json: bool, wide: bool, utc: bool, api: str, token: str | None) -> None:
    """List pools: their limits, how many of their tasks' executions run and wait (on every
    node), and until when a service's Retry-After holds them back (in the daemon's zone)."""
    answer = get(api, token, "/api/v1/pools")
    if as_json:
        print_json(answer)
        return
    if not answer["items"]:
        Console().print(
            "no pools: the config defines none (a pool is defined under pools in ecron.yaml "
            "and named by pool: NAME on the tasks that share it; see docs/configuration.md)",
            highlight=False,
        )
        return
    try:
        when = Times(Zones(client(api, token), utc), dated=wide)
        rows = [
            [
                markup(item["name"]),
                _limit(item["running"], item["max_running"]),
                str(item["waiting"]),
                "-" if item["max_per_second"] is None else f"{item['max_per_second']:g}/s",
                when(item["paused_until"]) if item["paused_until"] else "-",
                markup(", ".join(item["tasks"]) or "-"),
            ]
            for item in answer["items"]
        ]
    except ApiError as exc:
        fail(exc)
    console = Console()
    columns = ("pool", "running", "waiting", "pace", "held back until", "tasks")
    whole = ("pool", "running", "waiting", "pace", "held back until")
    console.print(table(columns, rows, wide=wide, width=console.width, whole=whole), crop=False)


def _limit(running: int, most: int | None) -> str:
    """``3/5``: running of at most; ``3`` without a limit."""
    return str(running) if most is None else f"{running}/{most}"
