"""What every request handler works with: the daemon's parts it may use, and the error
answer. Handlers import this, and the application (``app.py``) imports the handlers."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from aiohttp import web

from ecron.audit import AuditLog
from ecron.clock import Clock
from ecron.commands import Commands
from ecron.config.model import DaemonSettings
from ecron.core import Execution
from ecron.metrics import Metrics
from ecron.store.base import Store


@dataclass(slots=True)
class ApiContext:
    """What the handlers work with: the store to read, the commands to act, and no loop."""

    store: Store
    commands: Commands
    settings: DaemonSettings
    clock: Clock
    node_id: str
    #: Signs callback tokens (the configured ``secret`` or the one stored in the database).
    callback_secret: str
    metrics: Metrics
    #: When the scheduler's loop last went round (readiness), None before its first round.
    last_tick: Callable[[], datetime | None]
    #: How loaded the node is (``Engine.load``): shown in ``/readyz``'s body, never failing it.
    load: Callable[[], Mapping[str, Any]]
    #: Told how long each request took to answer: the node sends fewer polls at once while
    #: its API answers slowly (``executor.pace``).
    answered: Callable[[float], None]
    #: Where requests that change something, and refused ones, are recorded.
    audit: AuditLog
    #: What this node holds, each in its newest state: a change of progress alone reaches
    #: the database within ``PROGRESS_SETTLE``, and a snapshot shows it before it does.
    held: Mapping[str, Execution]
    #: Further readiness checks (the queue's, when required): each says what is wrong, or
    #: None.
    readiness: tuple[Callable[[], str | None], ...] = ()


CONTEXT = web.AppKey("ecron_context", ApiContext)

#: No name or id holds it (PostgreSQL's text cannot): a path or filter with one names nothing,
#: and is answered so without asking the database, which would fail on it.
NUL = "\x00"


def error(status: int, message: str, detail: Any = None) -> web.Response:
    """A JSON error answer: ``{"error": ..., "detail": ...}``."""
    return web.json_response({"error": message, "detail": detail}, status=status)


def context(request: web.Request) -> ApiContext:
    """The daemon parts behind this request."""
    return request.app[CONTEXT]


async def ignore_body(request: web.Request) -> None:
    """For an endpoint that reads no body: a body sent anyway is read (up to the size limit)
    and ignored, so that one over 1 MiB is answered 413 as on every endpoint that reads one,
    not silently taken."""
    if request.can_read_body:
        await request.read()  # over client_max_size: web.HTTPRequestEntityTooLarge
