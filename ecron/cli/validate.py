"""``ecron validate -c DIR``: check a config directory and print every problem at once."""

from __future__ import annotations

from datetime import UTC, datetime

import click

from ecron.cli.group import cli
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
@click.pass_context
def validate(ctx: click.Context, directory: str) -> None:
    """Check the config in DIR: print each task and its next fire time, or every problem.

    Exits 0 when the config is valid and 1 when it is not (problems go to stderr).
    """
    code, lines = validation_report(directory, datetime.now(UTC))
    for line in lines:
        click.echo(line, err=code != 0)
    ctx.exit(code)
