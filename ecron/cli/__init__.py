"""The ``ecron`` command: the daemon, config checks, and a client of the REST API."""

from __future__ import annotations

import click

from ecron import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="ecron")
def cli() -> None:
    """ecron: a cron-style scheduler for long-running remote jobs."""


def main() -> None:
    """Entry point of the ``ecron`` console script."""
    from ecron.cli import client_cmds, daemon_cmds, demo, validate  # noqa: F401  (registers commands)

    cli()
