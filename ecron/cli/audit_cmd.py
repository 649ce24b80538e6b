"""``ecron audit``: who did what through the API, and what each config load changed (the
REST API's GET /api/v1/audit; admins only)."""

from __future__ import annotations

from typing import Any

import click
from rich.console import Console
from rich.markup import escape

from ecron.cli.client_cmds import get, print_json
from ecron.cli.display import Times, table
from ecron.cli.group import cli
from ecron.cli.options import api_options, json_option, wide_option


@cli.command()
@click.option("--actor", default=None, help="Only this caller's entries (or config).")
@click.option("--task", default=None, help="Only entries about this task.")
@click.option("--action", default=None, help="Only this action (run, pause, change, ...).")
@click.option("--limit", default=20, show_default=True, help="How many, newest first.")
@click.option("--before", default=None, help="Only entries older than this one (next page).")
@json_option
@wide_option
@api_options
def audit(
    actor: str | None,
    task: str | None,
    action: str | None,
    limit: int,
    before: str | None,
    as_json: bool,
    wide: bool,
    api: str,
    token: str | None,
) -> None:
    """The audit log, newest first: every request that changed something or was refused,
    and every change of the task set at load or reload (actor config). Needs an admin
    token."""
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
    when = Times(wide)
    rows = [
        [
            when(item["at"]),
            escape(item["actor"]),
            escape(item["action"]),
            escape(item["target"]),
            "-" if item["status"] is None else str(item["status"]),
            escape(_more(item)),
        ]
        for item in page["items"]
    ]
    console = Console()
    columns = ("when", "actor", "action", "target", "status", "detail")
    whole = ("when", "actor", "action", "status")
    console.print(table(columns, rows, wide=wide, width=console.width, whole=whole), crop=False)
    if page["next"]:
        click.echo(f"older: ecron audit --before {page['next']}")


def _more(item: dict[str, Any]) -> str:
    """What changed (a config change's fields), or who asked from where."""
    detail = item.get("detail") or {}
    fields = detail.get("fields") if isinstance(detail, dict) else None
    if fields:
        return ", ".join(str(change.get("field")) for change in fields)
    return item.get("remote") or ""
