"""``/api/v1/tasks``: definitions, where they stand, running them now, and backfilling
past periods."""

from __future__ import annotations

import asyncio
import re
from datetime import datetime
from typing import Any

from aiohttp import web

from ecron.api.access import AUDIT_DETAIL
from ecron.api.context import NUL, context, error, ignore_body
from ecron.api.executions import snapshot, snapshots
from ecron.backfill import BadBackfill, read_moment, read_request
from ecron.clock import iso
from ecron.daylight import Resolved
from ecron.errors import NotFound
from ecron.planning import upcoming_fire_times
from ecron.snapshots import execution_snapshot, task_snapshot
from ecron.store.records import TaskState

routes = web.RouteTableDef()


@routes.get("/api/v1/tasks")
async def list_tasks(request: web.Request) -> web.Response:
    """Every task that is not retired, by name."""
    tasks = await context(request).store.list_tasks()
    return web.json_response({"items": await _snapshots(request, tasks)})


async def _snapshots(request: web.Request, tasks: list[TaskState]) -> list[dict[str, Any]]:
    """Task snapshots, their last executions' snapshots read in one go for the lot."""
    store = context(request).store
    names = [task.name for task in tasks]
    last = await store.last_executions(names)
    claimed = await store.claimed_fire_times(names)
    shown = dict(zip(last, await snapshots(request, list(last.values())), strict=True))
    return [task_snapshot(task, shown.get(task.name), claimed.get(task.name)) for task in tasks]


async def _snapshot(request: web.Request, task: TaskState) -> dict[str, Any]:
    return (await _snapshots(request, [task]))[0]


async def _task(request: web.Request) -> TaskState:
    name = request.match_info["name"]
    task = None if NUL in name else await context(request).store.get_task(name)
    if task is None or task.retired:
        raise NotFound(f"no task {name!r}")
    return task


@routes.get("/api/v1/tasks/{name}")
async def get_task(request: web.Request) -> web.Response:
    """One task and its last execution."""
    task = await _task(request)
    return web.json_response(await _snapshot(request, task))


#: ``/upcoming``: how many fire times when ``count`` is not given, and at most.
UPCOMING_COUNT, MAX_UPCOMING = 10, 100


@routes.get("/api/v1/tasks/{name}/upcoming")
async def upcoming(request: web.Request) -> web.Response:
    """The next ``count`` fire times that will run (calendars and blackouts applied), from
    now or from ``from`` (any period), and what daylight saving time did to them (``dst``)."""
    task = await _task(request)
    given = request.query.get("count", str(UPCOMING_COUNT))
    try:
        count = int(given)
    except ValueError:
        return error(400, "count must be a whole number", given)
    if not 1 <= count <= MAX_UPCOMING:
        return error(400, f"count must be between 1 and {MAX_UPCOMING}", count)
    ctx = context(request)
    now = ctx.clock.now()
    claimed = None
    if "from" in request.query:
        try:
            given = _plus(request.query["from"])
            start = read_moment(task.name, given, "from", task.spec.timezone)
        except BadBackfill as exc:
            return error(400, str(exc), exc.detail)
    else:
        start = None
        claimed = (await ctx.store.claimed_fire_times([task.name])).get(task.name)
    # A rare schedule (29 February on a Monday) walks centuries of fire times and daylight
    # saving changes: off the event loop, one preview at a time, so the node goes on.
    async with ctx.previews:
        found, changed = await asyncio.to_thread(_preview, task, start, claimed, now, count)
    dst = [{"at": iso(c.at), "wall": c.wall.isoformat(), "change": str(c.change)} for c in changed]
    return web.json_response(
        {
            "task": task.name,
            "paused": task.paused,
            "from": iso(now if start is None else start),
            "items": [iso(when) for when in found],
            "dst": dst,
        }
    )


def _preview(
    task: TaskState,
    start: datetime | None,
    claimed: datetime | None,
    now: datetime,
    count: int,
) -> tuple[list[datetime], list[Resolved]]:
    """The next ``count`` fire times of ``task`` from ``start`` (None: from now, as the
    scheduler will run them), and what daylight saving time did to them."""
    fire_times = task.spec.fire_times
    if start is not None:
        found = (
            fire_times.upcoming(fire_times.next(None, start), count) if task.spec.enabled else []
        )
    else:
        start = now
        found = upcoming_fire_times(task.spec, task.next_fire_at, task.paused, claimed, now, count)
    return found, fire_times.dst_changes(min([start, *found[:1]]), found)


