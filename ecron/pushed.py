"""A pushed report, from whichever channel it came (a callback, a queue message): checked
in PROTOCOL.md's order (an id too long for any execution refused before any lookup), then
applied through ``Commands.report``, the one function that moves an execution on a report.
The callback endpoint and the queue consumer both call ``take_report`` and differ only in
how they answer its outcome (an HTTP status, a counted and acknowledged message)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import StrEnum

from ecron.commands import Commands
from ecron.core import Channel, Execution, InvalidReport, RemoteStatus, parse_report
from ecron.ids import shown_id, split_remote_id, too_long
from ecron.signing import token_matches
from ecron.store.base import Store

#: No id holds it (PostgreSQL's text cannot): an id with one names nothing.
_NUL = "\x00"
#: The most of a bad report's error quoted back.
_DETAIL_LIMIT = 500


class Pushed(StrEnum):
    """What became of a pushed report, in the order the checks are made."""

    #: The token is missing or is not this remote id's (callback: 401).
    UNAUTHORIZED = "unauthorized"
    #: No such execution, or no such step of it (callback: 404); an id too long to be one
    #: is answered so before the token is checked.
    UNKNOWN = "unknown"
    #: Not a valid report, or one saying UNKNOWN (callback: 400).
    MALFORMED = "malformed"
    #: The execution is final, its deadline had passed (the cancel is sent instead), or the
    #: report changed nothing (about a step already ended): nothing changed (callback: 409).
    TOO_LATE = "too_late"
    #: Applied (callback: 200).
    APPLIED = "applied"


@dataclass(frozen=True, slots=True)
class Taken:
    """The outcome of one pushed report, with one line saying why, and the execution as it
    is now (None when unknown)."""

    outcome: Pushed
    why: str
    execution: Execution | None = None
    #: What was wrong with a malformed report.
    detail: str = ""


async def take_report(
    *,
    store: Store,
    commands: Commands,
    secret: str,
    remote: str,
    token: str | None,
    body: Callable[[], Awaitable[bytes | str]],
    channel: Channel,
) -> Taken:
    """Check a report pushed about ``remote`` (an eid or ``<eid>.<n>``) with ``token``, in
    PROTOCOL.md's order: the execution or step exists (an id longer than any id is unknown
    without a lookup), the token is this id's (an HMAC of the id, worked out before the
    lookup), the body (read only then, by ``body``) is a report other than UNKNOWN, the
    execution is not final; then apply it through ``Commands.report``. Errors of the store
    are the caller's (nothing was applied)."""
    if too_long(remote) or _NUL in remote:
        return Taken(Pushed.UNKNOWN, f"no execution or step {shown_id(remote)!r}")
    authentic = bool(token) and token_matches(secret, remote, token or "")
    eid, step = split_remote_id(remote)
    execution = await store.get_execution(eid)
    if execution is None or (
        step is not None and not any(s.remote_id == remote for s in execution.steps)
    ):
        return Taken(Pushed.UNKNOWN, f"no execution or step {remote!r}")
    if not authentic:
        return Taken(Pushed.UNAUTHORIZED, "missing or wrong callback token")
    try:
        parsed = parse_report(json.loads(await body()))
    except (ValueError, InvalidReport, RecursionError) as exc:  # deep nesting: not a report
        detail = str(exc)[:_DETAIL_LIMIT] or type(exc).__name__
        return Taken(Pushed.MALFORMED, "not a valid report", execution, detail)
    if parsed.status is RemoteStatus.UNKNOWN:
        detail = f"a {channel} report cannot say UNKNOWN"
        return Taken(Pushed.MALFORMED, "not a valid report", execution, detail)
    if execution.is_final:
        why = f"execution {remote} is already {execution.status}"
        return Taken(Pushed.TOO_LATE, why, execution)
    transition, current = await commands.report(execution.eid, parsed, step, channel)
    if transition.cancel_due or not transition.changed:
        why = f"execution {remote} is {current.status}; the report changed nothing"
        return Taken(Pushed.TOO_LATE, why, current)
    return Taken(Pushed.APPLIED, f"execution {remote} is {current.status}", current)
