"""The ``ecron`` command group, which every command module adds its commands to."""

from __future__ import annotations

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


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="ecron")
def cli() -> None:
    """ecron: a cron-style scheduler for long-running remote jobs."""
