"""``ecron plan -c DIR``: what loading DIR would change in the database it names, without
changing it. The diff is ``store.changes.task_set_change``, the one the daemon's sync
writes and logs (``tasks_synced``)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import click
from rich.console import Console

from ecron.cli.daemon_cmds import config_option
from ecron.cli.group import OneLineUsageError, cli
from ecron.cli.outside import json_text, markup, plain
from ecron.config import Config, load_config
from ecron.config.digests import digest_key
from ecron.config.summary import problem_lines
from ecron.errors import ConfigError, EcronError
from ecron.planning import FirstFireTimes
from ecron.store.changes import FieldChange, TaskSetChange, task_set_change
from ecron.store.peek import peek_tasks
from ecron.wall import UTC_NAME, wall

#: A value longer than this is cut in the text output (``--json`` has it whole).
SHOWN = 60
#: Said when the database holds no ecron schema yet.
NO_DATABASE = "no ecron tasks in the database yet (no file or no schema): all are new"


class _UsageError(OneLineUsageError):
    """``ecron plan``'s usage error exits 1, like its other errors: its 2 says "changes"."""

    exit_code = 1


class _PlanCommand(click.Command):
    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as exc:
            raise _UsageError(exc.format_message(), exc.ctx) from exc


@cli.command(cls=_PlanCommand)
@config_option
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON.")
@click.option("--utc", is_flag=True, help="Show next fire times in UTC, not in each task's zone.")
@click.pass_context
def plan(ctx: click.Context, directory: str, as_json: bool, utc: bool) -> None:
    """Show what loading the config in DIR would change in the database it names: tasks
    added, changed (field by field, with the next fire time before and after, in the task's
    zone) and retired. Reads only: the database is neither written nor created nor
    migrated.

    Exits 0 when nothing would change, 2 when something would, 1 on an error.
    """
    now = datetime.now(UTC)
    try:
        config = load_config(directory, now=now)
    except ConfigError as exc:
        for line in problem_lines(exc):
            click.echo(plain(line), err=True)
        ctx.exit(1)
    try:
        change, fresh = asyncio.run(_plan(config, now))
    except (EcronError, OSError) as exc:
        raise click.ClickException(plain(str(exc))) from exc
    if as_json:
        if fresh:
            click.echo(f"note: {NO_DATABASE}", err=True)
        click.echo(json_text(change.as_json(), indent=2))
    else:
        console = Console(highlight=False, soft_wrap=False)
        if fresh:
            console.print(f"note: {NO_DATABASE}")
        zones = {name: UTC_NAME if utc else spec.timezone for name, spec in config.tasks.items()}
        for line in plan_lines(change, zones):
            console.print(line)
    ctx.exit(2 if change else 0)


async def _plan(config: Config, now: datetime) -> tuple[TaskSetChange, bool]:
    """The change, and whether the database holds no ecron schema yet."""
    try:
        stored, secret = await peek_tasks(config.daemon.database, config.daemon.secret)
    except Exception as exc:
        if isinstance(exc, EcronError):
            raise
        raise EcronError(f"database: cannot be read: {exc}") from exc
    if secret is not None:  # the rows' digests are keyed with it, as the daemon keys them
        for spec in config.tasks.values():
            spec.keyed(digest_key(secret))
    change = task_set_change(stored or {}, config.tasks, FirstFireTimes(now))
    return change, stored is None


def plan_lines(change: TaskSetChange, zones: Mapping[str, str] | None = None) -> list[str]:
    """The plan in rich markup: ``+ name`` added, ``~ name`` changed with a line per field
    and the next fire time (a wall time in the task's zone, ``zones``; UTC without),
    ``- name`` retired, then a summary."""
    lines = []
    zone = (zones or {}).get
    for name in change.added:
        was = " (was retired)" if name in change.revived else ""
        lines.append(f"[green]+ {markup(name)}[/]{was}")
        lines.append(f"    next fire: {_when(change.next_fire[name][1], zone(name))}")
    for name, fields in change.changed.items():
        lines.append(f"[yellow]~ {markup(name)}[/]")
        lines += [f"    {markup(c.field)}: {_values(c)}" for c in fields]
        if not fields:
            lines.append("    (the stored spec was written by another ecron: no field differs)")
        before, after = (_when(at, zone(name)) for at in change.next_fire[name])
        moved = f"{before} → {after}" if before != after else f"{after} (kept)"
        lines.append(f"    next fire: {moved}")
    lines += [f"[red]- {markup(name)}[/]" for name in change.retired]
    lines.append(change.summary() if change else "No change: " + change.summary())
    return lines


def _values(change: FieldChange) -> str:
    return f"{markup(_shown(change.old))} → {markup(_shown(change.new))}"


def _shown(value: Any) -> str:
    """A JSON value in one line, cut at ``SHOWN`` characters; ``none`` when absent."""
    if value is None:
        return "none"
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= SHOWN else text[: SHOWN - 1] + "…"


def _when(at: datetime | None, zone: str | None) -> str:
    return "none" if at is None else wall(at, zone)
