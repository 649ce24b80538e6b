"""What this node's claims are made of (``planning.Claim``): the node, how far ahead it
claims (``prefetch``), the grace of a fire time claimed ahead, and the epoch of the lease
everything it holds leans on (``Held.lease``), read at each claim. The retries written with
an end (``Retries``), book-keeping's runs (chained runs, resumes) and the scheduler's fire
times are all claimed so."""

from __future__ import annotations

from datetime import datetime, timedelta

from ecron.executor.held import Held
from ecron.planning import Claim


class Claimant:
    """Makes this node's claims; see the module docstring."""

    def __init__(self, *, node: str, prefetch: timedelta, grace: timedelta, held: Held) -> None:
        self.node, self.prefetch, self.grace, self.held = node, prefetch, grace, held

    def claim(self, now: datetime) -> Claim:
        """This node's claim at ``now``, under its lease as it is now."""
        horizon = now + self.prefetch
        return Claim(self.node, now, horizon, self.grace, epoch=self.held.lease.epoch)
