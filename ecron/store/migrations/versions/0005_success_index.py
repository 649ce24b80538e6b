"""A task's newest successful runs get an index of their own: the ETA of a snapshot
before any progress rests on their durations, and a task that fails often would otherwise
be read back through its whole history.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

_SUCCESS = "status = 'SUCCESS'"


def upgrade() -> None:
    with op.batch_alter_table("execution", schema=None) as batch_op:
        batch_op.create_index(
            "ix_execution_task_success",
            ["task", "eid"],
            unique=False,
            sqlite_where=sa.text(_SUCCESS),
            postgresql_where=sa.text(_SUCCESS),
        )


def downgrade() -> None:
    with op.batch_alter_table("execution", schema=None) as batch_op:
        batch_op.drop_index("ix_execution_task_success")
