"""Execution ids by their first characters (a unique prefix of an eid names the
execution, in the API and the CLI). SQLite's primary key index already serves it, its text
comparing as bytes; on PostgreSQL the primary key follows the database's collation, which
may not, so an index compares them byte by byte (``varchar_pattern_ops``).

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-02
"""

from __future__ import annotations

from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.create_index(
            "ix_execution_eid_prefix",
            "execution",
            ["eid"],
            unique=False,
            postgresql_ops={"eid": "varchar_pattern_ops"},
        )


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.drop_index("ix_execution_eid_prefix", table_name="execution")
