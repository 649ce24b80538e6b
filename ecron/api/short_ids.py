"""``/api/v1/short-ids``: the shortest prefix of each execution id that names it alone in
the whole history, for tables that show ids cut short (``ecron tasks``, ``ecron
executions``): such a prefix, passed back where a path names an execution, finds it."""

from __future__ import annotations

from aiohttp import web

from ecron.api import schemas
from ecron.api.context import context, error
from ecron.api.executions import ID_TEXT
from ecron.api.operation import Operation, query
from ecron.ids import too_long, unique_prefix

routes = web.RouteTableDef()

#: The most ids one request may ask about (a table's worth).
MAX_IDS = 100


@routes.get("/api/v1/short-ids")
async def short_ids(request: web.Request) -> web.Response:
    """``?id=A&id=B``: each id that is an execution's with its shortest unique prefix (at
    least 8 characters, never ending on a dash), in the order asked; others are left out."""
    asked = request.query.getall("id", [])
    if len(asked) > MAX_IDS:
        return error(400, f"at most {MAX_IDS} ids at once", len(asked))
    eids = [eid for eid in dict.fromkeys(asked) if not too_long(eid) and ID_TEXT.fullmatch(eid)]
    around = await context(request).store.eid_neighbours(eids) if eids else {}
    items = [
        {"id": eid, "prefix": unique_prefix(eid, *around[eid])} for eid in eids if eid in around
    ]
    return web.json_response({"items": items})


_IDS = {"type": "array", "items": {"type": "string"}, "maxItems": MAX_IDS}
OPERATIONS = (
    Operation(
        "GET",
        "/api/v1/short-ids",
        "executions",
        "Shortest unique prefixes of execution ids",
        "For each `id` asked (up to 100) that is an execution's, the shortest prefix of it that "
        "is the start of no other execution id in the database: 8 characters at least, never "
        "ending on a dash. Ids that name no execution are left out. A prefix stays unique "
        "until an execution made later starts the same (as a short git hash).",
        {
            200: (schemas.ShortIdList, "the ids that are executions', each with its prefix"),
            400: (schemas.ErrorAnswer, "more than 100 ids"),
        },
        parameters=(
            {
                **query("id", "an execution id; `id` once per id", _IDS),
                "style": "form",
                "explode": True,
            },
        ),
    ),
)
