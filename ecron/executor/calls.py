"""Which call an execution is on, and under which settings: the spec of its task (from the
loaded config, or kept for a task a reload removed while it ran), the header context of
the call in flight (``core.in_flight``: the execution itself, or its current step), and
the cadence ``core.next_action`` follows it at."""

from __future__ import annotations

import time
from collections.abc import Callable, Container, Mapping
from datetime import datetime, timedelta

from ecron.config.model import CallSettings, TaskSpec
from ecron.core import Execution, TriggerSent, in_flight
from ecron.core.next import Cadence, cancel_grace
from ecron.errors import EcronError
from ecron.executor.http import CallContext
from ecron.executor.recent import Recent
from ecron.planning import trigger_sent

#: Cadences kept at most: one per call settings of a loaded spec (a task, each step), so a
#: few reloads' worth.
KNOWN_CADENCES = 10_000
#: The cadence of an execution whose call is not followed (claimed, ended): never read.
UNFOLLOWED = Cadence(timedelta(0), False, timedelta(0), timedelta(0))


class UnknownTask(EcronError):
    """An execution's task is in neither this node's config nor its memory."""

    def __init__(self, task: str) -> None:
        self.task = task
        super().__init__(f"task {task!r} is not in this node's config")


class Calls:
    """Task specs by name, and the call of each execution."""

    def __init__(
        self, specs: Mapping[str, TaskSpec], ticks: Callable[[], float] = time.monotonic
    ) -> None:
        self.specs = specs
        #: Specs of tasks removed by a reload while executions of them were in flight.
        self.retired: dict[str, TaskSpec] = {}
        #: The call of each execution and step in flight, while it is polled.
        self._known: Recent[
            tuple[str, int | None, datetime | None], tuple[TaskSpec, CallSettings, CallContext]
        ] = Recent(ticks)
        self._cadences: dict[int, tuple[CallSettings, Cadence]] = {}

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
        step = in_flight(execution).step
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
            trigger_kind=execution.trigger_kind.value,
        )
        call = spec.call(number)
        self._known.put(key, (spec, call, ctx))
        return call, ctx

    def cadence_of(self, execution: Execution) -> Cadence:
        """The cadence of the call in flight of ``execution`` (``UnknownTask`` when this
        node knows none of its task)."""
        return self.cadence(self.call_of(execution)[0])

    def cadence_for(self, execution: Execution | None, held: Container[str]) -> Cadence:
        """The cadence ``core.next_action`` follows ``execution`` at: its call in flight's;
        none needed for one that is not active. A node that does not know the task can
        follow only what it does not hold (a pushed report about another node's execution):
        ``UnknownTask`` for one in ``held``."""
        if execution is None or not execution.is_active:
            return UNFOLLOWED
        try:
            return self.cadence(self.call_of(execution)[0])
        except UnknownTask:
            if execution.eid in held:
                raise
            return UNFOLLOWED

    def cadence(self, call: CallSettings) -> Cadence:
        """What ``core.next_action`` needs of ``call``'s settings (made once per settings)."""
        known = self._cadences.get(id(call))
        if known is not None and known[0] is call:
            return known[1]
        cadence = Cadence(
            poll_interval=call.poll_interval,
            pushed=call.pushed,
            heartbeat_timeout=call.heartbeat_timeout,
            cancel_grace=cancel_grace(call.request_timeout),
        )
        if len(self._cadences) >= KNOWN_CADENCES:
            self._cadences.clear()
        self._cadences[id(call)] = (call, cadence)
        return cadence

    def trigger_sent(self, execution: Execution) -> TriggerSent:
        """The event for the trigger of the call in flight (see ``planning.trigger_sent``)."""
        return trigger_sent(execution, self.spec_of(execution.task))

    def retire(self, removed: Mapping[str, TaskSpec], running: set[str]) -> None:
        """Keep the specs of tasks a reload removed, for their executions still held."""
        self.retired.update({name: spec for name, spec in removed.items() if name in running})
