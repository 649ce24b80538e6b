"""Which call an execution is on, and under which settings: the spec of its task (from the
loaded config, or kept for a task a reload removed while it ran), and the header context of
the call in flight (the execution itself, or its current step)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from ecron.config.model import CallSettings, TaskSpec
from ecron.core import Execution, TriggerSent, current_step
from ecron.errors import EcronError
from ecron.executor.http import CallContext
from ecron.planning import trigger_sent

#: Call contexts kept at most (one per execution and step in flight, usually).
KNOWN_CALLS = 50_000


class UnknownTask(EcronError):
    """An execution's task is in neither this node's config nor its memory."""

    def __init__(self, task: str) -> None:
        self.task = task
        super().__init__(f"task {task!r} is not in this node's config")


class Calls:
    """Task specs by name, and the call of each execution."""

    def __init__(self, specs: Mapping[str, TaskSpec]) -> None:
        self.specs = specs
        #: Specs of tasks removed by a reload while executions of them were in flight.
        self.retired: dict[str, TaskSpec] = {}
        self._known: dict[
            tuple[str, int | None, datetime | None], tuple[TaskSpec, CallSettings, CallContext]
        ] = {}

    def spec_of(self, task: str) -> TaskSpec:
        """The spec ``task`` runs under; ``UnknownTask`` when this node knows none."""
        spec = self.specs.get(task) or self.retired.get(task)
        if spec is None:
            raise UnknownTask(task)
        return spec

    def knows(self, task: str) -> bool:
        """True when this node can drive executions of ``task``."""
        return task in self.specs or task in self.retired

    def call_of(self, execution: Execution) -> tuple[CallSettings, CallContext]:
        """The call settings and header context of the call in flight for ``execution``:
        the execution itself, or its current step (under the step's remote id). Asked at
        every poll; worked out again only when the step, the deadline or the spec moved."""
        spec = self.spec_of(execution.task)
        step = current_step(execution)
        number = None if step is None else step.number
        key = (execution.eid, number, execution.deadline)
        known = self._known.get(key)
        if known is not None and known[0] is spec:
            return known[1], known[2]
        ctx = CallContext(
            remote_id=execution.eid if step is None else step.remote_id,
            eid=execution.eid,
            task=execution.task,
            scheduled_at=execution.scheduled_at,
            deadline=execution.deadline,
            attempt=execution.attempt,
            resume_of=execution.resume_of,
            step_name=None if step is None else step.name,
            step_number=number,
            upstream=execution.upstream,
        )
        call = spec.call(number)
        if len(self._known) >= KNOWN_CALLS:
            self._known.clear()
        self._known[key] = (spec, call, ctx)
        return call, ctx

    def trigger_sent(self, execution: Execution) -> TriggerSent:
        """The event for the trigger of the call in flight (see ``planning.trigger_sent``)."""
        return trigger_sent(execution, self.spec_of(execution.task))

    def retire(self, removed: Mapping[str, TaskSpec], running: set[str]) -> None:
        """Keep the specs of tasks a reload removed, for their executions still held."""
        self.retired.update({name: spec for name, spec in removed.items() if name in running})
