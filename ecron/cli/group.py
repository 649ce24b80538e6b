"""The ``ecron`` command group, which every command module adds its commands to."""

from __future__ import annotations

import click

from ecron import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="ecron")
def cli() -> None:
    """ecron: a cron-style scheduler for long-running remote jobs."""
