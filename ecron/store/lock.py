"""The cluster-wide lock: a PostgreSQL advisory lock, or a file lock beside the SQLite file."""

from __future__ import annotations

import asyncio
import fcntl
import hashlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import sqlalchemy as sa

from ecron.store.engine import Engines


def _lock_key(name: str) -> int:
    """A stable signed 64-bit advisory lock key for ``name``."""
    return int.from_bytes(hashlib.sha256(f"ecron:{name}".encode()).digest()[:8], "big", signed=True)


@asynccontextmanager
async def cluster_lock(engines: Engines, name: str, *, wait: bool = True) -> AsyncIterator[bool]:
    """Hold the lock ``name`` across every node sharing the database.

    Yields True when held. With ``wait=False`` it yields False at once if
    another node holds it.
    """
    if engines.dialect.path is not None:
        async with _file_lock(
            engines.dialect.path.with_name(engines.dialect.path.name + f".{name}.lock"), wait
        ) as held:
            yield held
        return
    key = _lock_key(name)
    async with engines.writer.connect() as conn:
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
