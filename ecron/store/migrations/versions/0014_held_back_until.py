"""``pool.paused_until`` is ``pool.held_back_until``: the moment until which a service's
``Retry-After`` holds back the triggers of a pool has the name it has on a task without a
pool (``task.held_back_until``) and in the code; "paused" is a task's own state (``ecron
pause``), which a ``Retry-After`` is not.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-04
"""

from __future__ import annotations

from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("pool", schema=None) as batch_op:
        batch_op.alter_column("paused_until", new_column_name="held_back_until")


def downgrade() -> None:
    with op.batch_alter_table("pool", schema=None) as batch_op:
        batch_op.alter_column("held_back_until", new_column_name="paused_until")
