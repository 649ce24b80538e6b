"""What the client commands share: where the daemon is (``--api``, ``--token``), how to
print (``--json``, ``--wide``), and how an API error ends the command (one line, exit 1)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

import click

from ecron.cli.client import ApiClient, ApiError

F = TypeVar("F", bound=Callable[..., Any])


def api_options(command: F) -> F:
    """``--api`` and ``--token``, also from ECRON_API_URL and ECRON_API_TOKEN."""
    command = click.option(
        "--token",
        envvar="ECRON_API_TOKEN",
        default=None,
        help="API token (default: $ECRON_API_TOKEN).",
    )(command)
    command = click.option(
        "--api",
        envvar="ECRON_API_URL",
        default="http://127.0.0.1:8080",
        show_default=True,
        help="Base URL of a running daemon (or $ECRON_API_URL).",
    )(command)
    return command


def json_option(command: F) -> F:
    """``--json``: print what the API answered instead of a table."""
    return click.option(
        "--json", "as_json", is_flag=True, help="Print the API's JSON answer instead."
    )(command)


def wide_option(command: F) -> F:
    """``--wide``: full ids and every time with its date, nothing cut."""
    return click.option(
        "--wide", is_flag=True, help="Full ids, every time with its date, nothing cut."
    )(command)


def utc_option(command: F) -> F:
    """``--utc``: every time in UTC, instead of its task's zone (or the daemon's)."""
    return click.option(
        "--utc",
        is_flag=True,
        help="Show times in UTC, not in each task's time zone (or the daemon's).",
    )(command)


def client(api: str, token: str | None) -> ApiClient:
    """The client of the daemon at ``api``."""
    return ApiClient(api, token)


def fail(exc: ApiError) -> NoReturn:
    """End the command with the API error as one line on stderr, exit status 1."""
    raise click.ClickException(str(exc)) from exc
