"""What the kit reads and answers on the wire (PROTOCOL.md), with no web framework in it:
each adapter turns its request into a ``Call`` and writes the ``Answer`` back."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

#: The content type of every answer.
JSON_TYPE = "application/json"
#: A remote id (an eid, or ``<eid>.<n>`` for a step): what the kit accepts in
#: ``X-Ecron-Execution-Id``.
REMOTE_ID = re.compile(r"[A-Za-z0-9_.-]{1,64}")
#: A job's name: one segment of the path ``/jobs/{name}``.
JOB_NAME = re.compile(r"[A-Za-z0-9_.~-]{1,200}")
#: The most of a trigger's body the adapters read.
MAX_BODY = 1024 * 1024


class Headers(Protocol):
    """A request's headers, looked up by lower-case name (aiohttp's CIMultiDict, or a dict
    of lower-case names built by an adapter)."""

    def get(self, key: str, /) -> str | None: ...

    def items(self) -> Iterable[tuple[str, str]]: ...


@dataclass(frozen=True, slots=True)
class Call:
    """One request of ecron's, routed: which job, which remote id (None for ``/jobs/{name}``:
    a trigger or a batch poll), and what signing needs (the raw target and the body)."""

    method: str
    job: str
    eid: str | None
    #: The raw path as sent, percent-encoding and all, plus ``?query`` when there is one.
    target: str
    #: The raw query string (no ``?``).
    query: str
    headers: Headers
    body: bytes


@dataclass(frozen=True, slots=True)
class Answer:
    """What to answer: the status, the JSON body, and any header besides its content type."""

    status: int
    body: bytes
    headers: tuple[tuple[str, str], ...] = ()


def route(path: str) -> tuple[str, str | None] | None:
    """``/jobs/{name}`` → (name, None); ``/jobs/{name}/{eid}`` → (name, eid); else None.
    ``path`` is the decoded path below the mount point."""
    parts = path.split("/")
    if len(parts) not in (3, 4) or parts[0] or parts[1] != "jobs" or not parts[2]:
        return None
    if len(parts) == 4:
        return (parts[2], parts[3]) if parts[3] else None
    return parts[2], None


def answer(status: int, body: dict[str, Any], *headers: tuple[str, str]) -> Answer:
    """A JSON answer."""
    return Answer(status, json.dumps(body).encode(), headers)


def error(status: int, text: str, *headers: tuple[str, str]) -> Answer:
    """An error answer, ``{"error": text}``: the text names what was wrong."""
    return answer(status, {"error": text}, *headers)


#: ``404 {"status": "UNKNOWN"}``: this service does not know the remote id.
UNKNOWN = Answer(404, b'{"status": "UNKNOWN"}')


def not_found(path: str) -> Answer:
    """The answer to a path that is not ``/jobs/{name}`` or ``/jobs/{name}/{eid}``."""
    return error(
        404,
        f"no such path: {path!r}; this service answers /jobs/{{name}} and /jobs/{{name}}/{{eid}}",
    )


def parse_time(headers: Headers, name: str) -> datetime | None:
    """An RFC 3339 header (``X-Ecron-Scheduled-At``, ``X-Ecron-Deadline``) as an aware
    datetime; None when absent. ``ValueError`` names the header when it is not a time."""
    text = headers.get(name.lower())
    if not text:
        return None
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"{name} is not an RFC 3339 time: {text[:100]!r}") from None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def parse_attempt(headers: Headers) -> int:
    """``X-Ecron-Attempt`` (1 when absent); ``ValueError`` names it when not a number."""
    text = headers.get("x-ecron-attempt")
    if not text:
        return 1
    if not text.isascii() or not text.isdigit() or len(text) > 9:
        raise ValueError(f"X-Ecron-Attempt is not a whole number: {text[:100]!r}")
    return int(text)


def parse_body(raw: bytes) -> Any:
    """The trigger's body as JSON (``{}`` when empty); ``ValueError`` says why when not."""
    if not raw.strip():
        return {}
    try:
        return json.loads(raw)
    except (ValueError, RecursionError) as exc:  # a JSONDecodeError or UnicodeDecodeError
        raise ValueError(f"the trigger's body is not JSON: {exc}") from None
