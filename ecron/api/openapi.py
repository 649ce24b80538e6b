"""``GET /api/v1/openapi.json``: an OpenAPI 3.1 document of every endpoint the daemon serves.

The operations are data (``OPERATIONS``), the schemas come from the pydantic models of
``schemas.py``, and ``mismatches`` compares the operations with the routes an application
really serves; the tests hold both ways to it, so the document cannot drift from the
handlers. It holds no data of the daemon and is served without the API token.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from aiohttp import web
from pydantic.json_schema import models_json_schema

import ecron
from ecron.api import audit, root, schemas, short_ids
from ecron.api.access import DOCUMENT, needed_role
from ecron.api.context import context
from ecron.api.operation import (
    API_TOKEN,
    CALLBACK_TOKEN,
    JSON,
    NO_TOKEN,
    Answer,
    Operation,
)
from ecron.api.operation import path_parameter as _path_parameter
from ecron.api.operation import query as _query
from ecron.config.model import TASK_NAME
from ecron.core import Status

routes = web.RouteTableDef()

#: The path it is served at.
PATH = DOCUMENT
_REF = "#/components/schemas/{model}"

NAME = _path_parameter(
    "name", "the task's name", pattern=f"^{TASK_NAME.pattern}$", minLength=1, maxLength=200
)
EID = _path_parameter(
    "eid", "the execution id (a UUIDv7 text), or a unique start of it (any case)", minLength=1
)
REMOTE_ID = _path_parameter(
    "eid",
    "the remote id: the execution id, or <execution id>.<step number> for a step",
    minLength=1,
)

ERROR = schemas.ErrorAnswer
TOO_LARGE: Answer = (ERROR, "the body is over 1 MiB (1,048,576 bytes)")
TASK_GONE: Answer = (ERROR, "no task of that name, a retired one, or one not in this node's config")
NO_EXECUTION: Answer = (ERROR, "no execution with that id, nor one that it is the start of")
KEPT_CHANGING: Answer = (
    ERROR,
    "the task's row was written by something else before each of five tries; try again",
)
AMBIGUOUS: Answer = (
    schemas.AmbiguousId,
    "the id given is the start of several execution ids (`detail` lists up to 10); give more of it",
)

_API: tuple[Operation, ...] = (
    Operation(
        "GET",
        "/api/v1/pools",
        "pools",
        "Every pool",
        "Every pool the config defines, by name: its limits, its tasks, how many of their "
        "executions are PENDING or RUNNING and how many runs wait, on every node, and until "
        "when a service's Retry-After holds its triggers back.",
        {200: (schemas.PoolList, "the pools")},
    ),
    Operation(
        "GET",
        "/api/v1/tasks",
        "tasks",
        "Every task",
        "Every task that is not retired, sorted by name, with its next fire time and last "
        "execution. Not paginated.",
        {200: (schemas.TaskList, "the tasks")},
    ),
    Operation(
        "GET",
        "/api/v1/tasks/{name}",
        "tasks",
        "One task",
        "One task snapshot.",
        {
            200: (schemas.TaskSnapshot, "the task"),
            404: (ERROR, "no task of that name, or a retired one"),
        },
        parameters=(NAME,),
    ),
    Operation(
        "GET",
        "/api/v1/tasks/{name}/upcoming",
        "tasks",
        "The next fire times that will run",
        "The task's next fire times, its calendar and blackouts applied (those they plan out "
        "are left out): from the earliest one claimed ahead or its stored next one; for a "
        "paused task, the ones it would have if unpaused now. With `from`, the first ones at "
        "or after that moment, to preview any period. `dst` lists the ones daylight saving "
        "time changed by the task's `dst` policy, and the wall times it skipped.",
        {
            200: (schemas.Upcoming, "the fire times, oldest first"),
            400: (
                ERROR,
                "`count` is not a whole number from 1 to 100, or `from` is not an RFC 3339 "
                "time with an offset",
            ),
            404: (ERROR, "no task of that name, or a retired one"),
        },
        parameters=(
            NAME,
            _query(
                "count",
                "how many",
                {"type": "integer", "minimum": 1, "maximum": 100, "default": 10},
            ),
            _query(
                "from",
                "list the fire times at or after this moment (RFC 3339 with its offset, like "
                "2027-03-27T00:00:00Z; a `+` percent-encoded or not); default: from the "
                "task's next one",
                {"type": "string", "format": "date-time"},
            ),
        ),
    ),
    Operation(
        "POST",
        "/api/v1/tasks/{name}/run",
        "tasks",
        "Run a task now",
        "A manual run, under the task's `concurrency`, even when paused or disabled. The "
        "answer comes at once; the trigger call leaves in the background. A body is "
        "ignored (one over 1 MiB answers 413).",
        {
            202: (schemas.ExecutionSnapshot, "a new execution was created: its snapshot"),
            200: (
                schemas.ExecutionSnapshot,
                "`concurrency: forbid` and one is active: nothing "
                "new starts, and this is the active one",
            ),
            404: TASK_GONE,
            409: (ERROR, "no free moment for a new run (many asked for in one millisecond)"),
            413: TOO_LARGE,
        },
        parameters=(NAME,),
    ),
    Operation(
        "POST",
        "/api/v1/tasks/{name}/backfill",
        "tasks",
        "Run the past fire times of a period",
        "The task's fire times in `[from, to)` that its schedule (cron in its time zone, "
        "`every`, `at`), calendar and blackouts give, oldest first. Each one without an "
        "execution becomes one (`trigger_kind: backfill`, `scheduled_at` that fire time), "
        "started under the task's `concurrency` (under `forbid` one after another, none "
        "SKIPPED), its pool and its retries; one that has an execution already (run, skipped "
        "or backfilled before) counts in `already_run` and never runs again. With "
        '`"dry_run": true` nothing is created. At most 10,000 fire times per request.',
        {
            202: (schemas.BackfillAnswer, "the executions were created; they start in order"),
            200: (schemas.BackfillAnswer, "a dry run: the fire times; nothing was created"),
            400: (
                ERROR,
                "the body is not a JSON object with `from` and `to` (RFC 3339 with an offset) "
                "and an optional boolean `dry_run`; the task is manual, `after` or chained; "
                "`from` is not before `to`; `to` is in the future; or the period holds more "
                "than 10,000 fire times. `detail` is `{field, value}`",
            ),
            404: TASK_GONE,
            409: (ERROR, "the task is paused (unpause it first; a dry run still answers)"),
            413: TOO_LARGE,
        },
        parameters=(NAME,),
        body=(schemas.BackfillRequest, True),
    ),
    Operation(
        "POST",
        "/api/v1/tasks/{name}/pause",
        "tasks",
        "Pause a task",
        "No fire time of it starts until it is unpaused; manual runs and resumes still work. "
        "The body is optional: a JSON object, whose `reason` is shown as `paused_reason`.",
        {
            200: (schemas.TaskSnapshot, 'the task, now `"paused": true`'),
            400: (ERROR, "the body is not a JSON object, or its `reason` is not a text or null"),
            404: TASK_GONE,
            409: KEPT_CHANGING,
            413: TOO_LARGE,
        },
        parameters=(NAME,),
        body=(schemas.PauseRequest, False),
    ),
    Operation(
        "POST",
        "/api/v1/tasks/{name}/unpause",
        "tasks",
        "Unpause a task",
        "Its schedule restarts from now (missed fire times are not replayed) and its count "
        "of failures in a row goes back to 0. A body is ignored (one over 1 MiB answers 413).",
        {
            200: (schemas.TaskSnapshot, 'the task, now `"paused": false`'),
            404: TASK_GONE,
            409: KEPT_CHANGING,
            413: TOO_LARGE,
        },
        parameters=(NAME,),
    ),
    Operation(
        "GET",
        "/api/v1/executions",
        "executions",
        "The history",
        "Executions, newest first (by id, that is by creation), one page at a time. Pass the "
        "answer's `next` back as `before` for the following page.",
        {
            200: (schemas.ExecutionPage, "the page (possibly empty)"),
            400: (
                ERROR,
                "`limit` is not a whole number from 1 to 500, `status` is not a status, or "
                "`before` holds a NUL character",
            ),
        },
        parameters=(
            _query("task", "only this task's executions; empty: no filter", {"type": "string"}),
            _query(
                "status",
                "only executions with this status, matched without regard to case; empty: no "
                "filter. SCHEDULED ones (fire times claimed ahead) are listed only when asked",
                {"type": "string", "enum": ["", *(str(status) for status in Status)]},
            ),
            _query(
                "limit",
                "how many on this page",
                {"type": "integer", "minimum": 1, "maximum": 500, "default": 50},
            ),
            _query(
                "before",
                "a cursor: only executions whose id sorts before it (no NUL character)",
                {"type": "string", "pattern": "^[^\\u0000]*$"},
            ),
        ),
    ),
    Operation(
        "GET",
        "/api/v1/executions/{eid}",
        "executions",
        "One execution",
        "One execution's snapshot.",
        {200: (schemas.ExecutionSnapshot, "the execution"), 404: NO_EXECUTION, 409: AMBIGUOUS},
        parameters=(EID,),
    ),
    Operation(
        "GET",
        "/api/v1/executions/{eid}/steps",
        "executions",
        "The steps of one execution",
        "Its steps, in order; empty for a one-call task.",
        {200: (schemas.StepList, "the steps"), 404: NO_EXECUTION, 409: AMBIGUOUS},
        parameters=(EID,),
    ),
    Operation(
        "POST",
        "/api/v1/executions/{eid}/cancel",
        "executions",
        "Cancel an execution",
        "Sends the cancel call once; the execution ends CANCELLED whatever the answer. The "
        "answer waits for the cancel call. A body is ignored (one over 1 MiB answers 413).",
        {
            200: (schemas.ExecutionSnapshot, "the final snapshot"),
            404: NO_EXECUTION,
            409: (
                schemas.CancelConflict,
                "it has already ended (`detail` is its snapshot), the id given is the start "
                "of several execution ids (`detail` lists them), or it ended, or another stop "
                "of it was under way, while this cancel was asked (`detail` is null)",
            ),
            413: TOO_LARGE,
        },
        parameters=(EID,),
    ),
    Operation(
        "POST",
        "/api/v1/executions/{eid}/resume",
        "executions",
        "Resume an execution",
        "A new execution that starts from the first step that did not succeed (`resume_of` "
        "the old one). The trigger leaves in the background. A body is ignored (one over "
        "1 MiB answers 413).",
        {
            202: (schemas.ExecutionSnapshot, "the new execution"),
            404: (ERROR, "no execution with that id, or its task is not in this node's config"),
            409: (
                ERROR,
                "it cannot be resumed: not ended, SUCCESS or SKIPPED, already "
                "resumed, its task is running under `concurrency: forbid`, or nothing is "
                "left to do; or the id given is the start of several execution ids "
                "(`detail` lists them)",
            ),
            413: TOO_LARGE,
        },
        parameters=(EID,),
    ),
    Operation(
        "POST",
        "/api/v1/executions/{eid}/report",
        "callbacks",
        "A user service's report",
        "The callback of PROTOCOL.md. It needs no API token: it needs the callback token "
        "(the `X-Ecron-Callback-Token` of ecron's calls), which opens this one remote id. "
        "Checked in this order: 404 (an id over 100 characters is unknown without a lookup), "
        "401, 400, 409, 200.",
        {
            200: (schemas.ExecutionSnapshot, "the report was applied: the execution now"),
            400: (ERROR, "the body is not a valid report, or says UNKNOWN"),
            401: (ERROR, "the callback token is missing or not this id's"),
            404: (ERROR, "no execution, or no step with that remote id"),
            409: (schemas.ExecutionConflict, "it has ended, or the report changed nothing"),
            413: TOO_LARGE,
        },
        parameters=(REMOTE_ID,),
        body=(schemas.ReportRequest, True),
        security=CALLBACK_TOKEN,
    ),
)


OPERATIONS: tuple[Operation, ...] = (
    *_API,
    *short_ids.OPERATIONS,
    *root.OPERATIONS,
    *audit.OPERATIONS,
)

_INTRO = """\
ecron's REST API (under /api/v1) and its endpoints at the root. docs/api.md is the guide,
with a real request and answer for each endpoint.

