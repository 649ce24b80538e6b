"""Rows to domain objects and back, at the store's boundary."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import fields
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import RowMapping

from ecron.config.model import TaskSpec
from ecron.core import Execution, Reason, Status, Step, TriggerKind, WaitingFor
from ecron.store.bulk import Kind
from ecron.store.records import TaskState
from ecron.store.tables import UTCDateTime, execution_table

#: Execution fields stored as columns of the same name (everything except ``steps``).
EXECUTION_COLUMNS = tuple(f.name for f in fields(Execution) if f.name != "steps")
STEP_COLUMNS = tuple(f.name for f in fields(Step))


def _kind(column: sa.Column[Any]) -> Kind:
    """How a column travels in a bulk statement (ecron.store.bulk), read off its type."""
    kind = column.type
    if isinstance(kind, UTCDateTime):
        return "time"
    if isinstance(kind, sa.JSON):
        return "json"
    if isinstance(kind, sa.Boolean):
        return "bool"
    if isinstance(kind, sa.Integer):
        return "int"
    if isinstance(kind, sa.Float):
        return "float"
    return "text"


#: Every execution column an ``Execution`` carries, and how it travels in bulk statements.
EXECUTION_KINDS: dict[str, Kind] = {
    name: _kind(execution_table.c[name]) for name in EXECUTION_COLUMNS
}


def execution_values(
    execution: Execution, columns: Sequence[str] = EXECUTION_COLUMNS
) -> dict[str, Any]:
    """The ``execution`` row's column values (of ``columns``), enums as their text."""
    values = {name: getattr(execution, name) for name in columns}
    if "status" in values:
        values["status"] = execution.status.value
    if "trigger_kind" in values:
        values["trigger_kind"] = execution.trigger_kind.value
    if "reason" in values:
        values["reason"] = None if execution.reason is None else execution.reason.value
    if "waiting_for" in values and execution.waiting_for is not None:
        values["waiting_for"] = execution.waiting_for.value
    return values


def step_values(eid: str, step: Step) -> dict[str, Any]:
    """The ``execution_step`` row's column values."""
    values = {name: getattr(step, name) for name in STEP_COLUMNS}
    values["eid"] = eid
    values["status"] = str(step.status)
    values["reason"] = None if step.reason is None else str(step.reason)
    return values


def to_execution(row: RowMapping | Mapping[str, Any], steps: Sequence[Step] = ()) -> Execution:
    """An ``Execution`` from its row and its steps."""
    values = {name: row[name] for name in EXECUTION_COLUMNS}
    values["status"] = Status(values["status"])
    values["trigger_kind"] = TriggerKind(values["trigger_kind"])
    values["reason"] = None if values["reason"] is None else Reason(values["reason"])
    if values["waiting_for"] is not None:
        values["waiting_for"] = WaitingFor(values["waiting_for"])
    values["progress"] = float(values["progress"])
    return Execution(**values, steps=tuple(steps))


def to_step(row: RowMapping | Mapping[str, Any]) -> Step:
    """A ``Step`` from its row."""
    values = {name: row[name] for name in STEP_COLUMNS}
    values["status"] = Status(values["status"])
    values["reason"] = None if values["reason"] is None else Reason(values["reason"])
    values["progress"] = float(values["progress"])
    return Step(**values)


#: Stored specs already validated, by their digest: a task list reads thousands of rows.
_SPECS: dict[str, TaskSpec] = {}
_SPECS_MAX = 100_000


def stored_spec(spec_hash: str, data: Any) -> TaskSpec:
    """The stored spec of digest ``spec_hash``, validated once per process."""
    spec = _SPECS.get(spec_hash)
    if spec is None:
        if len(_SPECS) >= _SPECS_MAX:
            _SPECS.clear()
        spec = _SPECS[spec_hash] = TaskSpec.model_validate(data)
    return spec


def to_task(row: RowMapping | Mapping[str, Any]) -> TaskState:
    """A ``TaskState`` from its row (the stored spec is validated once per digest)."""
    return TaskState(
        name=row["name"],
        spec=stored_spec(row["spec_hash"], row["spec"]),
        next_fire_at=row["next_fire_at"],
        last_end_at=row["last_end_at"],
        paused=row["paused"],
        paused_reason=row["paused_reason"],
        consecutive_failures=row["consecutive_failures"],
        retired=row["retired"],
        version=row["version"],
        updated_at=row["updated_at"],
        created_at=row["created_at"],
        last_success_at=row["last_success_at"],
        overdue_at=row["overdue_at"],
    )
