"""Client commands: ``tasks``, ``trigger``, ``executions``, ``show``; they talk to the REST API."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

import click
from rich.console import Console
from rich.table import Table

from ecron.cli.client import ApiClient, ApiError
from ecron.cli.group import cli
from ecron.cli.upcoming import print_upcoming
from ecron.cli.watch import follow, status_text

F = TypeVar("F", bound=Callable[..., Any])


def api_options(command: F) -> F:
    """``--api`` and ``--token``, also from ECRON_API_URL and ECRON_API_TOKEN."""
    command = click.option(
        "--token",
        envvar="ECRON_API_TOKEN",
        default=None,
        help="API token (default: $ECRON_API_TOKEN).",
    )(command)
    command = click.option(
        "--api",
        envvar="ECRON_API_URL",
        default="http://127.0.0.1:8080",
        show_default=True,
        help="Base URL of a running daemon (or $ECRON_API_URL).",
    )(command)
    return command


def _client(api: str, token: str | None) -> ApiClient:
    return ApiClient(api, token)


def _fail(exc: ApiError) -> NoReturn:
    raise click.ClickException(str(exc)) from exc


@cli.command()
@click.option(
    "--next",
    "upcoming",
    type=click.IntRange(1, 100),
    default=None,
    metavar="N",
    help="Also list each task's next N fire times that will run (calendars applied).",
)
@api_options
def tasks(upcoming: int | None, api: str, token: str | None) -> None:
    """List tasks: schedule, next fire time, and how their last execution went."""
    try:
        items = _client(api, token).get("/api/v1/tasks")["items"]
    except ApiError as exc:
        _fail(exc)
    table = Table("task", "schedule", "next fire", "state", "last execution")
    for item in items:
        last = item.get("last_execution")
        state = "paused" if item["paused"] else ("disabled" if not item["enabled"] else "active")
        table.add_row(
            item["name"],
            item["schedule_text"],
            item["next_fire_at"] or "-",
            state,
            "-" if last is None else f"{status_text(last)} {last['id']}",
        )
    Console().print(table)
    if upcoming is not None:
        try:
            print_upcoming(_client(api, token), items, upcoming)
        except ApiError as exc:
            _fail(exc)


@cli.command()
@click.argument("name")
@click.option(
    "--wait", is_flag=True, help="Follow the execution with a progress bar until it ends."
)
@api_options
def trigger(name: str, wait: bool, api: str, token: str | None) -> None:
    """Run task NAME now. With --wait, exit 0 only if it ends SUCCESS."""
    client = _client(api, token)
    try:
        status, snapshot = client.post(f"/api/v1/tasks/{name}/run")
    except ApiError as exc:
        _fail(exc)
    console = Console()
    if status == 200:
        console.print(f"{name} is already running (concurrency: forbid): {snapshot['id']}")
    else:
        console.print(f"started {snapshot['id']}")
    if not wait:
        return
    final = follow(client, snapshot["id"], console)
    raise SystemExit(0 if final["status"] == "SUCCESS" else 1)


@cli.command()
@click.option("--task", default=None, help="Only this task's executions.")
@click.option("--status", default=None, help="Only executions with this status.")
@click.option("--limit", default=20, show_default=True, help="How many, newest first.")
@click.option("--before", default=None, help="Only executions older than this one (next page).")
@api_options
def executions(
    task: str | None,
    status: str | None,
    limit: int,
    before: str | None,
    api: str,
    token: str | None,
) -> None:
    """Execution history, newest first."""
    try:
        page = _client(api, token).get(
            "/api/v1/executions", task=task, status=status, limit=limit, before=before
        )
    except ApiError as exc:
        _fail(exc)
    table = Table("id", "task", "status", "progress", "scheduled", "finished", "message")
    for item in page["items"]:
        table.add_row(
            item["id"],
            item["task"],
            status_text(item),
            f"{item['progress']:.0f}%",
            item["scheduled_at"],
            item["finished_at"] or "-",
            (item["message"] or "")[:60],
        )
    Console().print(table)
    if page["next"]:
        Console().print(f"more: --before {page['next']}", style="dim")


@cli.command()
@click.argument("eid")
@click.option("--json", "as_json", is_flag=True, help="Print the raw JSON snapshot.")
@api_options
def show(eid: str, as_json: bool, api: str, token: str | None) -> None:
    """Show one execution: status, progress, times, steps."""
    try:
        item = _client(api, token).get(f"/api/v1/executions/{eid}")
    except ApiError as exc:
        _fail(exc)
    if as_json:
        click.echo(json.dumps(item, indent=2))
        return
    console = Console()
    table = Table(show_header=False, box=None)
    for key in (
        "id",
        "task",
        "status",
        "reason",
        "progress",
        "message",
        "trigger_kind",
        "attempt",
        "scheduled_at",
        "triggered_at",
        "finished_at",
        "deadline",
        "resume_of",
        "resume_attempt",
        "resumed_by",
        "upstream",
        "downstream",
    ):
        value = item.get(key)
        if key == "status":
            value = status_text(item)
        elif key == "downstream":
            value = ", ".join(value or ()) or None
        table.add_row(key, "-" if value is None else str(value))
    if item.get("result") is not None:
        table.add_row("result", json.dumps(item["result"])[:500])
    console.print(table)
    if item["steps"]:
        steps = Table("step", "name", "status", "progress", "remote id")
        for step in item["steps"]:
            steps.add_row(
                str(step["number"]),
                step["name"],
                step["status"],
                f"{step['progress']:.0f}%",
                step["remote_id"],
            )
        console.print(steps)


@cli.command()
@click.argument("eid")
@api_options
def cancel(eid: str, api: str, token: str | None) -> None:
    """Cancel execution EID: the cancel call goes to the user service once, then CANCELLED."""
    try:
        _, snapshot = _client(api, token).post(f"/api/v1/executions/{eid}/cancel")
    except ApiError as exc:
        _fail(exc)
    acknowledged = {True: "acknowledged", False: "not acknowledged", None: "not sent"}
    Console().print(
        f"{eid} {status_text(snapshot)}; the cancel call was "
        f"{acknowledged[snapshot['cancel_acknowledged']]}"
    )


@cli.command()
@click.argument("name")
@click.option("--reason", default=None, help="Shown in the task's snapshot.")
@api_options
def pause(name: str, reason: str | None, api: str, token: str | None) -> None:
    """Pause task NAME: it fires no more until unpaused (manual runs still work)."""
    client = _client(api, token)
    try:
        _, snapshot = client.post(
            f"/api/v1/tasks/{name}/pause", {"reason": reason} if reason else None
        )
    except ApiError as exc:
        _fail(exc)
    Console().print(f"{name} paused: {snapshot['paused_reason']}")


@cli.command()
@click.argument("name")
@api_options
def unpause(name: str, api: str, token: str | None) -> None:
    """Unpause task NAME: its schedule restarts from now."""
    try:
        _, snapshot = _client(api, token).post(f"/api/v1/tasks/{name}/unpause")
    except ApiError as exc:
        _fail(exc)
    Console().print(f"{name} unpaused; next fire time {snapshot['next_fire_at'] or '-'}")


@cli.command()
@click.argument("eid")
@click.option("--wait", is_flag=True, help="Follow the resume with a progress bar until it ends.")
@api_options
def resume(eid: str, wait: bool, api: str, token: str | None) -> None:
    """Resume execution EID from its first step that did not succeed (a new execution)."""
    client = _client(api, token)
    try:
        _, snapshot = client.post(f"/api/v1/executions/{eid}/resume")
    except ApiError as exc:
        _fail(exc)
    console = Console()
    todo = [s["number"] for s in snapshot["steps"] if s["status"] != "SUCCESS"]
    start = f"step {todo[0]}" if todo and todo[0] > 1 else "the start"
    console.print(f"resumed {eid} as {snapshot['id']}, from {start}")
    if wait:
        final = follow(client, snapshot["id"], console)
        raise SystemExit(0 if final["status"] == "SUCCESS" else 1)
