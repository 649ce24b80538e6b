"""Fire times claimed ahead get a status of their own, SCHEDULED: they are not active
executions yet. The takeover index covers them, since a dead node's claims are taken over
as soon as their short lease ends; claims of the previous version (PENDING rows whose
trigger never left) become SCHEDULED.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

_HELD = "status IN ('SCHEDULED', 'PENDING', 'RUNNING')"
_ACTIVE = "status IN ('PENDING', 'RUNNING')"


def upgrade() -> None:
    with op.batch_alter_table("execution", schema=None) as batch_op:
        batch_op.drop_index("ix_execution_runnable")
        batch_op.create_index(
            "ix_execution_runnable",
            ["lease_until"],
            unique=False,
            sqlite_where=sa.text(_HELD),
            postgresql_where=sa.text(_HELD),
        )
    op.execute(
        "UPDATE execution SET status = 'SCHEDULED' "
        "WHERE status = 'PENDING' AND triggered_at IS NULL"
    )


def downgrade() -> None:
    op.execute("UPDATE execution SET status = 'PENDING' WHERE status = 'SCHEDULED'")
    with op.batch_alter_table("execution", schema=None) as batch_op:
        batch_op.drop_index("ix_execution_runnable")
        batch_op.create_index(
            "ix_execution_runnable",
            ["lease_until"],
            unique=False,
            sqlite_where=sa.text(_ACTIVE),
            postgresql_where=sa.text(_ACTIVE),
        )