def _plus(text: str) -> str:
    """A time from a query string whose ``+`` (of ``+02:00``) was not percent-encoded,
    and so was read as a space, with its ``+`` back."""
    return re.sub(r" (\d\d:?\d\d)$", r"+\1", text)


@routes.post("/api/v1/tasks/{name}/run")
async def run_task(request: web.Request) -> web.Response:
    """Start the task now: 202 and the new execution, once its row is durable; under
    ``concurrency: forbid`` with one active, 200 and that one (nothing new starts). The
    trigger leaves in the background.

    A task in this node's config is not read from the database (the config is what the
    task table follows: it is not retired), and the new execution's snapshot is made from
    what the start wrote: a run just started has no resume, no chained runs and no ETA
    yet. Concurrent requests share one start transaction (``ecron.starts``)."""
    await ignore_body(request)
    commands = context(request).commands
    name = request.match_info["name"]
    if not commands.knows(name):
        task = await _task(request)  # a retired or unknown task: 404, said precisely
        raise NotFound(f"task {task.name!r} is not in this node's config")
    execution, created = await commands.run_now(name)
    if created:
        return web.json_response(execution_snapshot(execution), status=202)
    return web.json_response(await snapshot(request, execution), status=200)


@routes.post("/api/v1/tasks/{name}/backfill")
async def backfill_task(request: web.Request) -> web.Response:
    """Run the task's past fire times in ``[from, to)`` (``ecron.backfill``): 202 and what
    was created; with ``"dry_run": true``, 200 and the same answer with nothing created.
    404 for a task not in this node's config, 400 naming the field for a request that
    cannot be carried out, 409 for a paused task (not on a dry run)."""
    commands = context(request).commands
    name = request.match_info["name"]
    if not commands.knows(name):
        task = await _task(request)  # a retired or unknown task: 404, said precisely
        raise NotFound(f"task {task.name!r} is not in this node's config")
    try:
        body = await request.json() if request.can_read_body else None
    except (ValueError, RecursionError):  # deep nesting is not a usable body either
        body = None
    try:
        start, end, dry_run = read_request(name, body, commands.specs[name].timezone)
        done = await commands.backfill(name, start, end, dry_run=dry_run)
    except BadBackfill as exc:
        return error(400, str(exc), exc.detail)
    answer = web.json_response(done.answer(), status=200 if dry_run else 202)
    answer[AUDIT_DETAIL] = {"from": iso(start), "to": iso(end), "dry_run": dry_run}
    return answer


@routes.post("/api/v1/tasks/{name}/pause")
async def pause_task(request: web.Request) -> web.Response:
    """Pause the task: no more fire times until it is unpaused (manual runs still work).
    An optional JSON object ``{"reason": "..."}`` is shown in the task snapshot; any other
    body answers 400."""
    task = await _task(request)
    reason = "paused through the API"
    if request.can_read_body:
        try:
            body = await request.json()
        except (ValueError, RecursionError):  # deep nesting is not a usable body either
            return error(400, 'the body must be JSON, like {"reason": "..."}')
        if not isinstance(body, dict):
            return error(400, 'the body must be a JSON object, like {"reason": "..."}')
        given = body.get("reason")
        if given is not None and not isinstance(given, str):
            return error(400, "reason must be text", given)
        if given:
            reason = given[:1000].replace(NUL, "\N{REPLACEMENT CHARACTER}")
    state = await context(request).commands.pause(task.name, reason)
    return web.json_response(await _snapshot(request, state))


@routes.post("/api/v1/tasks/{name}/unpause")
async def unpause_task(request: web.Request) -> web.Response:
    """Unpause the task: its schedule restarts from now (missed fire times are not replayed)
    and its count of failures in a row starts again from zero."""
    await ignore_body(request)
    task = await _task(request)
    state = await context(request).commands.unpause(task.name)
    return web.json_response(await _snapshot(request, state))
