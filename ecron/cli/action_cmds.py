"""Commands that act: ``trigger``, ``cancel``, ``resume``, ``pause``, ``unpause``,
``backfill``; they talk to the REST API. Each prints one line (full ids: they are for
copying and scripts; a backfill one per run); ``--wait`` follows the new execution like
``ecron watch``."""

from __future__ import annotations

from typing import Any

import click
from rich.console import Console

from ecron.cli.client import ApiError, segment
from ecron.cli.client_cmds import print_json
from ecron.cli.display import Times, Zones, status_text
from ecron.cli.group import cli
from ecron.cli.options import api_options, client, fail, json_option, utc_option
from ecron.cli.outside import markup
from ecron.cli.watch import exit_code, follow


@cli.command()
@click.argument("name")
@click.option(
    "--wait", is_flag=True, help="Follow the execution with a progress bar until it ends."
)
@utc_option
@api_options
def trigger(name: str, wait: bool, utc: bool, api: str, token: str | None) -> None:
    """Run task NAME now. With --wait, exit 0 only if it ends SUCCESS (Ctrl-C: 130, and
    the execution goes on)."""
    api_client = client(api, token)
    try:
        status, snapshot = api_client.post(f"/api/v1/tasks/{segment(name)}/run")
        console = Console()
        if status == 200:
            console.print(
                f"{markup(name)} is already running (concurrency: forbid): "
                f"{markup(snapshot['id'])}",
                soft_wrap=True,
            )
        else:
            console.print(f"started {markup(snapshot['id'])}", soft_wrap=True)
        if not wait:
            return
        zone = Zones(api_client, utc).of(snapshot["task"])
        final = follow(api_client, snapshot, console, zone=zone)
    except ApiError as exc:
        fail(exc)
    raise SystemExit(exit_code(final))


@cli.command()
@click.argument("eid")
@api_options
def cancel(eid: str, api: str, token: str | None) -> None:
    """Cancel execution EID (its id or a unique prefix): the cancel call goes to the user
    service once, then CANCELLED."""
    snapshot = _post(api, token, f"/api/v1/executions/{segment(eid)}/cancel")
    acknowledged = {True: "acknowledged", False: "not acknowledged", None: "not sent"}
    Console().print(
        f"{markup(snapshot['id'])} {status_text(snapshot)}; the cancel call was "
        f"{acknowledged[snapshot['cancel_acknowledged']]}",
        soft_wrap=True,
    )


@cli.command()
@click.argument("name")
@click.option("--reason", default=None, help="Shown in the task's snapshot.")
@api_options
def pause(name: str, reason: str | None, api: str, token: str | None) -> None:
    """Pause task NAME: it fires no more until unpaused (manual runs still work)."""
    body = {"reason": reason} if reason else None
    snapshot = _post(api, token, f"/api/v1/tasks/{segment(name)}/pause", body)
    Console().print(f"{markup(name)} paused: {markup(snapshot['paused_reason'])}", soft_wrap=True)


@cli.command()
@click.argument("name")
@utc_option
@api_options
def unpause(name: str, utc: bool, api: str, token: str | None) -> None:
    """Unpause task NAME: its schedule restarts from now (the next fire time is shown in its
    zone)."""
    snapshot = _post(api, token, f"/api/v1/tasks/{segment(name)}/unpause")
    zones = Zones(None if utc else client(api, token), utc, {name: snapshot["timezone"]})
    when = Times(zones, dated=True)(snapshot["next_fire_at"], task=name)
    Console().print(f"{markup(name)} unpaused; next fire time {when}", soft_wrap=True)


@cli.command()
@click.argument("eid")
@click.option("--wait", is_flag=True, help="Follow the resume with a progress bar until it ends.")
@utc_option
@api_options
def resume(eid: str, wait: bool, utc: bool, api: str, token: str | None) -> None:
    """Resume execution EID (its id or a unique prefix) from its first step that did not
    succeed, as a new execution."""
    api_client = client(api, token)
    try:
        _, snapshot = api_client.post(f"/api/v1/executions/{segment(eid)}/resume")
        todo = [s["number"] for s in snapshot["steps"] if s["status"] != "SUCCESS"]
        start = f"step {todo[0]}" if todo and todo[0] > 1 else "the start"
        console = Console()
        console.print(
            f"resumed {markup(snapshot['resume_of'])} as {markup(snapshot['id'])}, from {start}",
            soft_wrap=True,
        )
        if not wait:
            return
        zone = Zones(api_client, utc).of(snapshot["task"])
        final = follow(api_client, snapshot, console, zone=zone)
    except ApiError as exc:
        fail(exc)
    raise SystemExit(exit_code(final))


@cli.command()
@click.argument("name")
@click.option(
    "--from",
    "start",
    required=True,
    metavar="TIME",
    help="Start of the period, included: a date (2026-11-01, its midnight in the task's "
    "zone) or RFC 3339 with its offset (2026-11-01T00:00:00Z).",
)
@click.option(
    "--to",
    "end",
    required=True,
    metavar="TIME",
    help="End of the period, left out (a date: its midnight, in the task's zone); not later "
    "than now.",
)
@click.option("--dry-run", is_flag=True, help="Only list the fire times; nothing runs.")
@json_option
@utc_option
@api_options
def backfill(
    name: str,
    start: str,
    end: str,
    dry_run: bool,
    as_json: bool,
    utc: bool,
    api: str,
    token: str | None,
) -> None:
    """Run the past fire times of task NAME in [--from, --to), oldest first: those its
    schedule, time zone, calendar and blackouts give. A fire time that has an execution
    already (run, skipped or backfilled before) does not run again. Times are shown in the
    task's zone."""
    body = {"from": start, "to": end, "dry_run": dry_run}
    answer = _post(api, token, f"/api/v1/tasks/{segment(name)}/backfill", body)
    if as_json:
        print_json(answer)
        return
    try:
        zones = Zones(client(api, token), utc)
        when = Times(zones, dated=True)
        period = f"{when(answer['from'], task=name)} to {when(answer['to'], task=name)}"
        console = Console()
        console.print(f"{markup(name)}: {period}", soft_wrap=True)
    except ApiError as exc:
        fail(exc)
    for moment in answer["fire_times"] if dry_run else answer["executions"]:
        line = when(moment, task=name) if dry_run else f"started {markup(moment)}"
        console.print(line, soft_wrap=True)
    new = answer["count"] - answer["already_run"]
    console.print(
        f"{answer['count']} fire times, {answer['already_run']} already run: "
        + (f"{new} would run (dry run: nothing was created)" if dry_run else f"{new} started"),
        soft_wrap=True,
    )


def _post(api: str, token: str | None, path: str, body: Any = None) -> Any:
    """POST ``body`` to ``path`` of the API: the answer's snapshot, or the command ends with
    the API error."""
    try:
        return client(api, token).post(path, body)[1]
    except ApiError as exc:
        fail(exc)
