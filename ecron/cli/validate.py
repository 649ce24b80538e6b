"""``ecron validate -c DIR``: check a config directory and print every problem at once."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime

import click

from ecron.cli.group import cli
from ecron.cli.outside import plain
from ecron.config.summary import validation_report


@cli.command()
@click.option(
    "-c",
    "--config",
    "directory",
    default="config",
    show_default=True,
    metavar="DIR",
    help="Config directory holding ecron.yaml and tasks/*.yaml.",
)
@click.option("--utc", is_flag=True, help="Show next fire times in UTC, not in each task's zone.")
@click.pass_context
def validate(ctx: click.Context, directory: str, utc: bool) -> None:
    """Check the config in DIR: print each task and its next fire time (in its zone), or
    every problem.

    Exits 0 when the config is valid and 1 when it is not (problems go to stderr).
    """
    width = shutil.get_terminal_size((80, 24)).columns
    code, lines = validation_report(directory, datetime.now(UTC), utc=utc, width=width)
    for line in lines:
        click.echo(plain(line), err=code != 0)
    ctx.exit(code)
