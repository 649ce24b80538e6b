"""Overdue tasks: the task row keeps the end of its newest SUCCESS (``last_success_at``,
which ``expect: {success_within}`` is measured from) and when ``task_overdue`` was last
raised (``overdue_at``), so that one node raises it, once per overdue period.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("task", schema=None) as batch_op:
        batch_op.add_column(sa.Column("last_success_at", sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column("overdue_at", sa.DateTime(timezone=True), nullable=True))
    # The newest SUCCESS each task already has, so that no task is overdue on upgrade only
    # because its successes came before this column.
    op.execute(
        "UPDATE task SET last_success_at = (SELECT max(finished_at) FROM execution "
        "WHERE execution.task = task.name AND execution.status = 'SUCCESS')"
    )


def downgrade() -> None:
    with op.batch_alter_table("task", schema=None) as batch_op:
        batch_op.drop_column("overdue_at")
        batch_op.drop_column("last_success_at")
