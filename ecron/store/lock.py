"""The cluster-wide lock: a PostgreSQL advisory lock, or a file lock beside the SQLite file.

Which of them is decided once, when ``Engines`` opens (``locks_for``); ``cluster_lock``
(in ``engine.py``) holds one."""

from __future__ import annotations

import asyncio
import fcntl
import hashlib
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

#: ``lock(name, wait)``: hold the lock ``name``; yields whether it is held.
Locker = Callable[[str, bool], AbstractAsyncContextManager[bool]]


def _lock_key(name: str) -> int:
    """A stable signed 64-bit advisory lock key for ``name``."""
    return int.from_bytes(hashlib.sha256(f"ecron:{name}".encode()).digest()[:8], "big", signed=True)


def locks_for(path: Path | None, engine: AsyncEngine) -> Locker:
    """File locks beside the SQLite file at ``path``, or advisory locks through ``engine``."""
    if path is not None:
        base = path

        def file_lock(name: str, wait: bool) -> AbstractAsyncContextManager[bool]:
            return _file_lock(base.with_name(base.name + f".{name}.lock"), wait)

        return file_lock

    def advisory_lock(name: str, wait: bool) -> AbstractAsyncContextManager[bool]:
        return _advisory_lock(engine, name, wait)

    return advisory_lock


@asynccontextmanager
async def _advisory_lock(engine: AsyncEngine, name: str, wait: bool) -> AsyncIterator[bool]:
    key = _lock_key(name)
    async with engine.connect() as conn:
        if wait:
            await conn.execute(sa.text("SELECT pg_advisory_lock(:key)"), {"key": key})
            held = True
        else:
            held = bool(
                (
                    await conn.execute(sa.text("SELECT pg_try_advisory_lock(:key)"), {"key": key})
                ).scalar()
            )
        await conn.commit()
        try:
            yield held
        finally:
            if held:
                await conn.execute(sa.text("SELECT pg_advisory_unlock(:key)"), {"key": key})
                await conn.commit()


@asynccontextmanager
async def _file_lock(path: Path, wait: bool) -> AsyncIterator[bool]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a+") as handle:
        if wait:
            await asyncio.to_thread(fcntl.flock, handle.fileno(), fcntl.LOCK_EX)
            held = True
        else:
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                held = True
            except BlockingIOError:
                held = False
        try:
            yield held
        finally:
            if held:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
