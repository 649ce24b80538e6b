"""The audit log (DESIGN.md, "Audit"): who did what through the API, and what each config
load changed.

An entry is logged (``api_audit``) the moment it is made, and written to the database with
the others of the next ``AUDIT_LINGER``, many per statement, so that a run asked through
the API costs no second transaction. A reader of the log (GET /audit) has the node's
pending entries written first, so it never misses its own node's latest. A crash loses at
most the entries of the last ``AUDIT_LINGER``, never their log lines; so does a write the
database refuses after the store's retries (logged ``audit_not_recorded``). No token is
ever part of an entry.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from contextlib import suppress
from datetime import timedelta
from typing import Any

import structlog

from ecron.clock import Clock
from ecron.core.audit import CONFIG, AuditEntry, AuditPage, AuditQuery
from ecron.store.base import Store

log = structlog.get_logger(__name__)

#: Entries are written at most this much later, many at once.
AUDIT_LINGER = timedelta(milliseconds=50)
#: Entries waiting for their write, at most (the oldest go first, each still in the log).
MAX_PENDING = 10_000


class AuditLog:
    """Records audit entries; see the module docstring."""

    def __init__(self, store: Store, clock: Clock) -> None:
        self.store = store
        self.clock = clock
        self._pending: list[AuditEntry] = []
        self._flusher: asyncio.Task[None] | None = None
        #: Set when the daemon stops: a lingering write goes at once (never cancelled: a
        #: transaction cut off could leave SQLite's write lock held).
        self._closing = asyncio.Event()
        #: One write at a time: a reader's flush waits for the write under way, so it never
        #: reads the table before entries already taken from the queue are in it.
        self._writing = asyncio.Lock()

    def record(
        self,
        actor: str,
        action: str,
        target: str,
        *,
        task: str | None = None,
        status: int | None = None,
        remote: str | None = None,
        detail: Any = None,
        logged: bool = True,
    ) -> AuditEntry:
        """One entry, logged now (unless ``logged`` is False: the caller logs it another
        way) and written within ``AUDIT_LINGER``."""
        entry = AuditEntry(
            self.clock.now(),
            _text(actor),
            _text(action),
            _text(target)[:300],
            None if task is None else _text(task)[:200],
            status,
            None if remote is None else _text(remote)[:100],
            detail,
        )
        if logged:
            self._log(entry)
        self._pending.append(entry)
        if len(self._pending) > MAX_PENDING:
            del self._pending[: len(self._pending) - MAX_PENDING]
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._linger(), name="ecron-audit")
        return entry

    @staticmethod
    def _log(entry: AuditEntry) -> None:
        detail = entry.detail
        log.info(
            "api_audit",
            actor=entry.actor,
            action=entry.action,
            target=entry.target,
            task=entry.task,
            status=entry.status,
            remote=entry.remote,
            **({"detail": detail} if detail is not None else {}),
        )

    def config_changed(
        self,
        added: Sequence[str],
        changed: Mapping[str, Sequence[Mapping[str, Any]]],
        retired: Sequence[str],
    ) -> None:
        """The task set followed a load or reload: one entry per task added, changed (with
        its fields, old and new) and retired, by the actor ``config``. Not logged one by one:
        the daemon's ``tasks_synced`` line says the same (a first start may add thousands)."""
        for name in added:
            self.record(CONFIG, "add", name, task=name, logged=False)
        for name, fields in changed.items():
            detail = {"fields": list(fields)}
            self.record(CONFIG, "change", name, task=name, detail=detail, logged=False)
        for name in retired:
            self.record(CONFIG, "retire", name, task=name, logged=False)

    async def page(self, query: AuditQuery) -> AuditPage:
        """Entries matching ``query``, newest first, this node's pending ones included."""
        await self.flush()
        return await self.store.audit_page(query)

    async def _linger(self) -> None:
        with suppress(TimeoutError):
            await asyncio.wait_for(self._closing.wait(), AUDIT_LINGER.total_seconds())
        await self.flush()

    async def flush(self) -> None:
        """Write the pending entries now (after the write under way, if there is one)."""
        async with self._writing:
            entries, self._pending = self._pending, []
            if not entries:
                return
            try:
                await self.store.add_audit(entries)
            except Exception:  # the store retried what passes; each is in the log already
                log.exception("audit_not_recorded", entries=len(entries))

    async def close(self) -> None:
        """Write what is pending (the daemon stops), without cutting a write short."""
        self._closing.set()
        if self._flusher is not None:
            await self._flusher
        await self.flush()


def _text(value: str) -> str:
    """Text as a database column can hold it: PostgreSQL's text holds no NUL."""
    return value.replace("\x00", "\\0") if "\x00" in value else value
