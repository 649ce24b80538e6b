"""Resume and patrol: step remote ids may repeat (a resume inherits SUCCESS steps), and
finished executions are found by their end time (automatic resume, history retention).

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29
"""

from __future__ import annotations

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("execution_step", schema=None) as batch_op:
        batch_op.drop_constraint("uq_execution_step_remote_id", type_="unique")
        batch_op.create_index("ix_execution_step_remote_id", ["remote_id"], unique=False)
    with op.batch_alter_table("execution", schema=None) as batch_op:
        batch_op.create_index("ix_execution_finished", ["finished_at"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("execution", schema=None) as batch_op:
        batch_op.drop_index("ix_execution_finished")
    with op.batch_alter_table("execution_step", schema=None) as batch_op:
        batch_op.drop_index("ix_execution_step_remote_id")
        batch_op.create_unique_constraint("uq_execution_step_remote_id", ["remote_id"])
