"""The task table read without changing anything, for ``ecron plan``: no database file is
created, no schema made or migrated, and the database itself refuses every write
(``Engines(read_only=True)``)."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import make_url

from ecron.errors import StoreError
from ecron.store.changes import StoredTask
from ecron.store.engine import Engines
from ecron.store.migrate import HEAD
from ecron.store.sql import SqlStore
from ecron.store.tables import setting_table

#: The key of the generated secret in the ``setting`` table.
SECRET_KEY = "callback_secret"  # noqa: S105  (a row's name, not a secret)


async def peek_tasks(
    url: str, secret: str | None = None
) -> tuple[dict[str, StoredTask] | None, str | None]:
    """Every task row of the database at ``url``, retired ones too; None when it holds no
    ecron schema yet (a SQLite file that does not exist, a database never migrated), where
    loading a config adds every task. Raises ``StoreError`` when the schema is at another
    revision than this ecron's: older, a sync would migrate it first (``ecron db upgrade``),
    which may change the rows compared; newer, this ecron cannot read it.

    Also the daemon's secret, which keys the rows' digests: ``secret`` (the configured
    one), else the one the first node generated and stored; None when there is none yet."""
    engines = Engines(url, pool_size=1, read_only=True)
    try:
        path = engines.dialect.path
        if path is not None and not path.exists():
            return None, secret
        async with engines.read() as conn:
            revision = await conn.run_sync(_revision)
        if revision is None:
            return None, secret
        if revision != HEAD:
            raise StoreError(_other_revision(url, revision))
        if secret is None:
            query = sa.select(setting_table.c.value).where(setting_table.c.key == SECRET_KEY)
            async with engines.read() as conn:
                secret = (await conn.execute(query)).scalar()
        return await SqlStore(engines).stored_tasks(), secret
    finally:
        await engines.dispose()


def _revision(connection: Any) -> str | None:
    """The schema revision alembic stamped, or None when there is no ecron schema."""
    if not sa.inspect(connection).has_table("alembic_version"):
        return None
    rows = connection.execute(sa.text("SELECT version_num FROM alembic_version")).all()
    return str(rows[0][0]) if rows else None


def _other_revision(url: str, revision: str) -> str:
    shown = make_url(url).render_as_string(hide_password=True)
    said = f"database {shown}: its schema is at revision {revision}, this ecron's is {HEAD}: "
    if revision > HEAD:  # revisions are numbered 0001, 0002, ...
        return said + "a newer ecron migrated it; plan with that version"
    return said + "run 'ecron db upgrade' with this ecron first (plan never migrates)"
