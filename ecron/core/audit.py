"""An entry of the audit log (DESIGN.md, "Audit"): who did what, to what, and how it was
answered."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

#: The actor of a request when the daemon asks for no token.
ANONYMOUS = "anonymous"
#: The actor of a request with a missing or unknown token.
UNKNOWN = "unknown"
#: The actor of a change of the task set at load or reload.
CONFIG = "config"


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One line of the audit log; ``id`` is None until it is stored."""

    at: datetime
    actor: str
    action: str
    target: str
    task: str | None = None
    #: The HTTP status answered; None for a config change.
    status: int | None = None
    remote: str | None = None
    #: More: a config change's fields (``{"fields": [{"field", "old", "new"}]}``).
    detail: Any = None
    id: int | None = None


@dataclass(frozen=True, slots=True)
class AuditQuery:
    """Which audit entries to read: each filter exact, ``before`` an entry's id (a page's
    ``next``)."""

    actor: str | None = None
    action: str | None = None
    task: str | None = None
    limit: int = 50
    before: int | None = None


@dataclass(frozen=True, slots=True)
class AuditPage:
    """Entries newest first; ``next`` is the cursor for the following page."""

    items: list[AuditEntry]
    next: str | None
