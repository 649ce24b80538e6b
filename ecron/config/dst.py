"""A task's ``dst``: what a fixed-time cron job does across daylight saving time changes
(docs/configuration.md, "Daylight saving time"; the rule itself is ``ecron.daylight``)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from ecron.daylight import DEFAULT_POLICY, DstPolicy, Fold, Gap


class DstSettings(BaseModel):
    """``dst: {gap: shift | skip | jump, fold: first | last | both}``.

    Only a cron job whose second, minute and hour are all fixed is affected; on any other
    schedule (a job by the clock, ``every``, ``after``, ``at``) it is accepted and does
    nothing, so one policy can be written for every task of a file.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: A wall time the clock skips: fired shifted by the gap, skipped that day, or fired at
    #: the moment of the jump (Vixie cron).
    gap: Literal["shift", "skip", "jump"] = "shift"
    #: A wall time the clock repeats: fired at its first occurrence, its last, or both.
    fold: Literal["first", "last", "both"] = "first"

    @property
    def policy(self) -> DstPolicy:
        """The policy, for the fire-time math."""
        return DstPolicy(Gap(self.gap), Fold(self.fold))


def dst_policy(settings: DstSettings | None) -> DstPolicy:
    """The policy of a task's ``dst`` (the default when it sets none)."""
    return DEFAULT_POLICY if settings is None else settings.policy
