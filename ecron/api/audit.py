"""``/api/v1/audit``: who did what (admins only); ``/api/v1/caller``: who the token names;
``/api/v1/about``: the daemon, and the zone of times without a task."""

from __future__ import annotations

from typing import Any

from aiohttp import web

import ecron
from ecron.api import schemas
from ecron.api.access import CALLER
from ecron.api.context import NUL, context, error
from ecron.api.operation import Operation, query
from ecron.clock import iso
from ecron.core.audit import AuditEntry, AuditQuery

routes = web.RouteTableDef()

#: Page size when none is asked for, and the most one page may hold.
DEFAULT_LIMIT, MAX_LIMIT = 50, 500
#: The largest entry id: the databases' 64-bit integer (a larger ``before`` is read as this
#: one, not handed to a driver that cannot bind it).
MAX_ID = 2**63 - 1
ERROR = schemas.ErrorAnswer


@routes.get("/api/v1/audit")
async def list_audit(request: web.Request) -> web.Response:
    """The audit log, newest first: ``?actor=&action=&task=&limit=&before=``."""
    given = request.query
    cursor = given.get("before") or None
    try:
        limit = int(given.get("limit", DEFAULT_LIMIT))
        before = None if cursor is None else int(cursor)
    except ValueError:
        return error(400, "limit and before must be whole numbers", dict(given))
    if not 1 <= limit <= MAX_LIMIT:
        return error(400, f"limit must be between 1 and {MAX_LIMIT}", limit)
    if cursor is not None and not (cursor.isascii() and cursor.isdigit()):
        return error(400, "before must be a page's next: digits only", cursor)
    if before is not None:
        before = min(before, MAX_ID)  # past every id: the newest page, not a driver's overflow
    filters = {key: given.get(key) or None for key in ("actor", "action", "task")}
    if any(value is not None and NUL in value for value in filters.values()):
        return web.json_response({"items": [], "next": None})  # nothing holds a NUL
    page = await context(request).audit.page(AuditQuery(**filters, limit=limit, before=before))
    return web.json_response({"items": [entry_json(e) for e in page.items], "next": page.next})


def entry_json(entry: AuditEntry) -> dict[str, Any]:
    """An entry as the API answers it."""
    return {
        "id": entry.id,
        "at": iso(entry.at),
        "actor": entry.actor,
        "action": entry.action,
        "target": entry.target,
        "task": entry.task,
        "status": entry.status,
        "remote": entry.remote,
        "count": _count(entry.detail),
        "detail": entry.detail,
    }


def _count(detail: Any) -> int:
    """How many requests an entry stands for: a refusal's ``count``, else 1."""
    count = detail.get("count") if isinstance(detail, dict) else None
    return count if isinstance(count, int) and count > 0 else 1


@routes.get("/api/v1/caller")
async def who(request: web.Request) -> web.Response:
    """The caller the request's token names, and its role (the dashboard shows what that
    role may do, and only that)."""
    caller = request[CALLER]
    configured = bool(context(request).settings.callers)
    return web.json_response(
        {"name": caller.name, "role": str(caller.role), "token_required": configured}
    )


@routes.get("/api/v1/about")
async def about(request: web.Request) -> web.Response:
    """ecron's version, the node answering, and the daemon's ``timezone``: where the CLI and
    the dashboard show times that belong to no task."""
    ctx = context(request)
    return web.json_response(
        {"version": ecron.__version__, "node": ctx.node_id, "timezone": ctx.settings.timezone}
    )


_TEXT = {"type": "string"}
OPERATIONS = (
    Operation(
        "GET",
        "/api/v1/audit",
        "audit",
        "The audit log",
        "Who did what, newest first, one page at a time (admins only): every request that "
        "changed something or was refused, and every change of the task set at load or "
        "reload (actor `config`). Pass the answer's `next` back as `before` for the "
        "following page. Entries are kept for `history_retention`.",
        {
            200: (schemas.AuditPage, "the page (possibly empty)"),
            400: (
                ERROR,
                "`limit` is not a whole number from 1 to 500, or `before` not digits",
            ),
        },
        parameters=(
            query("actor", "only this actor's entries; empty: no filter", _TEXT),
            query("action", "only this action (`run`, `pause`, `change`, ...)", _TEXT),
            query("task", "only entries about this task", _TEXT),
            query(
                "limit",
                "how many on this page",
                {"type": "integer", "minimum": 1, "maximum": 500, "default": 50},
            ),
            query("before", "a cursor: a page's `next`", {"type": "string", "pattern": "^[0-9]*$"}),
        ),
    ),
    Operation(
        "GET",
        "/api/v1/caller",
        "audit",
        "Who am I",
        "The caller the request's token names and its role (`anonymous`, an admin, when the "
        "daemon asks for no token).",
        {200: (schemas.CallerAnswer, "the caller")},
    ),
    Operation(
        "GET",
        "/api/v1/about",
        "audit",
        "About this daemon",
        "ecron's version, the node that answered, and the daemon's `timezone`: the zone in "
        "which the CLI and the dashboard show times that belong to no task (the audit log, "
        "pools); a task's own times are shown in its `timezone`. Times in the API itself are "
        "RFC 3339 UTC all the same.",
        {200: (schemas.AboutAnswer, "the daemon")},
    ),
)
