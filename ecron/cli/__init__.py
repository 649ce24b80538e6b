"""The ``ecron`` command: the daemon, config checks, and a client of the REST API."""

from __future__ import annotations

from ecron.cli.group import cli

__all__ = ["cli", "main"]


def main() -> None:
    """Entry point of the ``ecron`` console script (each command's module is imported when
    that command runs: ``ecron.cli.group.COMMANDS``)."""
    cli()
