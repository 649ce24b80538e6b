"""Rows to domain objects and back, at the store's boundary."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import fields
from typing import Any

from sqlalchemy.engine import RowMapping

from ecron.config.model import TaskSpec
from ecron.core import Execution, Reason, Status, Step, TriggerKind
from ecron.store.base import TaskState

#: Execution fields stored as columns of the same name (everything except ``steps``).
EXECUTION_COLUMNS = tuple(f.name for f in fields(Execution) if f.name != "steps")
STEP_COLUMNS = tuple(f.name for f in fields(Step))


def execution_values(execution: Execution) -> dict[str, Any]:
    """The ``execution`` row's column values."""
    values = {name: getattr(execution, name) for name in EXECUTION_COLUMNS}
    values["status"] = str(execution.status)
    values["trigger_kind"] = str(execution.trigger_kind)
    values["reason"] = None if execution.reason is None else str(execution.reason)
    return values


def changed_values(before: Execution, after: Execution) -> dict[str, Any]:
    """Only the columns that differ between ``before`` and ``after``."""
    old, new = execution_values(before), execution_values(after)
    return {name: value for name, value in new.items() if old[name] != value}


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
    values["progress"] = float(values["progress"])
    return Execution(**values, steps=tuple(steps))


def to_step(row: RowMapping | Mapping[str, Any]) -> Step:
    """A ``Step`` from its row."""
    values = {name: row[name] for name in STEP_COLUMNS}
    values["status"] = Status(values["status"])
    values["reason"] = None if values["reason"] is None else Reason(values["reason"])
    values["progress"] = float(values["progress"])
    return Step(**values)


def to_task(row: RowMapping | Mapping[str, Any]) -> TaskState:
    """A ``TaskState`` from its row (the stored spec is validated again)."""
    return TaskState(
        name=row["name"],
        spec=TaskSpec.model_validate(row["spec"]),
        next_fire_at=row["next_fire_at"],
        last_end_at=row["last_end_at"],
        paused=row["paused"],
        paused_reason=row["paused_reason"],
        consecutive_failures=row["consecutive_failures"],
        retired=row["retired"],
        version=row["version"],
    )
