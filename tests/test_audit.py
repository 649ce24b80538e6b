"""The audit log's own rules, on SQLite and PostgreSQL: what any request may put in an entry
is stored (a NUL included, which PostgreSQL's text cannot hold), stopping the daemon never
cuts a write of entries short, and no entry waits for a later one to be written."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime

import pytest

from ecron.audit import AuditLog
from ecron.clock import Clock
from ecron.core.audit import AuditEntry, AuditQuery
from ecron.store.migrate import upgrade
from ecron.store.sql import SqlStore
from tests.support.service import wait_for


@pytest.fixture
async def store(database_url: str) -> AsyncIterator[SqlStore]:
    """A migrated store on the test database."""
    opened = SqlStore.open(database_url)
    await upgrade(opened.engines)
    yield opened
    await opened.close()


def held_writes(
    store: SqlStore, monkeypatch: pytest.MonkeyPatch
) -> tuple[asyncio.Event, asyncio.Event]:
    """Make the store's audit writes stop inside their call: the first event is set once
    one is there, and it goes on (really writing) once the test sets the second."""
    inside, go_on = asyncio.Event(), asyncio.Event()
    real = store.add_audit

    async def slow_write(entries: Sequence[AuditEntry]) -> None:
        inside.set()
        await go_on.wait()
        await real(entries)

    monkeypatch.setattr(store, "add_audit", slow_write)
    return inside, go_on


async def test_an_entry_with_a_nul_character_is_stored_with_it_written_out(
    store: SqlStore,
) -> None:
    """A path with a NUL (`/api/v1/tasks/n%00/run`) is audited like any other: the NUL is
    written `\\0`, so PostgreSQL takes the entry and the entries written with it."""
    audit = AuditLog(store, Clock())
    audit.record("anonymous", "run", "n\x00", task="n\x00", status=404, remote="127.0.0.1")
    audit.record("anonymous", "run", "n", task="n", status=202, remote="127.0.0.1")
    await audit.close()
    page = await store.audit_page(AuditQuery())
    assert [(e.target, e.status) for e in page.items] == [("n", 202), ("n\\0", 404)]


async def test_stopping_waits_for_a_write_under_way_instead_of_cutting_it_short(
    store: SqlStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`close()` while the lingering write is inside its transaction lets it finish (a
    transaction cut off by cancellation could leave SQLite's write lock held, and the
    entries would be lost): the entry is stored and the database takes writes after."""
    audit = AuditLog(store, Clock())
    inside, go_on = held_writes(store, monkeypatch)
    audit.record("ci", "run", "report", task="report", status=202)
    await inside.wait()
    closing = asyncio.create_task(audit.close())
    await asyncio.sleep(0)  # let close() reach its wait (a turn of the loop, not a delay)
    assert not closing.done()
    go_on.set()
    await closing
    monkeypatch.undo()
    later = AuditEntry(datetime.now(UTC), "config", "change", "report", "report")
    await store.add_audit([later])
    page = await store.audit_page(AuditQuery(task="report"))
    assert [(e.actor, e.action) for e in page.items] == [("config", "change"), ("ci", "run")]


async def test_a_reader_waits_for_the_write_under_way_and_sees_its_entries(
    store: SqlStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GET /audit while the lingering write is inside its transaction: the read waits for
    it (and writes what came after), so the node's own latest entries are in the page."""
    audit = AuditLog(store, Clock())
    inside, go_on = held_writes(store, monkeypatch)
    audit.record("ci", "run", "report", task="report", status=202)
    await inside.wait()
    audit.record("ci", "pause", "report", task="report", status=200)
    reading = asyncio.create_task(audit.page(AuditQuery(task="report")))
    await asyncio.sleep(0)  # let the read reach its wait (a turn of the loop, not a delay)
    assert not reading.done()
    go_on.set()
    page = await reading
    await audit.close()
    assert [e.action for e in page.items] == ["pause", "run"]


async def test_an_entry_recorded_while_a_write_is_under_way_is_written_without_another_event(
    store: SqlStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An entry recorded while the lingering write is inside its transaction is written
    within `AUDIT_LINGER` of that write's end by the writer's own timer: no later entry,
    reader or stop is needed to carry it (it waited for the next event)."""
    audit = AuditLog(store, Clock())
    inside, go_on = held_writes(store, monkeypatch)
    audit.record("ci", "run", "report", task="report", status=202)
    await inside.wait()
    audit.record("ci", "pause", "report", task="report", status=200)
    go_on.set()

    async def both_stored() -> bool:
        page = await store.audit_page(AuditQuery(task="report"))
        return [e.action for e in page.items] == ["pause", "run"]

    await wait_for(both_stored, timeout=5)
    await audit.close()
