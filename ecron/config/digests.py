"""The digest of a task spec that its task row keeps (``spec_hash``), to see a change:
keyed from the daemon's secret, so that a copy of the database confirms no guess of a
secret the spec holds (docs/security.md)."""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any

import orjson

__all__ = ["digest_key", "spec_digest"]


def spec_digest(dumped: dict[str, Any], key: bytes = b"") -> str:
    """The digest of a task spec as JSON values (``TaskSpec.dumped``): an HMAC-SHA256 keyed
    with ``key`` (``digest_key``), so that a copy of the database, which stores it, cannot
    confirm a guess of a header value or secret offline; a plain SHA-256 without a key (a
    row written before keys, which a sync rewrites)."""
    try:
        text = orjson.dumps(dumped, option=orjson.OPT_SORT_KEYS)
    except TypeError:  # a body orjson cannot write (an integer beyond 64 bits)
        text = json.dumps(dumped, sort_keys=True).encode()
    if not key:
        return hashlib.sha256(text).hexdigest()
    return hmac.new(key, text, hashlib.sha256).hexdigest()


def digest_key(secret: str) -> bytes:
    """The key of the specs' digests, from the daemon's secret (the callback secret, set or
    generated): its own key, derived, not the secret itself."""
    return hmac.new(secret.encode(), b"ecron task spec digest", hashlib.sha256).digest()
