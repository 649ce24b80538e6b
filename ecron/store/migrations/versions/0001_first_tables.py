"""The first tables: task, execution, execution_step, node, setting.

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "execution",
        sa.Column("eid", sa.String(length=48), nullable=False),
        sa.Column("task", sa.String(length=200), nullable=False),
        sa.Column("scheduled_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("trigger_kind", sa.String(length=16), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("resume_attempt", sa.Integer(), nullable=False),
        sa.Column("resume_of", sa.String(length=48), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.String(length=32), nullable=True),
        sa.Column("progress", sa.Float(), nullable=False),
        sa.Column("message", sa.Text(), nullable=True),
        sa.Column("result", sa.JSON(none_as_null=True), nullable=True),
        sa.Column("result_truncated", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("triggered_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_report_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("deadline", sa.DateTime(timezone=True), nullable=True),
        sa.Column("next_poll_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("probe_failures", sa.Integer(), nullable=False),
        sa.Column("cancel_sent_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("cancel_acknowledged", sa.Boolean(), nullable=True),
        sa.Column("owner", sa.String(length=200), nullable=True),
        sa.Column("lease_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("fence", sa.Integer(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("eid"),
        sa.UniqueConstraint("resume_of", name="uq_execution_resume_of"),
        sa.UniqueConstraint(
            "task", "scheduled_at", "attempt", "resume_attempt", name="uq_execution_fire"
        ),
    )
    with op.batch_alter_table("execution", schema=None) as batch_op:
        batch_op.create_index(
            "ix_execution_active_task",
            ["task"],
            unique=False,
            sqlite_where=sa.text("status IN ('PENDING', 'RUNNING')"),
            postgresql_where=sa.text("status IN ('PENDING', 'RUNNING')"),
        )
        batch_op.create_index(
            "ix_execution_runnable",
            ["lease_until"],
            unique=False,
            sqlite_where=sa.text("status IN ('PENDING', 'RUNNING')"),
            postgresql_where=sa.text("status IN ('PENDING', 'RUNNING')"),
        )
        batch_op.create_index("ix_execution_status_eid", ["status", "eid"], unique=False)
        batch_op.create_index("ix_execution_task_eid", ["task", "eid"], unique=False)

    op.create_table(
        "execution_step",
        sa.Column("eid", sa.String(length=48), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("remote_id", sa.String(length=64), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.String(length=32), nullable=True),
        sa.Column("progress", sa.Float(), nullable=False),
        sa.Column("message", sa.Text(), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("eid", "number"),
        sa.UniqueConstraint("remote_id", name="uq_execution_step_remote_id"),
    )
    op.create_table(
        "node",
        sa.Column("node_id", sa.String(length=200), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("host", sa.String(length=200), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("version", sa.String(length=32), nullable=False),
        sa.PrimaryKeyConstraint("node_id"),
    )
    with op.batch_alter_table("node", schema=None) as batch_op:
        batch_op.create_index("ix_node_heartbeat", ["heartbeat_at"], unique=False)

    op.create_table(
        "setting",
        sa.Column("key", sa.String(length=100), nullable=False),
        sa.Column("value", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("key"),
    )
    op.create_table(
        "task",
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("spec_hash", sa.String(length=64), nullable=False),
        sa.Column("schedule_text", sa.String(length=400), nullable=False),
        sa.Column("next_fire_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_end_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("paused", sa.Boolean(), nullable=False),
        sa.Column("paused_reason", sa.Text(), nullable=True),
        sa.Column("consecutive_failures", sa.Integer(), nullable=False),
        sa.Column("retired", sa.Boolean(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )
    with op.batch_alter_table("task", schema=None) as batch_op:
        batch_op.create_index("ix_task_due", ["next_fire_at"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("task", schema=None) as batch_op:
        batch_op.drop_index("ix_task_due")

    op.drop_table("task")
    op.drop_table("setting")
    with op.batch_alter_table("node", schema=None) as batch_op:
        batch_op.drop_index("ix_node_heartbeat")

    op.drop_table("node")
    op.drop_table("execution_step")
    with op.batch_alter_table("execution", schema=None) as batch_op:
        batch_op.drop_index("ix_execution_task_eid")
        batch_op.drop_index("ix_execution_status_eid")
        batch_op.drop_index(
            "ix_execution_runnable",
            sqlite_where=sa.text("status IN ('PENDING', 'RUNNING')"),
            postgresql_where=sa.text("status IN ('PENDING', 'RUNNING')"),
        )
        batch_op.drop_index(
            "ix_execution_active_task",
            sqlite_where=sa.text("status IN ('PENDING', 'RUNNING')"),
            postgresql_where=sa.text("status IN ('PENDING', 'RUNNING')"),
        )

    op.drop_table("execution")
