"""``ecron audit``: who did what through the API, and what each config load changed (the
REST API's GET /api/v1/audit; admins only)."""

from __future__ import annotations

from typing import Any

import click
from rich.console import Console

from ecron.cli.client import ApiError
from ecron.cli.client_cmds import get, print_json
from ecron.cli.display import Times, Zones, table
from ecron.cli.group import cli
from ecron.cli.options import api_options, client, fail, json_option, utc_option, wide_option
from ecron.cli.outside import markup, plain


@cli.command()
@click.option("--actor", default=None, help="Only this caller's entries (or config).")
@click.option("--task", default=None, help="Only entries about this task.")
@click.option("--action", default=None, help="Only this action (run, pause, change, ...).")
@click.option("--limit", default=20, show_default=True, help="How many, newest first.")
@click.option("--before", default=None, help="Only entries older than this one (next page).")
@json_option
@wide_option
@utc_option
@api_options
def audit(
    actor: str | None,
    task: str | None,
    action: str | None,
    limit: int,
    before: str | None,
    as_json: bool,
    wide: bool,
    utc: bool,
    api: str,
    token: str | None,
) -> None:
    """The audit log, newest first (times in the daemon's zone): every request that changed
    something or was refused, and every change of the task set at load or reload (actor
    config). Needs an admin token."""
    page = get(
        api,
        token,
        "/api/v1/audit",
        actor=actor,
        task=task,
        action=action,
        limit=limit,
        before=before,
    )
    if as_json:
        print_json(page)
        return
    zones = Zones(client(api, token), utc)
    when, dated = Times(zones, dated=wide), Times(zones, dated=True)
    try:
        rows = [
            [
                when(item["at"]),  # when it was asked: in the daemon's zone
                markup(item["actor"]),
                markup(item["action"]),
                markup(item["target"]),
                "-" if item["status"] is None else str(item["status"]),
                markup(_more(item, dated)),
            ]
            for item in page["items"]
        ]
    except ApiError as exc:
        fail(exc)
    console = Console()
    columns = ("when", "actor", "action", "target", "status", "detail")
    whole = ("when", "actor", "action", "status")
    console.print(table(columns, rows, wide=wide, width=console.width, whole=whole), crop=False)
    if page["next"]:
        click.echo(f"older: ecron audit --before {plain(page['next'])}")


def _more(item: dict[str, Any], when: Times) -> str:
    """What changed (a config change's fields), the period of a backfill (with its dates, in
    its task's zone) and whether it was a dry run, or who asked from where."""
    detail = item.get("detail") or {}
    fields = detail.get("fields") if isinstance(detail, dict) else None
    if fields:
        return ", ".join(str(change.get("field")) for change in fields if isinstance(change, dict))
    if isinstance(detail, dict) and "from" in detail and "to" in detail:
        dry = " (dry run)" if detail.get("dry_run") else ""
        task = item.get("task")  # a backfill's period is of its task's times: in its zone
        return (
            f"{when(str(detail['from']), task=task)} to {when(str(detail['to']), task=task)}{dry}"
        )
    count = item.get("count") or 1
    remote = item.get("remote") or ""
    return f"{remote} ({count} requests)" if count > 1 else remote
