"""Following an execution live: ``ecron watch EID``, and the ``--wait`` of ``trigger``
and ``resume``. A rich progress bar with the API's ETA (a wall time in the task's zone),
or one JSON line per change.

Exit status: 0 when the execution ends SUCCESS, 1 when it ends any other way (or the
API fails), 130 when Ctrl-C stops the watching, which leaves the execution running.
"""

from __future__ import annotations

import sys
import time
from datetime import UTC, datetime
from typing import Any

import click
from rich.console import Console
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn
from rich.text import Text

from ecron.cli.client import ApiClient, ApiError, segment
from ecron.cli.display import FINAL, Zones, parse_time, stalled_text, status_text
from ecron.cli.group import cli
from ecron.cli.options import api_options, client, fail, utc_option
from ecron.cli.outside import json_text, markup, plain
from ecron.wall import UTC_NAME, wall_today

#: The exit status when Ctrl-C stops the watching (128 + SIGINT, as shells report it).
INTERRUPTED = 130


def exit_code(item: dict[str, Any]) -> int:
    """0 for an execution that ended SUCCESS, 1 for any other end."""
    return 0 if item["status"] == "SUCCESS" else 1


def follow(
    client: ApiClient,
    item: dict[str, Any],
    console: Console,
    *,
    as_json: bool = False,
    interval: float = 0.5,
    zone: str = UTC_NAME,
) -> dict[str, Any]:
    """Follow the execution of snapshot ``item`` until it ends; its final snapshot. Its ETA
    is shown as a wall time of ``zone`` (its task's).

    Ctrl-C stops the following, not the execution: it says how to follow it again and
    exits with status 130.
    """
    path = f"/api/v1/executions/{item['id']}"
    try:
        if as_json:
            return _lines(client, path, item, interval)
        return _bar(client, path, item, console, interval, zone)
    except KeyboardInterrupt:
        click.echo(
            f"stopped watching; execution {plain(item['id'])} goes on. "
            f"Follow it again with: ecron watch {plain(item['id'])}",
            err=True,
        )
        raise SystemExit(INTERRUPTED) from None


#: The bar's own width, in columns.
BAR_WIDTH = 20


def progress_bar(console: Console) -> Progress:
    """The bar the CLI draws for one execution, its ETA the API's."""
    return Progress(
        TextColumn("{task.fields[label]}"),
        BarColumn(bar_width=BAR_WIDTH),
        TaskProgressColumn(),
        TextColumn("{task.fields[status]}"),
        TextColumn("{task.fields[eta]}"),
        TextColumn("{task.fields[message]}", style="dim"),
        console=console,
        transient=False,
    )


def eta_text(item: dict[str, Any], zone: str = UTC_NAME) -> str:
    """``ETA 15:03:50 CST`` from the snapshot's ``eta``, a wall time of ``zone`` (with its
    date when that is not today's); nothing when it has none."""
    eta = parse_time(item.get("eta"))
    return "" if eta is None else f"ETA {wall_today(eta, zone, datetime.now(UTC))}"


def _fields(item: dict[str, Any], width: int, zone: str) -> dict[str, Any]:
    """What the bar's row shows of ``item``, its message cut to what the line has left."""
    fields = {
        "label": markup(item["task"]),
        "status": " ".join(filter(None, (status_text(item), stalled_text(item)))),
        "eta": eta_text(item, zone),
    }
    used = BAR_WIDTH + 4 + sum(Text.from_markup(text).cell_len for text in fields.values())
    room = width - used - 5  # one space between each of the six columns
    message = " ".join((item.get("message") or "").split())
    if len(message) > room:
        message = message[: max(room - 1, 0)] + "…" if room > 0 else ""
    return {**fields, "message": markup(message)}


def _bar(
    client: ApiClient,
    path: str,
    item: dict[str, Any],
    console: Console,
    interval: float,
    zone: str,
) -> dict[str, Any]:
    with progress_bar(console) as bar:
        row = bar.add_task("", total=100, **_fields(item, console.width, zone))
        while True:
            bar.update(row, completed=item["progress"], **_fields(item, console.width, zone))
            if item["status"] in FINAL:
                return item
            time.sleep(interval)
            item = client.get(path)


def _lines(client: ApiClient, path: str, item: dict[str, Any], interval: float) -> dict[str, Any]:
    """One JSON line per change of the snapshot (its ``eta`` moving alone is no change)."""
    shown: dict[str, Any] | None = None
    while True:
        same = {**item, "eta": None}
        if same != shown:
            click.echo(json_text(item))
            sys.stdout.flush()
            shown = same
        if item["status"] in FINAL:
            return item
        time.sleep(interval)
        item = client.get(path)


@cli.command()
@click.argument("eid")
@click.option("--json", "as_json", is_flag=True, help="One JSON snapshot per line, per change.")
@utc_option
@api_options
def watch(eid: str, as_json: bool, utc: bool, api: str, token: str | None) -> None:
    """Follow execution EID (its id or a unique prefix) until it ends: a progress bar with
    its ETA (in its task's zone). Exit 0 if it ends SUCCESS, 1 otherwise, 130 on Ctrl-C (it
    goes on)."""
    api_client = client(api, token)
    try:
        item = api_client.get(f"/api/v1/executions/{segment(eid)}")
        zone = UTC_NAME if as_json else Zones(api_client, utc).of(item["task"])
        final = follow(api_client, item, Console(), as_json=as_json, zone=zone)
    except ApiError as exc:
        fail(exc)
    raise SystemExit(exit_code(final))
