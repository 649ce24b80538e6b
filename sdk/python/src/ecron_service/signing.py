"""``X-Ecron-Signature`` (PROTOCOL.md, "Headers on every call"): the kit checks ``v2``,
which binds the execution id, so a captured trigger cannot be replayed under another id.
The same rules as ``ecron.signing.verify``, kept here so that the kit needs nothing but the
standard library."""

from __future__ import annotations

import hashlib
import hmac
import re
import time

#: A signature whose ``t`` is further than this from the service's clock is refused (s).
TOLERANCE = 300

_STAMP = re.compile(r"[0-9]{1,15}")
_DIGEST = re.compile(r"[0-9a-f]{64}")


def sign(secret: str, method: str, target: str, execution_id: str, body: bytes, t: int) -> str:
    """The ``v2`` digest: HMAC-SHA256 of ``<t>.<METHOD>.<target>.<execution id>.<body>``."""
    signed = f"{t}.{method.upper()}.{target}.{execution_id}.".encode() + body
    return hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()


def verify(
    secret: str,
    header: str,
    method: str,
    target: str,
    execution_id: str,
    body: bytes,
    now: float | None = None,
) -> bool:
    """True when ``header`` carries a ``v2`` of this request made within ``TOLERANCE`` s.

    ``target`` is the raw path as sent plus ``?query``; ``execution_id`` the request's
    ``X-Ecron-Execution-Id`` (``""`` for a batch poll, which has none); ``body`` the bytes
    as they arrived.
    """
    fields = dict(part.strip().partition("=")[::2] for part in header.split(","))
    stamp, given = fields.get("t", ""), fields.get("v2", "")
    if not _STAMP.fullmatch(stamp) or not _DIGEST.fullmatch(given):
        return False
    current = time.time() if now is None else now
    if abs(current - int(stamp)) > TOLERANCE:
        return False
    expected = sign(secret, method, target, execution_id, body, int(stamp))
    return hmac.compare_digest(expected, given)
