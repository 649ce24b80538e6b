"""Schema migrations (alembic), run by ecron itself under the cluster-wide lock.

A database already at ``HEAD`` is recognised by one read of alembic's own version table,
without importing alembic (a quarter of a second of every start); alembic runs only when
there is something to migrate. A test checks that ``HEAD`` is alembic's head.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from ecron.store.engine import Engines, cluster_lock

if TYPE_CHECKING:
    from alembic.config import Config as AlembicConfig

#: The newest migration (``ecron/store/migrations/versions``).
HEAD = "0014"


def alembic_config() -> AlembicConfig:
    """Alembic settings pointing at ecron's migration scripts (no alembic.ini needed)."""
    from alembic.config import Config as AlembicConfig

    config = AlembicConfig()
    config.set_main_option("script_location", "ecron.store:migrations")
    return config


def head_revision() -> str | None:
    """The newest migration alembic finds among ecron's scripts."""
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config()).get_current_head()


async def upgrade(engines: Engines) -> tuple[str | None, str | None]:
    """Bring the schema to the newest revision; several nodes may call this at once.

    Returns the revision before and after.
    """
    if (current := await _stamped(engines)) == HEAD:
        return current, current
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


async def _stamped(engines: Engines) -> str | None:
    """The revision in alembic's version table, or None (no table, no row, not one row)."""
    try:
        async with engines.read() as conn:
            rows = (await conn.execute(sa.text("SELECT version_num FROM alembic_version"))).all()
    except sa.exc.DBAPIError:  # no such table: a new database
        return None
    return str(rows[0][0]) if len(rows) == 1 else None


def _current(connection: Any) -> str | None:
    from alembic.runtime.migration import MigrationContext

    revision: str | None = MigrationContext.configure(connection).get_current_revision()
    return revision


def _upgrade(connection: Any) -> None:
    from alembic import command

    config = alembic_config()
    config.attributes["connection"] = connection
    command.upgrade(config, "head")
