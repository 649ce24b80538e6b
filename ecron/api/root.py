"""What the OpenAPI document says of the endpoints at the root (health, metrics, the
dashboard) and of the document itself: none of them asks for a token."""

from __future__ import annotations

from ecron.api import schemas
from ecron.api.access import DOCUMENT
from ecron.api.operation import JSON, NO_TOKEN, Operation, path_parameter

ERROR = schemas.ErrorAnswer
TEXT = ("text/plain", {"type": "string"})

OPERATIONS: tuple[Operation, ...] = (
    Operation(
        "GET",
        DOCUMENT,
        "meta",
        "This document",
        "The OpenAPI 3.1 document of every endpoint, checked against the handlers.",
        {200: ((JSON, {"type": "object"}), "the document")},
        security=NO_TOKEN,
    ),
    Operation(
        "GET",
        "/healthz",
        "root",
        "Liveness",
        "The process serves HTTP; no database asked.",
        {200: (schemas.Alive, "alive")},
        security=NO_TOKEN,
    ),
    Operation(
        "GET",
        "/readyz",
        "root",
        "Readiness",
        "The database answers a trivial query and the scheduler loop went round within "
        "max(10 × tick, tick + lease_ttl).",
        {200: (schemas.Ready, "ready"), 503: (schemas.Unready, "not ready, and why")},
        security=NO_TOKEN,
    ),
    Operation(
        "GET",
        "/metrics",
        "root",
        "Prometheus metrics",
        "In the text exposition format (docs/observability.md lists them).",
        {200: (TEXT, "the metrics")},
        security=NO_TOKEN,
    ),
    Operation(
        "GET",
        "/",
        "root",
        "The dashboard",
        "One HTML page that reads and steers ecron through this API; it holds no data.",
        {200: (("text/html", {"type": "string"}), "the page")},
        security=NO_TOKEN,
    ),
    Operation(
        "GET",
        "/static/{name}",
        "root",
        "A file of the dashboard",
        "One of the dashboard's scripts (text/javascript) or its style sheet (text/css).",
        {
            200: (("text/javascript", {"type": "string"}), "the file (or text/css)"),
            404: (ERROR, "no dashboard file of that name"),
        },
        parameters=(path_parameter("name", "the file's name", minLength=1),),
        security=NO_TOKEN,
    ),
)
