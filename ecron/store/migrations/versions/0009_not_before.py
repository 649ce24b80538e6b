"""``execution.next_poll_at`` becomes ``not_before``: what the column has always held is the
moment before which a claimed execution must not start (its fire time plus jitter, a retry's
backoff, a chained run's claim), never a poll time; polls are planned in memory.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01
"""

from __future__ import annotations

from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("execution", schema=None) as batch_op:
        batch_op.alter_column("next_poll_at", new_column_name="not_before")


def downgrade() -> None:
    with op.batch_alter_table("execution", schema=None) as batch_op:
        batch_op.alter_column("not_before", new_column_name="next_poll_at")
