"""``/api/v1/executions``: history and snapshots."""

from __future__ import annotations

import re
from typing import Any

from aiohttp import web

from ecron.api.context import NUL, context, error, ignore_body
from ecron.clock import iso
from ecron.core import Channel, Execution, Status
from ecron.errors import Ambiguous, NotFound
from ecron.ids import shown_id, too_long
from ecron.pushed import Pushed, take_report
from ecron.snapshots import execution_snapshots, step_snapshot, step_view
from ecron.store.base import Store

routes = web.RouteTableDef()

#: Page size when none is asked for, and the most one page may hold.
DEFAULT_LIMIT, MAX_LIMIT = 50, 500
#: An execution id's characters (UUID text): what a prefix of one may be made of.
ID_TEXT = re.compile(r"[0-9a-f-]{1,36}")
#: How many of the executions an ambiguous prefix names its answer lists.
CANDIDATES = 10


@routes.get("/api/v1/executions")
async def list_executions(request: web.Request) -> web.Response:
    """History, newest first: ``?task=&status=&limit=&before=``.

    Pass the answer's ``next`` back as ``before`` for the following page.
    """
    query = request.query
    try:
        limit = int(query.get("limit", DEFAULT_LIMIT))
    except ValueError:
        return error(400, "limit must be a whole number", query.get("limit"))
    if not 1 <= limit <= MAX_LIMIT:
        return error(400, f"limit must be between 1 and {MAX_LIMIT}", limit)
    status = None
    if query.get("status"):  # an empty value means no filter
        try:
            status = Status(query["status"].upper())
        except ValueError:
            return error(400, "unknown status", [str(s) for s in Status])
    task, before = query.get("task") or None, query.get("before") or None
    if before is not None and NUL in before:
        return error(400, "before cannot hold a NUL character: pass the next of a page")
    if task is not None and NUL in task:
        return web.json_response({"items": [], "next": None})  # no task has such a name
    page = await context(request).store.list_executions(
        task=task, status=status, limit=limit, before=before
    )
    items = await snapshots(request, page.items)
    return web.json_response({"items": items, "next": page.next})


async def snapshots(request: web.Request, executions: list[Execution]) -> list[dict[str, Any]]:
    """Snapshots of ``executions``, each naming its resume when it has one, with its ETA
    (the store read once for the lot, see ``execution_snapshots``)."""
    ctx = context(request)
    return await execution_snapshots(
        ctx.store, executions, ctx.clock.now(), ctx.commands.specs, held=ctx.held
    )


async def snapshot(
    request: web.Request, execution: Execution, held_before: Execution | None = None
) -> dict[str, Any]:
    """The snapshot of one execution, naming its resume when it has one. ``held_before``:
    the execution as this node held it before its row was read. The read may return a row
    older than what the node held then (a progress not written yet) and the node may have
    let go of it since (it ended meanwhile): the snapshot then shows what the node held,
    never an older state than an earlier answer showed."""
    ctx = context(request)
    mine = ctx.held.get(execution.eid) or held_before
    held = {} if mine is None else {execution.eid: mine}
    (shown,) = await execution_snapshots(
        ctx.store, [execution], ctx.clock.now(), ctx.commands.specs, held=held
    )
    return shown


async def _execution(request: web.Request) -> Execution:
    return await find_execution(context(request).store, request.match_info["eid"])


async def find_execution(store: Store, name: str) -> Execution:
    """The execution ``name`` names: its eid, or a unique prefix of it (in any case, like
    git's object names). Raises ``NotFound`` when it names none, ``Ambiguous`` (409, with
    up to ``CANDIDATES`` of them) when it is the start of several eids."""
    if too_long(name):  # names nothing: refused before any read of the database
        raise NotFound(f"no execution {shown_id(name)!r}")
    execution = None if NUL in name else await store.get_execution(name)
    if execution is not None:
        return execution
    prefix = name.lower()
    found = []
    if ID_TEXT.fullmatch(prefix):
        found = await store.executions_by_prefix(prefix, CANDIDATES + 1)
    if len(found) == 1:
        return found[0]
    if not found:
        raise NotFound(f"no execution {name!r}")
    many = f"more than {CANDIDATES}" if len(found) > CANDIDATES else str(len(found))
    raise Ambiguous(
        f"{name!r} is the start of {many} execution ids; give more of the id",
        [
            {"id": e.eid, "task": e.task, "status": str(e.status), "created_at": iso(e.created_at)}
            for e in found[:CANDIDATES]
        ],
    )


