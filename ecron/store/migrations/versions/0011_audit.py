"""The ``audit`` table: who did what through the API (every change and every refusal), and
what each config load or reload changed in the task set (actor ``config``).

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "audit",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("actor", sa.String(length=100), nullable=False),
        sa.Column("action", sa.String(length=40), nullable=False),
        sa.Column("target", sa.String(length=300), nullable=False),
        sa.Column("task", sa.String(length=200), nullable=True),
        sa.Column("status", sa.Integer(), nullable=True),
        sa.Column("remote", sa.String(length=100), nullable=True),
        sa.Column("detail", sa.JSON(), nullable=True),
    )
    op.create_index("ix_audit_at", "audit", ["at"])
    op.create_index("ix_audit_actor_id", "audit", ["actor", "id"])
    op.create_index("ix_audit_task_id", "audit", ["task", "id"])


def downgrade() -> None:
    op.drop_table("audit")
