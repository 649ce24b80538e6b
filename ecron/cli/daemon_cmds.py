"""``ecron run`` (the daemon) and ``ecron db upgrade``."""

from __future__ import annotations

import asyncio
from pathlib import Path

import click

from ecron import loop
from ecron.cli.group import cli
from ecron.cli.outside import plain
from ecron.config import Config, load_config
from ecron.errors import ConfigError, EcronError
from ecron.logs import configure

config_option = click.option(
    "-c",
    "--config",
    "directory",
    default="config",
    show_default=True,
    metavar="DIR",
    help="Config directory holding ecron.yaml and tasks/*.yaml.",
)


def load_or_exit(directory: str) -> Config:
    """The config in ``directory``, or every problem printed and exit status 1."""
    try:
        return load_config(Path(directory))
    except ConfigError as exc:
        for problem in exc.problems:
            click.echo(plain(problem), err=True)
        raise SystemExit(1) from exc


@cli.command()
@config_option
def run(directory: str) -> None:
    """Run the daemon: migrate the database, fire tasks, serve the API (SIGTERM stops it,
    SIGHUP reloads the task files)."""
    from ecron.daemon import run_until_signalled

    config = load_or_exit(directory)
    configure(config.daemon.log.format, config.daemon.log.level)
    try:
        loop.run(run_until_signalled(config, reload=lambda: load_config(Path(directory))))
    except EcronError as exc:
        raise click.ClickException(plain(str(exc))) from exc


@cli.group()
def db() -> None:
    """Database commands."""


@db.command()
@config_option
def upgrade(directory: str) -> None:
    """Create or migrate the database schema to the newest revision, and exit."""
    from ecron.store.engine import Engines
    from ecron.store.migrate import upgrade as run_upgrade

    config = load_or_exit(directory)

    async def migrate() -> tuple[str | None, str | None]:
        engines = Engines(config.daemon.database)
        try:
            return await run_upgrade(engines)
        finally:
            await engines.dispose()

    before, after = asyncio.run(migrate())
    if before == after:
        click.echo(f"database already at revision {after}")
    else:
        click.echo(f"database migrated from {before or 'nothing'} to {after}")