When the daemon has API tokens (`api_token`, `api_tokens`), every request must carry
`Authorization: Bearer <token>`, except the callback (it takes a callback token instead),
this document, the dashboard page, /healthz, /readyz and /metrics; a missing or unknown
token answers 401 (past `bad_tokens_per_minute` of them, 30 unless set, within a minute
from one address, 429 with `Retry-After` to that address until its minute ends), a role
that does not allow the call 403 (`viewer`: every GET;
`operator`: also run, backfill, cancel, resume, pause, unpause; `admin`: also the audit
log; each operation's `x-required-role`). Without a token, a request that changes
something must be `application/json` with no other site's `Origin`, and every request's
`Host` must be this daemon's (else 403).

Every answer under /api/v1 is JSON; an error is `{"error": "...", "detail": ...}` with its
status code. Any endpoint may also answer 405 (not with this method) and 500 (an unexpected
error), every GET answers HEAD too, and an unknown path answers 404 (401 first, without the
token). Times are RFC 3339 in UTC with three decimals and a `Z`, or null."""


_HELD_BACK = (
    "this address sent `bad_tokens_per_minute` (30 unless set) missing or wrong API tokens "
    "within a minute; `Retry-After` says in how many seconds it may ask again"
)


def _answer(answer: Answer) -> dict[str, Any]:
    shape, why = answer
    if isinstance(shape, tuple):
        media, schema = shape
    else:
        media, schema = JSON, {"$ref": _REF.format(model=shape.__name__)}
    return {"description": why, "content": {media: {"schema": schema}}}


def _operation(op: Operation, secured: bool) -> dict[str, Any]:
    answers = dict(op.answers)
    needed = needed_role(op.method, op.path)
    if secured and op.security == API_TOKEN:
        answers.setdefault(401, (ERROR, "the API token is missing or unknown"))
        answers.setdefault(403, (ERROR, f"the caller's role is not {needed} or above"))
        answers.setdefault(429, (ERROR, _HELD_BACK))
    elif not secured and op.security != CALLBACK_TOKEN:
        answers.setdefault(403, (ERROR, _FOREIGN if op.method != "GET" else _FOREIGN_HOST))
    answers.setdefault(500, (ERROR, "an unexpected error; the daemon logs `api_error`"))
    described: dict[str, Any] = {
        "tags": [op.tag],
        "summary": op.summary,
        "description": op.description,
        "operationId": _operation_id(op),
        "parameters": list(op.parameters),
        "responses": {str(status): _answer(answers[status]) for status in sorted(answers)},
        "security": op.security if secured or op.security == CALLBACK_TOKEN else NO_TOKEN,
    }
    if needed is not None:
        described["x-required-role"] = str(needed)
    if op.body is not None:
        model, required = op.body
        described["requestBody"] = {
            "required": required,
            "content": {JSON: {"schema": {"$ref": _REF.format(model=model.__name__)}}},
        }
    return described


def _operation_id(op: Operation) -> str:
    words = [part for part in op.path.split("/") if part and part not in ("api", "v1")]
    named = [w.strip("{}") if w.startswith("{") else w for w in words] or ["dashboard"]
    return "_".join([op.method.lower(), *named]).replace(".", "_")


_FOREIGN_HOST = "the `Host` is not this daemon's (no token is configured)"
_FOREIGN = (
    "no token is configured and the request may come from another site: it is not "
    "`application/json`, its `Origin` is another site's, or its `Host` is not this daemon's"
)


@cache
def document(secured: bool = True) -> dict[str, Any]:
    """The whole OpenAPI document; ``secured``: the daemon asks for API tokens (the
    security scheme is declared only then)."""
    _, defs = models_json_schema(
        [(model, "validation") for model in schemas.MODELS], ref_template=_REF
    )
    paths: dict[str, dict[str, Any]] = {}
    for op in OPERATIONS:
        paths.setdefault(op.path, {})[op.method.lower()] = _operation(op, secured)
    return {
        "openapi": "3.1.0",
        "jsonSchemaDialect": "https://spec.openapis.org/oas/3.1/dialect/base",
        "info": {
            "title": "ecron",
            "version": ecron.__version__,
            "description": _INTRO,
            "license": {"name": "MIT", "identifier": "MIT"},
        },
        "paths": paths,
        "components": {
            "schemas": defs["$defs"],
            "securitySchemes": {
                **(
                    {
                        "apiToken": {
                            "type": "http",
                            "scheme": "bearer",
                            "description": "a caller's token (`api_token`, `api_tokens`)",
                        }
                    }
                    if secured
                    else {}
                ),
                "callbackToken": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "the `X-Ecron-Callback-Token` ecron sent with its calls "
                    "about this remote id",
                },
            },
        },
        "security": API_TOKEN if secured else NO_TOKEN,
        "tags": [{"name": name} for name in dict.fromkeys(op.tag for op in OPERATIONS)],
    }


def served(app: web.Application) -> set[tuple[str, str]]:
    """``(method, path)`` of every route ``app`` serves, less the HEAD that each GET adds."""
    found = set()
    for route in app.router.routes():
        info = route.resource.canonical if route.resource is not None else ""
        found.add((route.method, info))
    return {(m, p) for m, p in found if not (m == "HEAD" and ("GET", p) in found)}


def mismatches(app: web.Application) -> tuple[set[tuple[str, str]], set[tuple[str, str]]]:
    """Routes ``app`` serves that the document does not describe, and operations the
    document describes that ``app`` does not serve: both empty when they agree."""
    described = {(op.method, op.path) for op in OPERATIONS}
    routes_served = served(app)
    return routes_served - described, described - routes_served


@routes.get(PATH)
async def openapi_json(request: web.Request) -> web.Response:
    """The document: the same for every daemon of this version that asks for tokens, and
    without the token where none is asked for."""
    return web.json_response(document(bool(context(request).settings.callers)))