@routes.get("/api/v1/executions/{eid}")
async def get_execution(request: web.Request) -> web.Response:
    """One execution's snapshot."""
    held_before = context(request).held.get(request.match_info["eid"])
    return web.json_response(await snapshot(request, await _execution(request), held_before))


@routes.get("/api/v1/executions/{eid}/steps")
async def get_steps(request: web.Request) -> web.Response:
    """The steps of one execution (empty for a one-call task)."""
    execution = await _execution(request)
    return web.json_response({"items": [step_snapshot(step) for step in execution.steps]})


@routes.post("/api/v1/executions/{eid}/cancel")
async def cancel_execution(request: web.Request) -> web.Response:
    """A person's cancel: the cancel call is sent once, then the execution ends CANCELLED.
    Answers 200 with the final snapshot, 404 for an unknown id, 409 for a final one."""
    await ignore_body(request)
    execution = await _execution(request)
    if execution.is_final:
        return error(
            409,
            f"execution {execution.eid} is already {execution.status}",
            await snapshot(request, execution),
        )
    stopped = await context(request).commands.cancel(
        execution.eid, "cancelled by a person through the API"
    )
    return web.json_response(await snapshot(request, stopped))


@routes.post("/api/v1/executions/{eid}/report")
async def report(request: web.Request) -> web.Response:
    """A callback (see ``_report``), counted by the status it is answered with."""
    answer = "500"
    try:
        response = await _report(request)
        answer = str(response.status)
        return response
    except web.HTTPException as exc:  # e.g. 413: the body is over the size limit
        answer = str(exc.status)
        raise
    finally:
        context(request).metrics.callbacks.labels(answer=answer).inc()


async def _report(request: web.Request) -> web.Response:
    """A callback (PROTOCOL.md): checked and applied by ``ecron.pushed.take_report`` (as a
    queue message is), answered, in the checks' order, 404 (no such execution), 401 (token
    missing or not this id's), 400 (not a report), 409 (already final; nothing changed), 200
    (applied). Each answer carries the execution's snapshot where it has one; a step's, the
    step's own view of it (``step_view``: none of its siblings)."""
    ctx = context(request)
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    taken = await take_report(
        store=ctx.store,
        commands=ctx.commands,
        secret=ctx.callback_secret,
        remote=request.match_info["eid"],
        token=token.strip() if scheme.lower() == "bearer" else None,
        body=request.read,
        channel=Channel.CALLBACK,
    )
    if taken.outcome is Pushed.UNAUTHORIZED:
        return error(401, taken.why, "send Authorization: Bearer <X-Ecron-Callback-Token>")
    if taken.outcome is Pushed.MALFORMED:
        return error(400, taken.why, taken.detail)
    if taken.execution is None:
        return error(404, taken.why)
    shown = step_view(await snapshot(request, taken.execution), request.match_info["eid"])
    if taken.outcome is Pushed.TOO_LATE:
        return error(409, taken.why, shown)
    return web.json_response(shown)


@routes.post("/api/v1/executions/{eid}/resume")
async def resume_execution(request: web.Request) -> web.Response:
    """Resume from the first step that did not succeed: 202 and the new execution; 409 when
    it cannot be resumed (not final, succeeded, already resumed, or the task is running);
    404 when unknown."""
    await ignore_body(request)
    execution = await _execution(request)
    created = await context(request).commands.resume(execution.eid, why="api")
    return web.json_response(await snapshot(request, created), status=202)
