"""The engine's parts wired together, once: what the daemon runs and the tests drive.

held ──────────────┐
Recorder (writes) ─┼── Executor (timing, workers: trigger, poll, cancel)
Calls (specs) ─────┘        ▲ start decisions
Leases (claims, renewals, takeover) ── Scheduler (claims, starts, takeovers)
Bookkeeping (ends: retries, failures in a row, alerts)
Commands (run now, cancel, report, resume, pause: what the API asks) ── Patrol (housekeeping)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ecron.bookkeeping import Bookkeeping
from ecron.clock import Clock
from ecron.commands import Commands
from ecron.config.model import DaemonSettings, TaskSpec
from ecron.executor.calls import Calls
from ecron.executor.held import Held
from ecron.executor.http import HttpCaller
from ecron.executor.recorder import Recorder
from ecron.executor.runner import Executor
from ecron.leases import Leases
from ecron.metrics import Metrics
from ecron.notify import Notifier
from ecron.patrol import Patrol
from ecron.scheduler import Scheduler
from ecron.store.base import Store
from ecron.store.writer import StateWriter


@dataclass(frozen=True, slots=True)
class Parts:
    """One node's engine."""

    recorder: Recorder
    executor: Executor
    leases: Leases
    bookkeeping: Bookkeeping
    scheduler: Scheduler
    commands: Commands
    patrol: Patrol

    @classmethod
    def build(
        cls,
        *,
        store: Store,
        writer: StateWriter,
        caller: HttpCaller,
        clock: Clock,
        settings: DaemonSettings,
        node_id: str,
        specs: Mapping[str, TaskSpec],
        metrics: Metrics | None = None,
        notifier: Notifier | None = None,
    ) -> Parts:
        """Wire the parts of one node over ``store``, ``writer`` and ``caller``."""
        metrics = metrics or Metrics()
        held = Held()
        recorder = Recorder(
            store=store,
            writer=writer,
            held=held,
            calls=Calls(specs),
            clock=clock,
            metrics=metrics,
            node_id=node_id,
        )
        executor = Executor(
            recorder=recorder, caller=caller, clock=clock, workers=settings.poll_workers
        )
        leases = Leases(
            store=store,
            held=held,
            clock=clock,
            settings=settings,
            node_id=node_id,
            metrics=metrics,
            due_of=recorder.due_of,
        )

        def forget(eids: list[str]) -> None:
            for eid in eids:
                executor.forget(eid)

        leases.on_lost = forget
        return cls._around(
            recorder,
            executor,
            leases,
            store=store,
            clock=clock,
            settings=settings,
            node_id=node_id,
            specs=specs,
            notifier=notifier,
        )

    @classmethod
    def _around(
        cls,
        recorder: Recorder,
        executor: Executor,
        leases: Leases,
        *,
        store: Store,
        clock: Clock,
        settings: DaemonSettings,
        node_id: str,
        specs: Mapping[str, TaskSpec],
        notifier: Notifier | None,
    ) -> Parts:
        """The parts around the executor: bookkeeping, scheduler, commands, patrol."""
        bookkeeping = Bookkeeping(
            store=store,
            executor=executor,
            clock=clock,
            settings=settings,
            node_id=node_id,
            specs=specs,
            notifier=notifier,
        )
        recorder.on_finished = bookkeeping.finished
        recorder.follow_ups = bookkeeping.with_end
        scheduler = Scheduler(
            store=store,
            executor=executor,
            leases=leases,
            bookkeeping=bookkeeping,
            clock=clock,
            settings=settings,
            node_id=node_id,
            specs=specs,
        )
        commands = Commands(
            store=store,
            executor=executor,
            bookkeeping=bookkeeping,
            clock=clock,
            node_id=node_id,
            specs=specs,
            wake=scheduler.wake,
        )
        patrol = Patrol(
            store=store,
            commands=commands,
            executor=executor,
            leases=leases,
            bookkeeping=bookkeeping,
            clock=clock,
            settings=settings,
            node_id=node_id,
            specs=specs,
        )
        return cls(recorder, executor, leases, bookkeeping, scheduler, commands, patrol)
