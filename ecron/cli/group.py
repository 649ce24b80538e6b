"""The ``ecron`` command group, which every command module adds its commands to."""

from __future__ import annotations

import importlib
from typing import IO, Any

import click

from ecron import __version__
from ecron.errors import EcronError


class OneLineUsageError(EcronError, click.UsageError):
    """A usage error said in one line, like every other error of the CLI (the usage
    itself is one ``--help`` away)."""

    def show(self, file: IO[Any] | None = None) -> None:
        hint = f" (see '{self.ctx.command_path} --help')" if self.ctx is not None else ""
        click.echo(f"Error: {self.format_message()}{hint}", file=file, err=True)


#: Each command of ``ecron`` and the module that defines it. A module is imported only when
#: one of its commands is asked for (or ``--help`` lists them all), so a client command
#: such as ``ecron tasks`` loads click, rich and the standard library's HTTP client, not
#: aiohttp, pydantic or the daemon (docs/performance.md, "The CLI's start").
COMMANDS = {
    "run": "ecron.cli.daemon_cmds",
    "db": "ecron.cli.daemon_cmds",
    "validate": "ecron.cli.validate",
    "plan": "ecron.cli.plan",
    "demo": "ecron.cli.demo",
    "check-service": "ecron.cli.check_service",
    "tasks": "ecron.cli.client_cmds",
    "executions": "ecron.cli.client_cmds",
    "show": "ecron.cli.client_cmds",
    "steps": "ecron.cli.client_cmds",
    "pools": "ecron.cli.client_cmds",
    "trigger": "ecron.cli.action_cmds",
    "cancel": "ecron.cli.action_cmds",
    "resume": "ecron.cli.action_cmds",
    "pause": "ecron.cli.action_cmds",
    "unpause": "ecron.cli.action_cmds",
    "backfill": "ecron.cli.action_cmds",
    "watch": "ecron.cli.watch",
    "audit": "ecron.cli.audit_cmd",
}


class Group(click.Group):
    """A group whose commands' usage errors are one line."""

    #: Subgroups (``ecron db``) are groups of this kind too.
    group_class = type

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except OneLineUsageError:
            raise
        except click.UsageError as exc:
            raise OneLineUsageError(exc.format_message(), exc.ctx) from exc


class LazyGroup(Group):
    """The ``ecron`` group: a command's module is imported when the command is asked for
    (``COMMANDS``), and it adds its commands to the group as it is imported."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            importlib.import_module(COMMANDS[cmd_name])
        return super().get_command(ctx, cmd_name)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="ecron")
def cli() -> None:
    """ecron: a cron-style scheduler for long-running remote jobs."""
