"""``/api/v1/executions``: history and snapshots."""

from __future__ import annotations

from aiohttp import web

from ecron.api.app import context, error
from ecron.api.snapshots import execution_snapshot, step_snapshot
from ecron.core import Execution, Status
from ecron.errors import NotFound

routes = web.RouteTableDef()

#: Page size when none is asked for, and the most one page may hold.
DEFAULT_LIMIT, MAX_LIMIT = 50, 500


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
    if "status" in query:
        try:
            status = Status(query["status"].upper())
        except ValueError:
            return error(400, "unknown status", [str(s) for s in Status])
    page = await context(request).store.list_executions(
        task=query.get("task"), status=status, limit=limit, before=query.get("before")
    )
    items = [execution_snapshot(execution) for execution in page.items]
    return web.json_response({"items": items, "next": page.next})


async def _execution(request: web.Request) -> Execution:
    eid = request.match_info["eid"]
    execution = await context(request).store.get_execution(eid)
    if execution is None:
        raise NotFound(f"no execution {eid!r}")
    return execution


@routes.get("/api/v1/executions/{eid}")
async def get_execution(request: web.Request) -> web.Response:
    """One execution's snapshot."""
    return web.json_response(execution_snapshot(await _execution(request)))


@routes.get("/api/v1/executions/{eid}/steps")
async def get_steps(request: web.Request) -> web.Response:
    """The steps of one execution (empty for a one-call task)."""
    execution = await _execution(request)
    return web.json_response({"items": [step_snapshot(step) for step in execution.steps]})
