"""The engine's parts wired together, once: what the daemon runs and the tests drive.

Wiring goes down: each part is built after what it calls, and gets it in its constructor;
none sets a hook on another afterwards, so the call graph is the import graph. The
callables still handed down (the scheduler's ``Wakeup``, rung when there is new work for
it; the writer's ``on_lost``; the alert of the patrol's checks) are named, with why, in
docs/architecture.md.

    Patrol ─────────────┬──▶ Commands ──┐
    Scheduler ──────────┤               ▼
    Daemon ─────────────┴──────────▶ Engine ──▶ Starter ──▶ Starts ──▶ Recorder ──▶ Retries
                                       │ └──▶ Bookkeeping (ends: counts, chains)
                                       └──▶ Executor (timetable, hand-out) · Performer (HTTP)
    Leases (claims, renewals, takeover) ◀── Scheduler, Starts, Patrol
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ecron.bookkeeping import Bookkeeping
from ecron.clock import Clock, Wakeup
from ecron.commands import Commands
from ecron.config.model import DaemonSettings, TaskSpec
from ecron.config.rules import PoolSpec
from ecron.engine import Engine
from ecron.executor.calls import Calls
from ecron.executor.claimant import Claimant
from ecron.executor.held import Held
from ecron.executor.http import HttpCaller
from ecron.executor.recorder import Recorder
from ecron.executor.retries import Retries
from ecron.leases import CLAIM_GRACE, Leases
from ecron.metrics import Metrics
from ecron.notify import Notifier
from ecron.patrol import Patrol
from ecron.scheduler import Scheduler
from ecron.starts import Starts
from ecron.store.base import Store


@dataclass(frozen=True, slots=True)
class Parts:
    """One node's engine and the loops around it."""

    recorder: Recorder
    engine: Engine
    leases: Leases
    bookkeeping: Bookkeeping
    scheduler: Scheduler
    commands: Commands
    patrol: Patrol
    #: What this node holds (the engine's, the leases', its claims'), and its metrics: what
    #: the daemon and the tests read of it.
    held: Held
    metrics: Metrics

    @classmethod
    def build(
        cls,
        *,
        store: Store,
        caller: HttpCaller,
        clock: Clock,
        settings: DaemonSettings,
        node_id: str,
        specs: Mapping[str, TaskSpec],
        metrics: Metrics | None = None,
        notifier: Notifier | None = None,
        pools: Mapping[str, PoolSpec] | None = None,
    ) -> Parts:
        """Wire the parts of one node over ``store`` and ``caller``, bottom up."""
        metrics = metrics or Metrics()
        wakeup, held = Wakeup(), Held(node_id)
        claimant = Claimant(node=node_id, prefetch=settings.prefetch, grace=CLAIM_GRACE, held=held)
        leases = Leases(
            store=store,
            held=held,
            clock=clock,
            settings=settings,
            node_id=node_id,
            metrics=metrics,
            scheduler_wakeup=wakeup,
        )
        bookkeeping = Bookkeeping(
            store=store,
            clock=clock,
            settings=settings,
            node_id=node_id,
            specs=specs,
            metrics=metrics,
            scheduler_wakeup=wakeup,
            claimant=claimant,
            notifier=notifier,
        )
        node = (store, clock, settings, node_id, held, metrics)
        recorder, engine = cls._engine(node, caller, leases, bookkeeping, wakeup, specs, claimant)
        return cls._around(
            recorder, engine, leases, bookkeeping, wakeup, node, (specs, pools or {})
        )

    @staticmethod
    def _engine(
        node: tuple[Store, Clock, DaemonSettings, str, Held, Metrics],
        caller: HttpCaller,
        leases: Leases,
        bookkeeping: Bookkeeping,
        wakeup: Wakeup,
        specs: Mapping[str, TaskSpec],
        claimant: Claimant,
    ) -> tuple[Recorder, Engine]:
        """The recorder (with the retries it writes with an end), the one start path, and
        the engine that drives them."""
        store, clock, settings, node_id, held, metrics = node
        calls = Calls(specs, clock.ticks)
        retries = Retries(store=store, specs=specs, clock=clock, claimant=claimant)
        recorder = Recorder(
            store=store,
            held=held,
            calls=calls,
            clock=clock,
            metrics=metrics,
            node_id=node_id,
            retries=retries,
        )
        starts = Starts(store=store, recorder=recorder, leases=leases, clock=clock, specs=specs)
        engine = Engine(
            recorder=recorder,
            held=held,
            calls=calls,
            store=store,
            metrics=metrics,
            node_id=node_id,
            caller=caller,
            clock=clock,
            starts=starts,
            bookkeeping=bookkeeping,
            scheduler_wakeup=wakeup,
            workers=settings.poll_workers,
        )
        return recorder, engine

    @classmethod
    def _around(
        cls,
        recorder: Recorder,
        engine: Engine,
        leases: Leases,
        bookkeeping: Bookkeeping,
        wakeup: Wakeup,
        node: tuple[Store, Clock, DaemonSettings, str, Held, Metrics],
        config: tuple[Mapping[str, TaskSpec], Mapping[str, PoolSpec]],
    ) -> Parts:
        """The parts that call the engine: the scheduler, the commands, the patrol."""
        store, clock, settings, node_id, held, metrics = node
        specs, pools = config
        scheduler = Scheduler(
            store=store,
            engine=engine,
            leases=leases,
            bookkeeping=bookkeeping,
            clock=clock,
            settings=settings,
            node_id=node_id,
            specs=specs,
            wakeup=wakeup,
        )
        commands = Commands(
            store=store,
            engine=engine,
            bookkeeping=bookkeeping,
            clock=clock,
            node_id=node_id,
            specs=specs,
            scheduler_wakeup=wakeup,
            metrics=metrics,
            pools=pools,
            backfill_max_runs=settings.backfill_max_runs,
        )
        patrol = Patrol(
            store=store,
            commands=commands,
            engine=engine,
            leases=leases,
            bookkeeping=bookkeeping,
            clock=clock,
            settings=settings,
            node_id=node_id,
            specs=specs,
            metrics=metrics,
        )
        parts = (recorder, engine, leases, bookkeeping, scheduler, commands, patrol)
        return cls(*parts, held, metrics)
