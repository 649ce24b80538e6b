"""Alembic environment: migrations always run on a connection ecron hands over."""

from __future__ import annotations

from alembic import context

from ecron.store.tables import metadata

connection = context.config.attributes.get("connection")
if connection is None:  # pragma: no cover - only reached by running alembic by hand
    raise RuntimeError("run migrations with `ecron db upgrade -c DIR`, not with alembic directly")

context.configure(
    connection=connection,
    target_metadata=metadata,
    render_as_batch=connection.dialect.name == "sqlite",
    compare_type=True,
)
with context.begin_transaction():
    context.run_migrations()
