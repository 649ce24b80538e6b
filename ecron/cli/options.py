"""What the client commands share: where the daemon is and who asks (``--api``,
``--token``, ``--token-file``), how to print (``--json``, ``--wide``), and how an API error
ends the command (one line, exit 1)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import click
from click.core import ParameterSource

from ecron.cli.client import ApiClient, ApiError
from ecron.cli.outside import plain

F = TypeVar("F", bound=Callable[..., Any])


def api_options(command: F) -> F:
    """``--api``, ``--token`` and ``--token-file``: where the daemon is and the token to
    send it (``token``: from ``--token``, else the file ``--token-file`` names, else
    ECRON_API_TOKEN; a token on the command line shows in ``ps`` to every user of the
    machine, a file or the environment does not)."""
    command = click.option(
        "--token-file",
        envvar="ECRON_API_TOKEN_FILE",
        default=None,
        expose_value=False,
        is_eager=True,
        metavar="FILE",
        callback=_read_token_file,
        help="Read the API token from FILE (or $ECRON_API_TOKEN_FILE).",
    )(command)
    command = click.option(
        "--token",
        envvar="ECRON_API_TOKEN",
        default=None,
        callback=_token,
        help="API token (default: $ECRON_API_TOKEN). Visible to every user of this machine "
        "in ps: prefer --token-file or ECRON_API_TOKEN.",
    )(command)
    command = click.option(
        "--api",
        envvar="ECRON_API_URL",
        default="http://127.0.0.1:8080",
        show_default=True,
        help="Base URL of a running daemon (or $ECRON_API_URL).",
    )(command)
    return command


#: Where ``--token-file``'s token is kept until ``--token`` is decided.
_FROM_FILE = "ecron_token_from_file"


def _read_token_file(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    """The token of the file ``value`` names (its surrounding white space left out), kept
    for ``_token``; the file is named in an error, its content never quoted."""
    if value is None:
        return
    try:
        text = Path(value).read_text(encoding="utf-8").strip()
    except (OSError, ValueError) as exc:
        why = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise click.BadParameter(f"cannot read {value} ({why})", ctx, param) from None
    if not text or any(char.isspace() for char in text):
        raise click.BadParameter(
            f"{value} must hold one token on one line (and nothing else)", ctx, param
        )
    ctx.meta[_FROM_FILE] = text


def _token(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """``--token`` given on the command line, else ``--token-file``'s, else
    ECRON_API_TOKEN; both options given is an error."""
    from_file = ctx.meta.get(_FROM_FILE)
    if from_file is None:
        return value
    if ctx.get_parameter_source("token") is ParameterSource.COMMANDLINE:
        raise click.BadParameter("give --token or --token-file, not both", ctx, param)
    return str(from_file)


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
    raise click.ClickException(plain(str(exc))) from exc
