"""Chains: an execution of a chained task names the upstream execution whose end set it
off (``upstream``), and a partial index finds the executions each one set off, for a
snapshot's ``downstream``. The new ``trigger_kind`` value ``chain`` needs nothing: the
column is text, with no check constraint.

The index of a task's successful runs (0005) gets ``resume_attempt`` before ``eid``: the
durations query asks for ``resume_attempt = 0`` too, and with two terms of equality the index
is SQLite's choice by cost; with one, it tied with ``(status, eid)`` once this migration had
altered the table, and SQLite took that one, walking every task's successes.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

_CHAINED = "upstream IS NOT NULL"
_SUCCESS = "status = 'SUCCESS'"


def upgrade() -> None:
    with op.batch_alter_table("execution", schema=None) as batch_op:
        batch_op.add_column(sa.Column("upstream", sa.String(length=48), nullable=True))
        batch_op.create_index(
            "ix_execution_upstream",
            ["upstream"],
            unique=False,
            sqlite_where=sa.text(_CHAINED),
            postgresql_where=sa.text(_CHAINED),
        )
        batch_op.drop_index("ix_execution_task_success")
        batch_op.create_index(
            "ix_execution_task_success",
            ["task", "resume_attempt", "eid"],
            unique=False,
            sqlite_where=sa.text(_SUCCESS),
            postgresql_where=sa.text(_SUCCESS),
        )


def downgrade() -> None:
    with op.batch_alter_table("execution", schema=None) as batch_op:
        batch_op.drop_index("ix_execution_task_success")
        batch_op.create_index(
            "ix_execution_task_success",
            ["task", "eid"],
            unique=False,
            sqlite_where=sa.text(_SUCCESS),
            postgresql_where=sa.text(_SUCCESS),
        )
        batch_op.drop_index("ix_execution_upstream")
        batch_op.drop_column("upstream")
