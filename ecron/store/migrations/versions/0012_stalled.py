"""Stalled executions: the execution row keeps when a report last changed its progress
(``progress_at``, which ``expect: {progress_within}`` is measured from) and when the patrol
raised ``execution_stalled`` about it (``stalled_alerted_at``), so that one node raises it,
once per execution.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("execution", schema=None) as batch_op:
        batch_op.add_column(sa.Column("progress_at", sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(
            sa.Column("stalled_alerted_at", sa.DateTime(timezone=True), nullable=True)
        )
    # Running executions measure from their last written report (the last progress change
    # is not known before this column; a later moment never makes one stalled too early).
    op.execute("UPDATE execution SET progress_at = last_report_at WHERE status = 'RUNNING'")


def downgrade() -> None:
    with op.batch_alter_table("execution", schema=None) as batch_op:
        batch_op.drop_column("stalled_alerted_at")
        batch_op.drop_column("progress_at")
