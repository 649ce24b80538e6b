"""Schema migrations (alembic), run by ecron itself under the cluster-wide lock."""

from __future__ import annotations

from typing import Any

from alembic import command
from alembic.config import Config as AlembicConfig
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from ecron.store.engine import Engines
from ecron.store.lock import cluster_lock


def alembic_config() -> AlembicConfig:
    """Alembic settings pointing at ecron's migration scripts (no alembic.ini needed)."""
    config = AlembicConfig()
    config.set_main_option("script_location", "ecron.store:migrations")
    return config


def head_revision() -> str | None:
    """The newest migration ecron knows."""
    return ScriptDirectory.from_config(alembic_config()).get_current_head()


async def upgrade(engines: Engines) -> tuple[str | None, str | None]:
    """Bring the schema to the newest revision; several nodes may call this at once.

    Returns the revision before and after.
    """
    async with cluster_lock(engines, "migrate"), engines.writer.connect() as conn:
        before = await conn.run_sync(_current)
        await conn.run_sync(_upgrade)
        await conn.commit()
        after = await conn.run_sync(_current)
    return before, after


async def current_revision(engines: Engines) -> str | None:
    """The schema revision of the database, or None if it was never migrated."""
    async with engines.reader.connect() as conn:
        return await conn.run_sync(_current)


def _current(connection: Any) -> str | None:
    revision: str | None = MigrationContext.configure(connection).get_current_revision()
    return revision


def _upgrade(connection: Any) -> None:
    config = alembic_config()
    config.attributes["connection"] = connection
    command.upgrade(config, "head")
