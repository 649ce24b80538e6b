"""Node leases: what a node holds leans on one lease of its own (``node.lease_until`` and
``node.epoch``), renewed in one write per round whatever the number of executions it holds,
instead of a lease per execution renewed row by row (DESIGN.md, "Scale"). An execution
keeps its owner and fence, and gains the epoch of the lease it is held under
(``owner_epoch``); ``lease_until`` stays for a fire time claimed ahead (held until its start
plus a grace).

Rows held before this revision keep their own ``lease_until`` and are free once it runs
out, as before (their ``owner_epoch`` is null); the nodes that held them have no lease yet,
so a node started on this revision adopts them then.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

_HELD = "status IN ('SCHEDULED', 'PENDING', 'RUNNING')"


def upgrade() -> None:
    with op.batch_alter_table("node", schema=None) as batch_op:
        batch_op.add_column(sa.Column("lease_until", sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column("epoch", sa.Integer(), nullable=False, server_default="0"))
    with op.batch_alter_table("execution", schema=None) as batch_op:
        batch_op.add_column(sa.Column("owner_epoch", sa.Integer(), nullable=True))
        batch_op.create_index(
            "ix_execution_holder",
            ["owner", "owner_epoch"],
            unique=False,
            sqlite_where=sa.text(_HELD),
            postgresql_where=sa.text(_HELD),
        )


def downgrade() -> None:
    with op.batch_alter_table("execution", schema=None) as batch_op:
        batch_op.drop_index("ix_execution_holder")
        batch_op.drop_column("owner_epoch")
    with op.batch_alter_table("node", schema=None) as batch_op:
        batch_op.drop_column("epoch")
        batch_op.drop_column("lease_until")
