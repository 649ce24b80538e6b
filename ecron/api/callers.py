"""The configured callers of the API (DESIGN.md, "Roles"), found by token: what the access
middleware asks, and what a reload replaces."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence
from dataclasses import dataclass

from ecron.config.callers import ApiCaller, Role


@dataclass(frozen=True, slots=True)
class Caller:
    """Who made a request: a configured caller, or ``anonymous`` where none is configured
    (then every call is allowed, as with one admin token)."""

    name: str
    role: Role


class Callers:
    """The configured callers, found by token in constant time (the digests of every token
    are compared, whichever matches, so neither which one nor its length shows)."""

    def __init__(self, callers: Sequence[ApiCaller]) -> None:
        self._known = _digests(callers)

    def replace(self, callers: Sequence[ApiCaller]) -> None:
        """From now on, these callers and no others (a reload: a token removed from the
        config is refused from the next request on). Whether a token is asked for at all
        does not change here: the daemon keeps its callers when a reload would leave none,
        or add some to a daemon that asked for none."""
        if bool(callers) != self.configured:
            raise ValueError("whether a token is asked for changes only at a restart")
        self._known = _digests(callers)

    @property
    def configured(self) -> bool:
        """Whether any token is asked for."""
        return bool(self._known)

    def find(self, authorization: str) -> Caller | None:
        """The caller an ``Authorization`` header names; None when none does."""
        scheme, _, value = authorization.partition(" ")
        digest = hashlib.sha256(value.strip().encode(errors="replace")).digest()
        found = None
        for known, caller in self._known:
            if hmac.compare_digest(digest, known):
                found = caller
        return found if scheme.lower() == "bearer" else None


def _digests(callers: Sequence[ApiCaller]) -> list[tuple[bytes, Caller]]:
    return [(hashlib.sha256(c.token.encode()).digest(), Caller(c.name, c.role)) for c in callers]
