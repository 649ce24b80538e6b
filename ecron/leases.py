"""Leases: what this node holds, and for how long (DESIGN.md, "Scale").

One component holds every lease rule: the node's own lease (taken at start, renewed at half
the TTL in one statement whatever the node holds, taken again after it was lost), claiming
due fire times (many per transaction, this node's share of them), taking over what nobody
holds, and the patrol's stale force-claim.

Everything a node claims is held under its node lease (``core.Lease``: the node and the
epoch of its lease). Renewing it is one write per round, at 10 executions as at 50,000.
Whoever finds a node's lease run out fences it (raises its epoch) before taking anything
it held, so that node's renewal fails from then on: it lets go of everything, takes a new
lease (a new epoch) and takes back, by polling, what nobody else took. Every fenced write
names the lease it was made under and lands only while that lease is the node's.

A fire time claimed ahead (SCHEDULED) is also held by a claim of its own, until its start
plus ``CLAIM_GRACE``: a node that dies before starting it costs its own claims under a
second, not ``lease_ttl`` ("A dead node costs its own work only"); another node takes it
over then and triggers it with the same eid (the service dedupes on it). A started or
waiting execution leans on the node's lease alone: a dead node's are adopted by polling
once that lease runs out, never triggered again.
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Callable
from datetime import datetime, timedelta

import structlog

from ecron.clock import Clock, Wakeup, iso
from ecron.config.model import DaemonSettings
from ecron.core import Execution, Status, due_at
from ecron.executor.held import Held
from ecron.metrics import Metrics
from ecron.store.base import Store
from ecron.store.records import Adopted, Claimed, Planner

log = structlog.get_logger(__name__)

#: A claimed, never started fire time is held this long past its start.
CLAIM_GRACE = timedelta(milliseconds=500)
#: How often work nobody holds is looked for: claims of a dead node are taken over within
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
    """The node's lease, claims, takeovers and force-claims; see the module docstring."""

    def __init__(
        self,
        *,
        store: Store,
        held: Held,
        clock: Clock,
        settings: DaemonSettings,
        node_id: str,
        metrics: Metrics,
        scheduler_wakeup: Wakeup,
    ) -> None:
        self.store = store
        self.held = held
        #: Rung when the node took a new lease: what it held under the old one is taken
        #: back at once, not at the next takeover round.
        self.scheduler_wakeup = scheduler_wakeup
        self.clock = clock
        self.settings = settings
        self.node_id = node_id
        self.metrics = metrics
        #: Nodes with a live lease (this one included).
        self.live_nodes = 1
        self._next_takeover: datetime | None = None
        self._next_own_sweep: datetime | None = None
        self._stopping = asyncio.Event()
        #: Until when the lease taken at start runs (``register``).
        self._taken_until: datetime | None = None
        #: True from the moment the lease was lost (fenced, or run out unrenewed) until a new
        #: one is taken: meanwhile nothing is claimed or taken over.
        self.lost = False
        #: The latest end of the lease any renewal asked for (landed or not: one under way
        #: when the lease lapsed may land later): a lapsed lease is held by the database
        #: until then, so the node takes a new one (freeing what the old one held) only after.
        self._asked_until: datetime | None = None

    # -- lengths ----------------------------------------------------------------------------

    def claim_until(self, start: datetime) -> datetime:
        """The own claim of a fire time claimed ahead, that starts at ``start``."""
        return start + CLAIM_GRACE

    def lease_until(self, now: datetime) -> datetime:
        """The node's lease, renewed at ``now``."""
        return now + self.settings.lease_ttl

    def _claim_for(self) -> Callable[[Execution], datetime | None]:
        """The own claim of each execution taken over: a fire time claimed ahead and not
        waiting gets one, counted from when it is written (the clock is read then, inside
        the transaction: a round's ``now`` may be seconds old by the time its transaction
        lands); anything else leans on the node's lease (None)."""

        def claim(execution: Execution) -> datetime | None:
            if execution.status is Status.SCHEDULED and execution.waiting_for is None:
                return self.claim_until(max(self.clock.now(), due_at(execution)))
            return None

        return claim

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
        if self.lost:  # nothing is claimed under a lease that is no longer the node's
            return Claimed([], 0, 0), False
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

    # -- taking over ------------------------------------------------------------------------

    def takeover_due(self, now: datetime) -> bool:
        """True when it is time to look for work nobody holds again."""
        return self._next_takeover is None or now >= self._next_takeover

    async def take_over(self, now: datetime, known: Callable[[str], bool]) -> list[Adopted]:
        """Take the executions nobody holds (a dead node's, a released one's, this node's
        own from before a restart or a lost lease) of the tasks this node ``known``s, each
        with the node that held it before. A full batch brings the next round forward (a
        dead node's 50,000 are taken over in batches, one after the other)."""
        if self.lost:  # taken back once the node has a lease again
            return []
        own_too = self._next_own_sweep is None or now >= self._next_own_sweep
        if own_too:  # its own claims it did not start in time
            self._next_own_sweep = now + self.settings.lease_ttl / 2
        self._next_takeover = now + TAKEOVER_EVERY  # (a new lease taken meanwhile resets it)
        taken = await self.store.claim_runnable(
            self.held.lease,
            now,
            self._claim_for(),
            CLAIM_BATCH,
            skip=self.held if own_too else None,
        )
        if len(taken) >= CLAIM_BATCH:
            self._next_takeover = now
        mine = [a for a in taken if known(a.execution.task)]
        strangers = [a.execution.eid for a in taken if not known(a.execution.task)]
        if strangers:
            await self.store.release_leases(self.node_id, strangers)
        self.metrics.claims.labels(kind="takeover").inc(len(mine))
        return mine

    async def force_claim(self, eids: list[str], now: datetime) -> list[Execution]:
        """Take ``eids`` whoever holds them (stale executions)."""
        taken = await self.store.force_claim(self.held.lease, eids)
        self.metrics.claims.labels(kind="stale").inc(len(taken))
        return taken

    # -- the node's lease -------------------------------------------------------------------

    async def register(self) -> None:
        """Take this node's lease (at start): a new epoch, so whatever a process of the same
        node id held before is free from now on."""
        now = self.clock.now()
        until = self.lease_until(now)
        self.held.lease = await self.store.take_node_lease(
            self.node_id, now, until, host=socket.gethostname(), pid=os.getpid()
        )
        self._taken_until = self._asked_until = until
        self.live_nodes = await self.store.live_nodes(now)

    async def let_go(self) -> int:
        """Give the lease back (clean shutdown): everything held under it is free at once for
        another node to adopt; how many executions that was."""
        held = len(self.held)
        await self.store.let_go_node_lease(self.held.lease)
        return held

    async def align_clock(self, readings: int = 1) -> None:
        """Read the database's clock ``readings`` times, so that this node's decisions are
        made on it (see ``Clock``): at start a few, so that one slow round trip (a loaded
        machine) does not set the offset the first leases are written with."""
        for _ in range(readings):
            self.clock.align(await self.store.read_clock(self.clock.ticks))

    async def renew(self) -> bool:
        """One round: the lease renewed, the node shown alive, the database's clock read and
        the live nodes counted, in one statement; False when the lease was fenced."""
        now = self.clock.now()
        until = self.lease_until(now)
        self._asked_until = max(self._asked_until or until, until)
        renewal = await self.store.renew_node_lease(self.held.lease, now, until, self.clock.ticks)
        if renewal is None:
            return False
        self.clock.align(renewal.reading)
        self.live_nodes = renewal.live_nodes
        return True

    async def run(self) -> None:
        """Renew the lease at half its TTL, until cancelled. When the database cannot be
        reached, or answers too slowly, for the lease to be renewed before it runs out, the
        node lets go of everything at that moment (another node may take over) and says so
        (``leases_expired_unrenewed``); when a renewal finds the lease fenced (another node
        found it run out and took the node's work over), the same. Either way the old lease
        is never renewed again: the node takes a new one (a new epoch) first, claims and
        takes over nothing until it has, and its takeover then takes back, by polling, what
        nobody else took. Each round's end is told to ``Held`` (``renewed``): a node woken
        from a pause longer than its lease sends nothing before the round after it. A write
        refused by the lease it was made under brings the next round forward
        (``Held.doubt_lease``)."""
        interval = self.settings.lease_ttl.total_seconds() / 2
        valid_until = self._taken_until or self.lease_until(self.clock.now())
        self.held.renewed(valid_until)
        doubted = self.held.lease_doubted
        try:
            while True:
                await self.clock.wait(doubted, interval)  # a round, or a write doubts it
                doubted.clear()
                if self._stopping.is_set():
                    break
                valid_until = await self._round(valid_until)
        finally:  # no round comes any more: nobody waits for one (the node is stopping)
            self.held.renewed_until = None
            self.held.renewed(None)

    async def _round(self, valid_until: datetime) -> datetime:
        """One round of ``run``: the lease renewed, or (once lost) taken again; until when
        it runs now."""
        if self.lost:
            return await self._take_again(valid_until)
        started = self.clock.now()
        if started >= valid_until:
            self._say_late(started, valid_until)
        try:
            kept, lapsed = await self._keep_alive_within(valid_until, started)
        except Exception:
            log.exception("lease_renewal_failed", leases=len(self.held))
            if self.clock.now() < valid_until:
                self.held.renewed(None)
                return valid_until
            self._lapse("renewal_failed", valid_until)
            return await self._take_again(valid_until)
        if not kept:  # fenced: the old lease is over already, a new one can be taken now
            self._lapse("fenced", valid_until)
            self._asked_until = None
        if kept and not lapsed:
            valid_until = self.lease_until(started)
            self.held.renewed(valid_until)
            return valid_until
        return await self._take_again(valid_until)

    async def _take_again(self, valid_until: datetime) -> datetime:
        """After the lease was lost: take a new one (a new epoch); until when it runs. A
        lease that lapsed unfenced is first let run out by the database's clock (as long as
        the latest renewal asked for: the database may hold it until then), so what it held
        changes hands only once it ran out, as from a dead node. When the new lease cannot be
        taken, the node stays without (``lost``) and the next round tries again."""
        self.lost = True
        if self._asked_until is not None:
            left = (self._asked_until - self.clock.now()).total_seconds()
            if left > 0 and await self.clock.wait(self._stopping, left):
                return valid_until  # stopping: no new lease
        now = self.clock.now()
        try:
            lease = await self.store.take_node_lease(self.node_id, now, self.lease_until(now))
        except Exception:
            log.exception("node_lease_not_taken_again", node=self.node_id)
            self.held.renewed(None)
            return valid_until
        for eid in list(self.held):  # held under the old epoch (its end's retry, say): free now
            self.held.forget(eid)
        self.held.lease = lease
        self.lost = False
        self._next_takeover = None  # take back what nobody took, now
        self.scheduler_wakeup.ring()
        log.warning("node_lease_taken_again", node=self.node_id, epoch=self.held.lease.epoch)
        valid_until = self._asked_until = self.lease_until(now)
        self.held.renewed(valid_until)
        return valid_until

    async def _keep_alive_within(
        self, valid_until: datetime, started: datetime
    ) -> tuple[bool, bool]:
        """One round (``renew``), begun at ``started``; should it still be under way
        when the lease runs out (``valid_until``), everything is let go then, not when it
        ends. Whether the lease was kept, and whether it lapsed meanwhile; raises what the
        round raised."""
        done = asyncio.Event()
        keeping = asyncio.create_task(self.renew())
        keeping.add_done_callback(lambda _: done.set())
        left = (valid_until - started).total_seconds()
        lapsed = False
        try:
            if left > 0 and not await self.clock.wait(done, left):
                self._lapse("renewal_late", valid_until)
                lapsed = True
            await done.wait()
        finally:
            keeping.cancel()  # done by now, unless the node is stopping
        return keeping.result(), lapsed

    def _say_late(self, started: datetime, valid_until: datetime) -> None:
        """A round began only after the lease it renews had run out: this node's loop was
        held (a pause, an overloaded machine), so another node may have fenced the lease and
        taken its work over. The round finds out: renewed, nobody did, and the node keeps
        everything; fenced, it lets go of everything (``leases_expired_unrenewed``)."""
        if self.held:
            late = (started - valid_until).total_seconds()
            log.warning(
                "lease_renewal_late",
                held=len(self.held),
                late_seconds=round(late, 3),
                at=iso(valid_until),
            )

    def _lapse(self, why: str, expired_at: datetime) -> None:
        """This node's lease ran out unrenewed, or was fenced: let go of everything, and say
        so."""
        if self.held:
            log.error(
                "leases_expired_unrenewed", released=len(self.held), reason=why, at=iso(expired_at)
            )
            self.metrics.leases_lost.inc(len(self.held))
        for eid in list(self.held):
            self.held.forget(eid)

    def stop(self) -> None:
        """End the renewal loop after the renewal under way, if any."""
        self._stopping.set()
        self.held.lease_doubted.set()
