"""What this node holds: the newest state of every execution it has claimed (ahead, waiting
to start, or active), with an index of the active ones per task; the node's lease it
holds them under (``lease``: one epoch for all of them, DESIGN.md "Scale"); and until when
that lease is known to run (``confirmed``: what a node woken from a pause waits for before
it sends anything). Memory only, no I/O."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import Any

from ecron.core import ACTIVE, Execution, Lease


class Held(Mapping[str, Execution]):
    """Executions by eid; ``remember`` keeps the newest version, ``forget`` lets one go."""

    def __init__(self, node: str = "") -> None:
        self._by_eid: dict[str, Execution] = {}
        self._active: dict[str, set[str]] = {}
        #: The node's lease everything here is held under (``Leases`` takes it at start and
        #: again after losing it: every write names it, every claim is stamped with it).
        self.lease = Lease(node, 0)
        #: Until when the lease runs at least: the last renewal that landed, counted from
        #: before it left (``Leases.run``); None while no renewal loop runs.
        self.renewed_until: datetime | None = None
        self._round = asyncio.Event()
        #: Set when a write was refused by the lease it was made under (the node's lease
        #: was fenced, or taken again since): the lease is checked at once, not at the next
        #: round (``Leases.run`` waits on it).
        self.lease_doubted = asyncio.Event()

    def __getitem__(self, eid: str) -> Execution:
        return self._by_eid[eid]

    def get(self, eid: str, default: Any = None) -> Any:  # Mapping's own is slow
        """The execution held under ``eid``, or ``default``."""
        return self._by_eid.get(eid, default)

    def __contains__(self, eid: object) -> bool:
        return eid in self._by_eid

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_eid)

    def __len__(self) -> int:
        return len(self._by_eid)

    def hold(self, execution: Execution) -> bool:
        """Hold ``execution`` as it is now (a claim, a takeover, a new run); False when it is
        not held under this node's lease as it is now (claimed under an older epoch, since
        lost): the database holds it for nobody then, and whoever takes it over drives it."""
        epoch = execution.owner_epoch
        if epoch is not None and epoch != self.lease.epoch:
            return False
        previous = self._by_eid.get(execution.eid)
        self._by_eid[execution.eid] = execution
        self._index(previous, execution)
        return True

    def remember(self, stored: Execution) -> None:
        """A newer stored state of an execution held here (a final one is let go)."""
        current = self._by_eid.get(stored.eid)
        if current is None:
            return
        if stored.is_final:
            self.forget(stored.eid)
        elif stored.version >= current.version:
            self._by_eid[stored.eid] = stored
            self._index(current, stored)

    def forget(self, eid: str, fence: int | None = None) -> Execution | None:
        """Stop holding ``eid``; what was held, if anything. With ``fence``, only the lease
        of that fence is let go: an execution this node took again since (a newer fence) is
        kept."""
        execution = self._by_eid.get(eid)
        if execution is None or (fence is not None and execution.fence != fence):
            return None
        del self._by_eid[eid]
        self._index(execution, None)
        return execution

    def renewed(self, until: datetime | None) -> None:
        """A renewal round ended (``Leases.run``): ``until`` when it landed (what it lost is
        let go already), None when it failed; whoever waits in ``confirmed`` looks again."""
        if until is not None:
            self.renewed_until = until
        self._round.set()
        self._round = asyncio.Event()

    def doubt_lease(self) -> None:
        """A write made under this node's lease was refused with its row unchanged: the
        lease may be lost (fenced by a node that found it run out); check it now."""
        self.lease_doubted.set()

    async def confirmed(self, now: datetime) -> None:
        """Before a call about an execution held here leaves: when this node's leases may have
        run out since their last renewal (the node was paused: a GC, a VM migration, a
        laptop lid, SIGSTOP), wait for the renewal round that follows, which lets go of what
        another node took over meanwhile (or of everything, when it fails past the leases).
        The caller then sends only for what it still holds."""
        if self.renewed_until is not None and now >= self.renewed_until:
            await self._round.wait()

    def active_of(self, task: str) -> set[str]:
        """The eids of ``task``'s active executions held here."""
        return self._active.get(task, set())

    def _index(self, old: Execution | None, new: Execution | None) -> None:
        was = old is not None and old.status in ACTIVE
        now = new is not None and new.status in ACTIVE
        if was == now:
            return
        execution = new or old
        assert execution is not None
        if now:
            self._active.setdefault(execution.task, set()).add(execution.eid)
        else:
            eids = self._active.get(execution.task)
            if eids is not None:
                eids.discard(execution.eid)
                if not eids:
                    del self._active[execution.task]
