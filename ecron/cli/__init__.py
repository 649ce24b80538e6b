"""The ``ecron`` command: the daemon, config checks, and a client of the REST API."""

from __future__ import annotations

from ecron.cli.group import cli

__all__ = ["cli", "main"]


def main() -> None:
    """Entry point of the ``ecron`` console script."""
    from ecron.cli import (  # noqa: F401  (registers commands)
        action_cmds,
        audit_cmd,
        check_service,
        client_cmds,
        daemon_cmds,
        demo,
        plan,
        validate,
        watch,
    )

    cli()
