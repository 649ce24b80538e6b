"""``ecron check-service URL``: tell the author of a user service whether it follows
PROTOCOL.md, before anything is scheduled (the checks are in ``service_checks``)."""

from __future__ import annotations

import asyncio
import json
import textwrap
from datetime import timedelta
from typing import Any

import click
from pydantic import ValidationError
from rich.console import Console
from rich.text import Text

from ecron.cli.checklist import Checklist, Verdict
from ecron.cli.group import cli
from ecron.cli.outside import markup, plain
from ecron.cli.service_checks import CheckOptions, check_templates, run_checks
from ecron.config.model import CallSettings
from ecron.durations import parse_duration

#: Printed after the count of each verdict.
_WORDS = {
    Verdict.PASS: "passed",
    Verdict.WARN: "warned",
    Verdict.FAIL: "failed",
    Verdict.SKIP: "skipped",
}
_STYLES = {Verdict.PASS: "green", Verdict.WARN: "yellow", Verdict.FAIL: "red", Verdict.SKIP: "dim"}


def _duration(_ctx: click.Context, param: click.Parameter, value: str) -> timedelta:
    try:
        duration = parse_duration(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from exc
    if duration <= timedelta(0):
        raise click.BadParameter(f"{value!r} must be longer than zero")
    return duration


def _headers(
    _ctx: click.Context, _param: click.Parameter, values: tuple[str, ...]
) -> dict[str, str]:
    headers = {}
    for value in values:
        name, colon, text = value.partition(":")
        if not colon or not name.strip():
            raise click.BadParameter(f"{value!r} is not a header: write it as 'Name: value'")
        headers[name.strip()] = text.strip()
    return headers


def _body(_ctx: click.Context, _param: click.Parameter, value: str | None) -> Any:
    try:
        return None if value is None else json.loads(value)
    except ValueError as exc:
        raise click.BadParameter(f"{value!r} is not JSON: {exc}") from exc


def call_settings(url: str, **keys: Any) -> CallSettings:
    """The call settings of a task with this ``url`` and keys; one clear line when not valid."""
    try:
        call = CallSettings.model_validate({"url": url, **keys})
        check_templates(call)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"])
        raise click.BadParameter(f"{where}: {error['msg']}") from None
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from exc
    return call


@cli.command("check-service")
@click.argument("url")
@click.option(
    "--secret",
    envvar="ECRON_CHECK_SECRET",
    metavar="SECRET",
    default=None,
    help="Sign the calls as a task with this secret would (or $ECRON_CHECK_SECRET).",
)
@click.option(
    "-H",
    "--header",
    "headers",
    multiple=True,
    metavar="'NAME: VALUE'",
    callback=_headers,
    help="A header of the task, 'Name: value' (repeatable).",
)
@click.option(
    "--body",
    default=None,
    metavar="JSON",
    callback=_body,
    help="The trigger's body as JSON (default {}).",
)
@click.option(
    "--poll-url",
    default=None,
    metavar="TEMPLATE",
    help="The task's poll_url template, if it has one.",
)
@click.option(
    "--batch-poll-url",
    default=None,
    metavar="URL",
    help="The task's batch_poll_url, if it has one: ask it about the eid and an unknown one.",
)
@click.option(
    "--cancel-url",
    default=None,
    metavar="TEMPLATE",
    help="The task's cancel_url template, if it has one.",
)
@click.option(
    "--task",
    default="check-service",
    metavar="NAME",
    show_default=True,
    help="X-Ecron-Task to send.",
)
@click.option(
    "--timeout",
    default="10s",
    show_default=True,
    callback=_duration,
    metavar="DURATION",
    help="Limit of one call.",
)
@click.option(
    "--watch",
    default="3s",
    show_default=True,
    callback=_duration,
    metavar="DURATION",
    help="How long to watch the execution move, before the repeat and after the cancel.",
)
@click.option(
    "--poll-interval",
    default="250ms",
    show_default=True,
    callback=_duration,
    metavar="DURATION",
    help="Time between two polls while watching.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the checklist as JSON.")
@click.pass_context
def check_service_command(
    ctx: click.Context,
    url: str,
    secret: str | None,
    headers: dict[str, str],
    body: Any,
    poll_url: str | None,
    batch_poll_url: str | None,
    cancel_url: str | None,
    task: str,
    timeout: timedelta,
    watch: timedelta,
    poll_interval: timedelta,
    as_json: bool,
) -> None:
    """Check that the user service at URL (a task's url) follows the HTTP task protocol.

    It triggers a new execution id, polls it, triggers it again, (with --batch-poll-url)
    asks the batch endpoint about it and an id the service never saw in one call, cancels
    it, and asks about that unknown id; it prints each rule, passed or failed and why, and
    exits 1 when one failed. Whatever it started, it cancels.
    """
    call = call_settings(
        url,
        headers=headers,
        body=body,
        poll_url=poll_url,
        batch_poll_url=batch_poll_url,
        cancel_url=cancel_url,
        request_timeout=timeout,
        secret=secret or None,
    )
    options = CheckOptions(
        call, task, watch=watch.total_seconds(), poll_interval=poll_interval.total_seconds()
    )
    checklist = asyncio.run(run_checks(options))
    if as_json:
        click.echo(json.dumps(checklist.as_json(), indent=2))
    else:
        print_checklist(checklist, Console(highlight=False))
    ctx.exit(0 if checklist.passed else 1)


def print_checklist(checklist: Checklist, console: Console) -> None:
    """Each rule with its verdict, what it asks and what was seen; then the count."""
    console.print(f"checking {markup(checklist.url)}", soft_wrap=True)
    console.print(
        f"execution id {checklist.eid}, unknown id {checklist.unknown_eid}\n",
        style="dim",
        soft_wrap=True,
    )
    checks = checklist.ordered()
    width = max(40, console.width)
    for check in checks:
        style = _STYLES[check.verdict]
        console.print(f"[{style}]{check.verdict.value.upper()}[/] [bold]{check.rule}[/]")
        console.print(Text(_indented(check.says, width)))
        seen_style = "dim" if check.verdict is Verdict.PASS else ""
        console.print(Text(_indented(plain(check.detail), width), style=seen_style))
    counts = {v: sum(c.verdict is v for c in checks) for v in Verdict}
    said = ", ".join(f"{counts[v]} {word}" for v, word in _WORDS.items() if counts[v])
    verdict = "follows" if checklist.passed else "does not follow"
    console.print(f"\n{len(checks)} rules: {said}: the service {verdict} the protocol")


def _indented(text: str, width: int) -> str:
    """``text`` wrapped to ``width`` under a five-space indent."""
    return textwrap.fill(
        text,
        width,
        initial_indent="     ",
        subsequent_indent="     ",
        break_long_words=False,
        break_on_hyphens=False,
    )
