"""Leases: what this node holds, and for how long (DESIGN.md, "Scale").

One component holds every lease rule: claiming due fire times (many per transaction, this
node's share of them), renewing at half the TTL, letting go, taking over what nobody holds,
and the patrol's stale force-claim.

Two lengths of lease:

- a fire time claimed ahead (SCHEDULED) is held until its start plus ``CLAIM_GRACE``: a
  node that dies before starting it costs its own claims under a second, not ``lease_ttl``
  ("A dead node costs its own work only"); another node takes it over then and triggers
  it with the same eid (the service dedupes on it);
- a started execution is held for ``lease_ttl``, renewed at half of it; a dead node's are
  adopted by polling once they expire, never triggered again.
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Callable
from datetime import datetime, timedelta

import structlog

from ecron.clock import Clock, iso
from ecron.config.model import DaemonSettings
from ecron.core import FINAL, Execution, Status, due_at
from ecron.executor.held import Held
from ecron.metrics import Metrics
from ecron.store.base import Store
from ecron.store.records import Claimed, Planner

log = structlog.get_logger(__name__)

#: A claimed, never started fire time is held this long past its start.
CLAIM_GRACE = timedelta(milliseconds=500)
#: How often expired leases are looked for: claims of a dead node are taken over within
#: ``CLAIM_GRACE`` plus this much after their start (so within a second: the next fire time
#: of a task every second still comes after it).
TAKEOVER_EVERY = timedelta(milliseconds=250)
#: At most this many tasks are claimed, or executions taken over, in one transaction.
CLAIM_BATCH = 1000
#: Up to this many due tasks are claimed at once whatever the number of nodes; above it, a
#: node claims its share (due tasks / live nodes) per round, so that the nodes split the
#: work instead of the first one awake taking it all.
SMALL_CLAIM = 5


class Leases:
    """Claims, renewals, releases and takeovers for one node; see the module docstring."""

    def __init__(
        self,
        *,
        store: Store,
        held: Held,
        clock: Clock,
        settings: DaemonSettings,
        node_id: str,
        metrics: Metrics,
    ) -> None:
        self.store = store
        self.held = held
        self.clock = clock
        self.settings = settings
        self.node_id = node_id
        self.metrics = metrics
        #: Nodes with a recent heartbeat (this one included).
        self.live_nodes = 1
        self._next_takeover: datetime | None = None
        self._next_own_sweep: datetime | None = None
        self._stopping = asyncio.Event()
        #: The tasks saying why leases were lost (``_say_lost_aside``).
        self._telling: set[asyncio.Task[None]] = set()

    # -- lease lengths --------------------------------------------------------------------

    def claim_until(self, start: datetime) -> datetime:
        """The lease of a fire time claimed ahead, that starts at ``start``."""
        return start + CLAIM_GRACE

    def full_until(self, now: datetime) -> datetime:
        """The lease of a started execution, from ``now``."""
        return now + self.settings.lease_ttl

    def _lease_for(self) -> Callable[[Execution], datetime]:
        """The lease of each execution taken over, counted from when it is written (the
        clock is read then, inside the transaction): a round's ``now`` may be seconds old by
        the time its transaction lands (the database was away and it was retried), and a
        lease counted from it would already be running out."""

        def lease(execution: Execution) -> datetime:
            now = self.clock.now()
            if execution.status is Status.SCHEDULED:
                return self.claim_until(max(now, due_at(execution)))
            return self.full_until(now)

        return lease

    # -- claiming -------------------------------------------------------------------------

    async def claim_fires(
        self, now: datetime, plan: Planner, room: int | None = None
    ) -> tuple[Claimed, bool]:
        """Claim this node's share of the fire times due before ``now + prefetch``; the
        claim, and whether to come back at once: the share was full (more may be due) and
        no other node is alive to take them. With other nodes, the next share waits for
        the next tick, so that one node awake first does not take every fire time.

        While some task's fire time is already due (late: not claimed ahead), at most
        ``room`` tasks are claimed: what this node's workers can take up now, so that a
        node that fell behind takes on no more than it can start (backpressure)."""
        horizon = now + self.settings.prefetch
        # A read first: most rounds find nothing due, and then take no write lock.
        due = await self.store.count_due(horizon, None if self.live_nodes > 1 else 1)
        if due == 0:
            return Claimed([], 0, 0), False
        share = CLAIM_BATCH
        if self.live_nodes > 1:
            split = due if due <= SMALL_CLAIM else -(-due // self.live_nodes)
            share = min(CLAIM_BATCH, split)
        if room is not None and room < share and await self.store.count_due(now, 1):
            share = room
            if share == 0:
                return Claimed([], 0, 0), False
        claimed = await self.store.claim_due_fires(horizon, share, plan)
        self.metrics.claims.labels(kind="fire").inc(len(claimed.executions))
        full = claimed.read == share and claimed.advanced > 0
        return claimed, full and self.live_nodes == 1

    def takeover_due(self, now: datetime) -> bool:
        """True when it is time to look for expired leases again."""
        return self._next_takeover is None or now >= self._next_takeover

    async def take_over(self, now: datetime, known: Callable[[str], bool]) -> list[Execution]:
        """Take the executions nobody holds (a dead node's, a released one's, this node's
        own from before a restart) of the tasks this node ``known``s."""
        self._next_takeover = now + TAKEOVER_EVERY
        own_too = self._next_own_sweep is None or now >= self._next_own_sweep
        if own_too:  # its own from before a restart, or let go when renewals failed
            self._next_own_sweep = now + self.settings.lease_ttl / 2
        taken = await self.store.claim_runnable(
            self.node_id,
            now,
            self._lease_for(),
            CLAIM_BATCH,
            skip=self.held if own_too else None,
        )
        mine = [e for e in taken if known(e.task)]
        strangers = [e.eid for e in taken if not known(e.task)]
        if strangers:
            await self.store.release_leases(self.node_id, strangers)
        self.metrics.claims.labels(kind="takeover").inc(len(mine))
        return mine

    async def force_claim(self, eids: list[str], now: datetime) -> list[Execution]:
        """Take the leases of ``eids`` whoever holds them (stale executions)."""
        taken = await self.store.force_claim(self.node_id, eids, self.full_until(now))
        self.metrics.claims.labels(kind="stale").inc(len(taken))
        return taken

    # -- keeping and letting go -----------------------------------------------------------

    async def renew(self) -> list[str]:
        """Extend the leases of this node's active executions and of the runs it holds that
        wait to start, by ``lease_ttl`` from now (the clock read as the renewal leaves, not
        at the round's start); the eids it lost."""
        held = self.held.renewed_eids()
        renewed = await self.store.renew_leases(
            self.node_id, held, self.full_until(self.clock.now())
        )
        return [eid for eid in held if eid not in renewed and eid in self.held]

    def _say_lost_aside(self, eids: list[str]) -> None:
        """``_say_lost`` in a task of its own (the renewal loop never waits on its reads)."""
        telling = asyncio.create_task(self._say_lost(eids), name="ecron-lease-lost")
        self._telling.add(telling)
        telling.add_done_callback(self._telling.discard)

    async def _say_lost(self, eids: list[str]) -> None:
        """Say why each lease a renewal did not return is gone (it was let go already):
        another node holds the execution (``lease_lost``, a warning, counted in
        ``ecron_leases_lost``), or it ended meanwhile by a report this node held no lease
        for: a callback, a queue message or a person's cancel answered by another node
        (``execution_ended_elsewhere``). When the row cannot be read, ``lease_lost``."""
        for eid in eids:
            try:
                row = await self.store.get_execution(eid)
            except Exception:
                row = None
            if row is not None and row.status in FINAL:
                log.info(
                    "execution_ended_elsewhere",
                    execution_id=eid,
                    task=row.task,
                    status=str(row.status),
                )
            else:
                log.warning("lease_lost", execution_id=eid)
                self.metrics.leases_lost.inc()

    async def release_all(self) -> int:
        """Give every lease back (clean shutdown), so that another node adopts at once."""
        held = list(self.held)
        await self.store.release_leases(self.node_id, held)
        return len(held)

    def _let_go(self, eids: list[str]) -> None:
        """This node no longer holds ``eids`` (their leases were lost, or lapsed): whatever
        was planned for them is dropped when it comes due (the engine drives only what is
        held)."""
        for eid in eids:
            self.held.forget(eid)

    async def align_clock(self, readings: int = 1) -> None:
        """Read the database's clock ``readings`` times, so that this node's decisions are
        made on it (see ``Clock``): at start a few, so that one slow round trip (a loaded
        machine) does not set the offset the first leases are written with."""
        for _ in range(readings):
            self.clock.align(await self.store.read_clock(self.clock.ticks))

    async def _keep_alive(self) -> list[str]:
        """One round: the leases renewed (first: they cannot wait), the database's clock
        read, the heartbeat, the live nodes counted; the eids lost."""
        lost = await self.renew()
        await self.align_clock()
        now = self.clock.now()
        await self.store.heartbeat(self.node_id, now)
        self.live_nodes = await self.store.live_nodes(now - self.settings.lease_ttl)
        return lost

    async def run(self) -> None:
        """Heartbeat and lease renewal at half the lease TTL, until cancelled. A lease not
        renewed is let go; when the database cannot be reached, or answers too slowly, for
        this node's leases to be renewed before they run out, it lets go of everything at
        that moment (another node may take over) and says so (``leases_expired_unrenewed``);
        a renewal that lands later keeps nothing it let go. Each round's end is told to
        ``Held`` (``renewed``): a node woken from a pause longer than its leases sends
        nothing before the round after it has let go of what it lost."""
        interval = self.settings.lease_ttl.total_seconds() / 2
        valid_until = self.full_until(self.clock.now())
        self.held.renewed(valid_until)
        try:
            while not await self.clock.wait(self._stopping, interval):
                started = self.clock.now()
                if started >= valid_until:
                    self._say_late(started, valid_until)
                try:
                    lost = await self._keep_alive_within(valid_until, started)
                except Exception:
                    log.exception("lease_renewal_failed", leases=len(self.held))
                    if self.clock.now() >= valid_until:
                        self._lapse("renewal_failed", valid_until)
                    self.held.renewed(None)
                    continue
                valid_until = self.full_until(started)
                if lost:
                    self._let_go(lost)
                self.held.renewed(valid_until)
                if lost:  # why, read aside: the next round does not wait for it
                    self._say_lost_aside(lost)
        finally:  # no round comes any more: nobody waits for one (the node is stopping)
            self.held.renewed_until = None
            self.held.renewed(None)
            for telling in self._telling:
                telling.cancel()

    async def _keep_alive_within(self, valid_until: datetime, started: datetime) -> list[str]:
        """One round (``_keep_alive``), begun at ``started``; should it still be under way
        when the leases run out (``valid_until``), they are let go then, not when it ends.
        The eids lost; raises what the round raised."""
        done = asyncio.Event()
        keeping = asyncio.create_task(self._keep_alive())
        keeping.add_done_callback(lambda _: done.set())
        left = (valid_until - started).total_seconds()
        try:
            if left > 0 and not await self.clock.wait(done, left):
                self._lapse("renewal_late", valid_until)
            await done.wait()
        finally:
            keeping.cancel()  # done by now, unless the node is stopping
        return keeping.result()

    def _say_late(self, started: datetime, valid_until: datetime) -> None:
        """A round began only after the leases it renews had run out: this node's loop was
        held (a pause, an overloaded machine), so another node may have taken some over. The
        round renews what is still this node's and lets go of the rest (``lease_lost``)."""
        if self.held:
            late = (started - valid_until).total_seconds()
            log.warning(
                "lease_renewal_late",
                held=len(self.held),
                late_seconds=round(late, 3),
                at=iso(valid_until),
            )

    def _lapse(self, why: str, expired_at: datetime) -> None:
        """Every lease of this node ran out unrenewed: let go of everything, and say so."""
        if self.held:
            log.error(
                "leases_expired_unrenewed", released=len(self.held), reason=why, at=iso(expired_at)
            )
            self.metrics.leases_lost.inc(len(self.held))
        self._let_go(list(self.held))

    def stop(self) -> None:
        """End the renewal loop after the renewal under way, if any."""
        self._stopping.set()

    async def register(self) -> None:
        """Say this node is alive (at start)."""
        now = self.clock.now()
        await self.store.heartbeat(self.node_id, now, host=socket.gethostname(), pid=os.getpid())
        self.live_nodes = await self.store.live_nodes(now - self.settings.lease_ttl)
