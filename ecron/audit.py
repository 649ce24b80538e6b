"""The audit log (DESIGN.md, "Audit"): who did what through the API, and what each config
load changed.

Refusals (401, 403, 429) cannot flood it: those of one remote address, actor and status
within ``REFUSALS_WINDOW`` of the first are one window. The first is an entry at once (so
a refusal shows without delay); the others are counted, and written as one entry with
their ``count`` (in ``detail``) when the window ends, when the log is read, or when the
daemon stops. So one client sending bad tokens in a loop costs a few entries a minute,
not one per request.

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
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import structlog

from ecron.clock import Clock, iso
from ecron.core.audit import CONFIG, AuditEntry, AuditPage, AuditQuery
from ecron.store.base import Store

log = structlog.get_logger(__name__)

#: Entries are written at most this much later, many at once.
AUDIT_LINGER = timedelta(milliseconds=50)
#: Entries waiting for their write, at most (the oldest go first, each still in the log).
MAX_PENDING = 10_000
#: Refusals of one remote address, actor and status within this much of the first one
#: are counted into one entry.
REFUSALS_WINDOW = timedelta(minutes=1)
#: Windows of refusals open at once, at most (past it, the oldest is written and closed).
MAX_WINDOWS = 10_000
#: How many of the targets refused in one window an entry names.
TARGETS_NAMED = 5


@dataclass(slots=True)
class _Window:
    """The refusals of one remote address, actor and status since ``opened``: those not
    written yet (``count``, the last one's action, the targets), and when it ends."""

    opened: datetime
    until: datetime
    count: int = 0
    first: datetime | None = None
    action: str = ""
    task: str | None = None
    targets: list[str] = field(default_factory=list)


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
        #: Open windows of refusals, by (remote address, actor, status), oldest first.
        self._windows: dict[tuple[str | None, str, int], _Window] = {}
        self._closer: asyncio.Task[None] | None = None

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

    def refused(
        self,
        actor: str,
        action: str,
        target: str,
        *,
        status: int,
        remote: str | None,
        task: str | None = None,
        detail: dict[str, Any] | None = None,
    ) -> None:
        """A refused request (401, 403, 429): an entry at once if it opens a window of its
        remote address, actor and status, else counted into the window's next entry (see
        the module docstring). ``detail`` goes into the window's first entry."""
        now = self.clock.now()
        key = (remote, actor, status)
        window = self._windows.get(key)
        if window is not None and now >= window.until:
            self._close(key)
            window = None
        if window is None:
            if len(self._windows) >= MAX_WINDOWS:
                self._close(next(iter(self._windows)))
            self._windows[key] = _Window(now, now + REFUSALS_WINDOW)
            first = {"count": 1, **(detail or {})}
            self.record(
                actor, action, target, task=task, status=status, remote=remote, detail=first
            )
            if self._closer is None or self._closer.done():
                self._closer = asyncio.create_task(self._close_windows(), name="ecron-refusals")
            return
        window.count += 1
        window.first = window.first or now
        window.action, window.task = action, task
        if len(window.targets) < TARGETS_NAMED and target not in window.targets:
            window.targets.append(target)

    def _write_counted(self, key: tuple[str | None, str, int]) -> None:
        """The entry of the refusals counted in a window so far, if any (the window stays
        open)."""
        window = self._windows[key]
        if not window.count:
            return
        remote, actor, status = key
        detail = {
            "count": window.count,
            "from": iso(window.first or window.opened),
            "to": iso(self.clock.now()),
            "targets": window.targets,
        }
        target = window.targets[0] if window.targets else ""
        self.record(
            actor,
            window.action,
            target,
            task=window.task,
            status=status,
            remote=remote,
            detail=detail,
        )
        window.count, window.first, window.targets = 0, None, []

    def _close(self, key: tuple[str | None, str, int]) -> None:
        self._write_counted(key)
        del self._windows[key]

    def _count_all(self) -> None:
        """Write what every open window counted so far (a reader, or the daemon stopping)."""
        for key in list(self._windows):
            self._write_counted(key)

    async def _close_windows(self) -> None:
        """Close each window when it ends, writing what it counted."""
        while self._windows and not self._closing.is_set():
            now = self.clock.now()
            for key in [k for k, window in self._windows.items() if window.until <= now]:
                self._close(key)
            if self._windows:
                earliest = min(window.until for window in self._windows.values())
                await self.clock.wait(self._closing, (earliest - now).total_seconds())

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
        """Entries matching ``query``, newest first, this node's pending ones included (and
        what its open windows of refusals counted so far)."""
        self._count_all()
        await self.flush()
        return await self.store.audit_page(query)

    async def _linger(self) -> None:
        """Write the entries within ``AUDIT_LINGER``, again as long as some came while a
        write was under way (those have no other write coming)."""
        while True:
            with suppress(TimeoutError):
                await asyncio.wait_for(self._closing.wait(), AUDIT_LINGER.total_seconds())
            await self.flush()
            if not self._pending:
                return

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
        if self._closer is not None:
            await self._closer
        self._count_all()
        if self._flusher is not None:
            await self._flusher
        await self.flush()


def _text(value: str) -> str:
    """Text as a database column can hold it: PostgreSQL's text holds no NUL."""
    return value.replace("\x00", "\\0") if "\x00" in value else value
