"""Bad tokens, counted per remote address (DESIGN.md, "Audit"): past
``bad_tokens_per_minute`` (``MAX_BAD_TOKENS`` unless set) within a minute, the address is
answered 429 with ``Retry-After`` until that minute ends, whatever token it sends, so that
guessing stops there and a client looping on a stale token backs off.

The minute starts at an address's first bad token. Behind a reverse proxy every caller has
the proxy's address, so one of them looping on a bad token holds the others back for the
rest of that minute: limit clients at the proxy (docs/security.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta

#: Bad tokens of one address within ``WINDOW`` before it is answered 429, by default.
MAX_BAD_TOKENS = 30
WINDOW = timedelta(minutes=1)
#: Addresses counted at once, at most (past it, the oldest count is forgotten).
MAX_ADDRESSES = 10_000


@dataclass(slots=True)
class _Count:
    until: datetime
    bad: int = 0


class BadTokens:
    """The bad tokens of each remote address in its current minute."""

    def __init__(self, most: int = MAX_BAD_TOKENS) -> None:
        #: Bad tokens an address may send within its minute.
        self.most = most
        self._counts: dict[str | None, _Count] = {}

    def wait(self, remote: str | None, now: datetime) -> int | None:
        """The seconds ``remote`` must wait (``Retry-After``, 1 at least) when it has sent
        ``most`` bad tokens in its minute; None when it may ask."""
        count = self._counts.get(remote)
        if count is None:
            return None
        if now >= count.until:
            del self._counts[remote]
            return None
        if count.bad < self.most:
            return None
        return max(1, math.ceil((count.until - now).total_seconds()))

    def bad(self, remote: str | None, now: datetime) -> None:
        """``remote`` sent a missing or wrong token."""
        count = self._counts.get(remote)
        if count is None or now >= count.until:
            if count is None and len(self._counts) >= MAX_ADDRESSES:
                del self._counts[next(iter(self._counts))]
            count = self._counts[remote] = _Count(now + WINDOW)
        count.bad += 1
