"""The database tables (SQLModel). Rows stay in ``store``; the rest of ecron sees domain objects."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, ClassVar

import sqlalchemy as sa
from sqlalchemy.engine import Dialect
from sqlmodel import Field, SQLModel


class UTCDateTime(sa.types.TypeDecorator[datetime]):
    """A timezone-aware UTC datetime on every backend (SQLite stores it naive, in UTC)."""

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r}: ecron stores aware UTC times only")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


#: Statuses that count as active, for partial indexes (kept in step with core.ACTIVE).
_ACTIVE_SQL = "status IN ('PENDING', 'RUNNING')"
#: Statuses held under a lease (kept in step with core.HELD).
_HELD_SQL = "status IN ('SCHEDULED', 'PENDING', 'RUNNING')"
#: Successful executions, for the partial index of recent durations.
_SUCCESS_SQL = "status = 'SUCCESS'"


class TaskRow(SQLModel, table=True):
    """A task as the scheduler sees it: its spec and where its schedule stands."""

    __tablename__: ClassVar[str] = "task"
    __table_args__ = (sa.Index("ix_task_due", "next_fire_at"),)

    name: str = Field(primary_key=True, max_length=200)
    spec: dict[str, Any] = Field(sa_type=sa.JSON)
    spec_hash: str = Field(max_length=64)
    schedule_text: str = Field(max_length=400)
    next_fire_at: datetime | None = Field(default=None, sa_type=UTCDateTime)
    #: The previous execution's end, for ``after`` schedules.
    last_end_at: datetime | None = Field(default=None, sa_type=UTCDateTime)
    #: The end of its newest SUCCESS (``expect``, and the last-success gauge); for a task
    #: without ``expect`` written at most once a minute while nothing else moves its row.
    last_success_at: datetime | None = Field(default=None, sa_type=UTCDateTime)
    #: When ``task_overdue`` was last raised (raised again only after a newer success).
    overdue_at: datetime | None = Field(default=None, sa_type=UTCDateTime)
    enabled: bool = True
    paused: bool = False
    #: No trigger of the task before this (``Retry-After``; a task without a pool).
    held_back_until: datetime | None = Field(default=None, sa_type=UTCDateTime)
    paused_reason: str | None = Field(default=None, sa_type=sa.Text)
    consecutive_failures: int = 0
    retired: bool = False
    version: int = 1
    created_at: datetime = Field(sa_type=UTCDateTime)
    updated_at: datetime = Field(sa_type=UTCDateTime)


class ExecutionRow(SQLModel, table=True):
    """One run of a task. The unique key makes a fire time impossible to run twice."""

    __tablename__: ClassVar[str] = "execution"
    __table_args__ = (
        sa.UniqueConstraint(
            "task", "scheduled_at", "attempt", "resume_attempt", name="uq_execution_fire"
        ),
        sa.UniqueConstraint("resume_of", name="uq_execution_resume_of"),
        sa.Index("ix_execution_task_eid", "task", "eid"),
        sa.Index("ix_execution_status_eid", "status", "eid"),
        sa.Index("ix_execution_finished", "finished_at"),
        # Claims of their own (a fire time claimed ahead) whose short lease ran out.
        sa.Index(
            "ix_execution_runnable",
            "lease_until",
            sqlite_where=sa.text(_HELD_SQL),
            postgresql_where=sa.text(_HELD_SQL),
        ),
        # What each node holds, by the epoch of its lease: a takeover reads only the rows
        # of the leases that ran out (or were let go), never the rows of live ones.
        sa.Index(
            "ix_execution_holder",
            "owner",
            "owner_epoch",
            sqlite_where=sa.text(_HELD_SQL),
            postgresql_where=sa.text(_HELD_SQL),
        ),
        sa.Index(
            "ix_execution_active_task",
            "task",
            sqlite_where=sa.text(_ACTIVE_SQL),
            postgresql_where=sa.text(_ACTIVE_SQL),
        ),
        # The executions a chained execution set off (a snapshot's ``downstream``).
        sa.Index(
            "ix_execution_upstream",
            "upstream",
            sqlite_where=sa.text("upstream IS NOT NULL"),
            postgresql_where=sa.text("upstream IS NOT NULL"),
        ),
        # A task's newest successful runs that are not resumes (their durations feed the
        # ETA); ``resume_attempt`` in it makes it SQLite's choice over (status, eid) by cost.
        sa.Index(
            "ix_execution_task_success",
            "task",
            "resume_attempt",
            "eid",
            sqlite_where=sa.text(_SUCCESS_SQL),
            postgresql_where=sa.text(_SUCCESS_SQL),
        ),
        # Ids by their first characters, compared byte by byte whatever the database's
        # collation (``~>=~``, ``~<~``); SQLite's primary key index already does that.
        sa.Index(
            "ix_execution_eid_prefix", "eid", postgresql_ops={"eid": "varchar_pattern_ops"}
        ).ddl_if(dialect="postgresql"),
    )

    eid: str = Field(primary_key=True, max_length=48)
    task: str = Field(max_length=200)
    scheduled_at: datetime = Field(sa_type=UTCDateTime)
    trigger_kind: str = Field(max_length=16)
    attempt: int = 1
    resume_attempt: int = 0
    resume_of: str | None = Field(default=None, max_length=48)
    #: Chains: the upstream execution that set it off.
    upstream: str | None = Field(default=None, max_length=48)
    status: str = Field(max_length=16)
    reason: str | None = Field(default=None, max_length=32)
    progress: float = 0.0
    message: str | None = Field(default=None, sa_type=sa.Text)
    result: Any = Field(default=None, sa_type=sa.JSON(none_as_null=True), nullable=True)
    result_truncated: bool = False
    created_at: datetime = Field(sa_type=UTCDateTime)
    triggered_at: datetime | None = Field(default=None, sa_type=UTCDateTime)
    last_report_at: datetime | None = Field(default=None, sa_type=UTCDateTime)
    #: When a report last changed its progress (``execution_stalled``).
    progress_at: datetime | None = Field(default=None, sa_type=UTCDateTime)
    finished_at: datetime | None = Field(default=None, sa_type=UTCDateTime)
    deadline: datetime | None = Field(default=None, sa_type=UTCDateTime)
    not_before: datetime | None = Field(default=None, sa_type=UTCDateTime)
    #: A claimed run that waits to start (a pool's room, an older run, ``Retry-After``).
    waiting_for: str | None = Field(default=None, max_length=300)
    probe_failures: int = 0
    cancel_sent_at: datetime | None = Field(default=None, sa_type=UTCDateTime)
    cancel_acknowledged: bool | None = None
    owner: str | None = Field(default=None, max_length=200)
    #: The epoch of the owner's node lease it is held under (``node.epoch``).
    owner_epoch: int | None = None
    #: A claim's own short lease (a fire time claimed ahead, not waiting); None when the
    #: owner's node lease holds it.
    lease_until: datetime | None = Field(default=None, sa_type=UTCDateTime)
    #: When the patrol gave up resuming it automatically (not a domain field: patrol only).
    resume_given_up_at: datetime | None = Field(default=None, sa_type=UTCDateTime)
    #: When the patrol raised ``execution_stalled`` about it (patrol only: once per
    #: execution, whatever node; never written by a state write, nor raising the version).
    stalled_alerted_at: datetime | None = Field(default=None, sa_type=UTCDateTime)
    #: Raised on every claim: a write under an older fence is refused.
    fence: int = 0
    #: Raised on every write: compare-and-set against concurrent writers.
    version: int = 0


class ExecutionStepRow(SQLModel, table=True):
    """One step of a multi-step execution."""

    __tablename__: ClassVar[str] = "execution_step"
    # Not unique: a resume shows the steps it inherits as SUCCESS under their old remote ids.
    __table_args__ = (sa.Index("ix_execution_step_remote_id", "remote_id"),)

    eid: str = Field(primary_key=True, max_length=48)
    number: int = Field(primary_key=True)
    name: str = Field(max_length=200)
    remote_id: str = Field(max_length=64)
    status: str = Field(max_length=16)
    reason: str | None = Field(default=None, max_length=32)
    progress: float = 0.0
    message: str | None = Field(default=None, sa_type=sa.Text)
    started_at: datetime | None = Field(default=None, sa_type=UTCDateTime)
    finished_at: datetime | None = Field(default=None, sa_type=UTCDateTime)


class NodeRow(SQLModel, table=True):
    """An ecron process and its lease: what every execution it holds leans on, renewed in
    one write per round whatever it holds (DESIGN.md, "Scale")."""

    __tablename__: ClassVar[str] = "node"
    __table_args__ = (sa.Index("ix_node_heartbeat", "heartbeat_at"),)

    node_id: str = Field(primary_key=True, max_length=200)
    started_at: datetime = Field(sa_type=UTCDateTime)
    heartbeat_at: datetime = Field(sa_type=UTCDateTime)
    host: str = Field(default="", max_length=200)
    pid: int = 0
    version: str = Field(default="", max_length=32)
    #: Until when the node's lease runs; None once it was fenced (ran out and was taken
    #: over, or let go at a clean stop).
    lease_until: datetime | None = Field(default=None, sa_type=UTCDateTime)
    #: Raised each time the lease is fenced or taken again: executions held under an older
    #: epoch are free, and writes made under one are refused.
    epoch: int = 0


class PoolRow(SQLModel, table=True):
    """What the nodes share about a pool beyond its executions: the service's
    ``Retry-After`` and the pace of ``max_per_second``. (A task without a pool keeps its
    ``Retry-After`` on its own row: ``TaskRow.held_back_until``.)"""

    __tablename__: ClassVar[str] = "pool"

    name: str = Field(primary_key=True, max_length=210)
    #: No trigger of the pool leaves before this (a 429/503 with ``Retry-After``).
    held_back_until: datetime | None = Field(default=None, sa_type=UTCDateTime)
    #: The next moment a trigger of the pool may leave under ``max_per_second``.
    next_trigger_at: datetime | None = Field(default=None, sa_type=UTCDateTime)


class AuditRow(SQLModel, table=True):
    """Who did what through the API, or what a config load changed (DESIGN.md, "Audit")."""

    __tablename__: ClassVar[str] = "audit"
    __table_args__ = (
        sa.Index("ix_audit_at", "at"),
        sa.Index("ix_audit_actor_id", "actor", "id"),
        sa.Index("ix_audit_task_id", "task", "id"),
    )

    id: int | None = Field(default=None, primary_key=True)
    at: datetime = Field(sa_type=UTCDateTime)
    #: The caller's name, ``anonymous``, ``unknown`` or ``config``.
    actor: str = Field(max_length=100)
    action: str = Field(max_length=40)
    #: The task or execution acted on (or the path of a refused request).
    target: str = Field(default="", max_length=300)
    #: The task concerned, where known (for ``?task=``).
    task: str | None = Field(default=None, max_length=200)
    #: The HTTP status answered; None for a config change.
    status: int | None = None
    remote: str | None = Field(default=None, max_length=100)
    #: More, as JSON: a config change's fields, old and new.
    detail: Any = Field(default=None, sa_type=sa.JSON(none_as_null=True), nullable=True)


class SettingRow(SQLModel, table=True):
    """Values the cluster shares, such as the generated callback secret."""

    __tablename__: ClassVar[str] = "setting"

    key: str = Field(primary_key=True, max_length=100)
    value: str = Field(sa_type=sa.Text)


metadata = SQLModel.metadata
task_table: sa.Table = TaskRow.__table__  # type: ignore[attr-defined]
execution_table: sa.Table = ExecutionRow.__table__  # type: ignore[attr-defined]
step_table: sa.Table = ExecutionStepRow.__table__  # type: ignore[attr-defined]
node_table: sa.Table = NodeRow.__table__  # type: ignore[attr-defined]
setting_table: sa.Table = SettingRow.__table__  # type: ignore[attr-defined]
pool_table: sa.Table = PoolRow.__table__  # type: ignore[attr-defined]
audit_table: sa.Table = AuditRow.__table__  # type: ignore[attr-defined]
