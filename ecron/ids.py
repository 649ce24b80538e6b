"""Execution ids: UUIDv7 text (RFC 9562), unique everywhere and sortable by creation time."""

from __future__ import annotations

import os
import threading
import time
import uuid
from datetime import datetime

_lock = threading.Lock()
_last_ms = 0
_counter = 0


def new_eid(at: datetime | None = None) -> str:
    """A new UUIDv7 as 36 characters of text; later calls sort after earlier ones in this process.

    Ids name the moment they were made: ``at``, the node's time (``Clock.now``: the
    database's clock, so that ids made on nodes whose own clocks disagree still sort by
    when they were made: "the last execution" of a task is the greatest id), or this
    machine's clock without it (tools that make ids outside a node). Within one millisecond
    a 12-bit counter (RFC 9562, method 1) keeps the order.
    """
    global _last_ms, _counter
    with _lock:
        ms = time.time_ns() // 1_000_000 if at is None else int(at.timestamp() * 1000)
        if ms <= _last_ms:
            _counter += 1
            if _counter > 0xFFF:  # counter exhausted: borrow the next millisecond
                _last_ms += 1
                _counter = 0
            ms = _last_ms
        else:
            _last_ms = ms
            _counter = int.from_bytes(os.urandom(2), "big") & 0x3FF  # leave room to count up
        rand_b = int.from_bytes(os.urandom(8), "big") & ((1 << 62) - 1)
        value = (ms & ((1 << 48) - 1)) << 80 | 0x7 << 76 | _counter << 64 | 0b10 << 62 | rand_b
    return str(uuid.UUID(int=value))


#: The longest id (an eid, a remote id, a prefix of one) ecron looks up: every id it makes
#: is far shorter (PROTOCOL.md: at most 64), so a longer one names nothing and is refused
#: before any read of the database.
MAX_ID_LENGTH = 100


def too_long(name: str) -> bool:
    """True when ``name`` is longer than any id: refused before any lookup."""
    return len(name) > MAX_ID_LENGTH


def shown_id(name: str) -> str:
    """``name`` as a message or a log line may quote it: cut to ``MAX_ID_LENGTH``
    characters (an id from outside may be megabytes long)."""
    return name if not too_long(name) else f"{name[:MAX_ID_LENGTH]}... ({len(name)} characters)"


#: Ids are never shown shorter than this (git's habit; 8 characters of a UUIDv7 are the
#: top of its millisecond clock, so ids made close together need more).
SHORT_ID = 8


def unique_prefix(eid: str, *neighbours: str | None) -> str:
    """The shortest start of ``eid`` that starts none of ``neighbours``: ``SHORT_ID``
    characters at least, never ending on a dash, the whole id at most. Given the ids just
    before and after ``eid`` in byte order (among the ids shown, or in the database), it is
    the start of no other id among them: an id shares the most with its neighbours."""
    shared = max((_shared(eid, other) for other in neighbours if other is not None), default=0)
    length = max(SHORT_ID, shared + 1)
    if eid[length - 1 : length] == "-":
        length += 1
    return eid[:length]


def _shared(one: str, other: str) -> int:
    """How many characters ``one`` and ``other`` start with alike."""
    return next(
        (n for n, (a, b) in enumerate(zip(one, other, strict=False)) if a != b),
        min(len(one), len(other)),
    )


def remote_id(eid: str, step: int | None) -> str:
    """The id a user service is given: the eid, or ``<eid>.<n>`` for step ``n``."""
    return eid if step is None else f"{eid}.{step}"


def split_remote_id(remote: str) -> tuple[str, int | None]:
    """``<eid>.<n>`` into the eid and step ``n``; a plain eid into itself and None."""
    eid, dot, number = remote.rpartition(".")
    if dot and number.isdigit() and eid:
        return eid, int(number)
    return remote, None
