"""``execution.waiting_for``: a claimed run that waits to start says what for (its pool's
room, an older run under ``forbid``, the service's ``Retry-After``); ``task.held_back_until``:
no trigger of a task without a pool before it (``Retry-After``); and the ``pool`` table:
what the nodes share about each pool (and each task without one) beyond its executions,
the moment until which the service asked for no trigger (``paused_until``) and the next
moment a trigger may leave under ``max_per_second`` (``next_trigger_at``).

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("execution", schema=None) as batch_op:
        batch_op.add_column(sa.Column("waiting_for", sa.String(length=300), nullable=True))
    with op.batch_alter_table("task", schema=None) as batch_op:
        batch_op.add_column(sa.Column("held_back_until", sa.DateTime(timezone=True), nullable=True))
    op.create_table(
        "pool",
        sa.Column("name", sa.String(length=210), primary_key=True),
        sa.Column("paused_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("next_trigger_at", sa.DateTime(timezone=True), nullable=True),
    )


def downgrade() -> None:
    op.drop_table("pool")
    with op.batch_alter_table("task", schema=None) as batch_op:
        batch_op.drop_column("held_back_until")
    with op.batch_alter_table("execution", schema=None) as batch_op:
        batch_op.drop_column("waiting_for")
