"""Request signatures and callback tokens (PROTOCOL.md). Standard library only.

User services can import ``verify`` to check ``X-Ecron-Signature``::

    from ecron.signing import verify

    ok = verify(secret, request.headers.get("X-Ecron-Signature", ""),
                request.method, request.raw_path, await request.read(),
                execution_id=request.headers.get("X-Ecron-Execution-Id", ""))
"""

from __future__ import annotations

import hashlib
import hmac
import re
import time

#: Receivers refuse a signature whose time is further than this from their clock (seconds).
TOLERANCE = 300


def signature(
    secret: str, method: str, target: str, body: bytes, timestamp: int, execution_id: str = ""
) -> str:
    """The ``X-Ecron-Signature`` value for one request: ``t``, ``v1`` and ``v2``.

    ``target`` is the raw path as sent plus ``?query`` when there is one;
    ``body`` the exact bytes sent (empty for GET and DELETE); ``execution_id`` the
    request's ``X-Ecron-Execution-Id``, which ``v2`` binds too (empty for a call that has
    none, a batch poll: its ids are in its target).
    """
    v1 = _digest(secret, f"{timestamp}.{method.upper()}.{target}.", body)
    v2 = _digest(secret, f"{timestamp}.{method.upper()}.{target}.{execution_id}.", body)
    return f"t={timestamp},v1={v1},v2={v2}"


def _digest(secret: str, head: str, body: bytes) -> str:
    return hmac.new(secret.encode(), head.encode() + body, hashlib.sha256).hexdigest()


def verify(
    secret: str,
    header: str,
    method: str,
    target: str,
    body: bytes,
    *,
    now: float | None = None,
    tolerance: int = TOLERANCE,
    execution_id: str | None = None,
) -> bool:
    """True when ``header`` is a valid signature of this request made within ``tolerance`` s.

    With ``execution_id`` (the request's ``X-Ecron-Execution-Id``, ``""`` when it has none)
    ``v2`` is checked, which binds that id: pass it. Without, only ``v1`` is, as services
    written before ``v2`` did; a ``v1`` does not tell one execution's call from another's.
    """
    fields = dict(part.strip().split("=", 1) for part in header.split(",") if "=" in part)
    version = "v1" if execution_id is None else "v2"
    given = fields.get(version, "")
    stamp = fields.get("t", "")
    if not re.fullmatch(r"[0-9]{1,15}", stamp) or not re.fullmatch(r"[0-9a-f]{64}", given):
        return False
    timestamp = int(stamp)
    current = time.time() if now is None else now
    if abs(current - timestamp) > tolerance:
        return False
    signed = signature(secret, method, target, body, timestamp, execution_id or "")
    expected = signed.split(f"{version}=", 1)[1].split(",", 1)[0]
    return hmac.compare_digest(expected, given)


def callback_token(secret: str, remote_id: str) -> str:
    """The bearer token that lets a user service report about ``remote_id``, and nothing else."""
    return hmac.new(secret.encode(), f"callback:{remote_id}".encode(), hashlib.sha256).hexdigest()


def token_matches(secret: str, remote_id: str, token: str) -> bool:
    """Constant-time check of a callback token."""
    return hmac.compare_digest(callback_token(secret, remote_id).encode(), token.encode())
