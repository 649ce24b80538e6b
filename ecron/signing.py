"""Request signatures and callback tokens (PROTOCOL.md). Standard library only.

User services can import ``verify`` to check ``X-Ecron-Signature``::

    from ecron.signing import verify

    ok = verify(secret, request.headers.get("X-Ecron-Signature", ""),
                request.method, request.raw_path, await request.read())
"""

from __future__ import annotations

import hashlib
import hmac
import re
import time

#: Receivers refuse a signature whose time is further than this from their clock (seconds).
TOLERANCE = 300


def signature(secret: str, method: str, target: str, body: bytes, timestamp: int) -> str:
    """The ``X-Ecron-Signature`` value for one request.

    ``target`` is the raw path as sent plus ``?query`` when there is one;
    ``body`` the exact bytes sent (empty for GET and DELETE).
    """
    message = f"{timestamp}.{method.upper()}.{target}.".encode() + body
    digest = hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={digest}"


def verify(
    secret: str,
    header: str,
    method: str,
    target: str,
    body: bytes,
    *,
    now: float | None = None,
    tolerance: int = TOLERANCE,
) -> bool:
    """True when ``header`` is a valid signature of this request made within ``tolerance`` s."""
    fields = dict(part.strip().split("=", 1) for part in header.split(",") if "=" in part)
    given = fields.get("v1", "")
    stamp = fields.get("t", "")
    if not re.fullmatch(r"[0-9]{1,15}", stamp) or not re.fullmatch(r"[0-9a-f]{64}", given):
        return False
    timestamp = int(stamp)
    current = time.time() if now is None else now
    if abs(current - timestamp) > tolerance:
        return False
    expected = signature(secret, method, target, body, timestamp).split("v1=", 1)[1]
    return hmac.compare_digest(expected, given)


def callback_token(secret: str, remote_id: str) -> str:
    """The bearer token that lets a user service report about ``remote_id``, and nothing else."""
    return hmac.new(secret.encode(), f"callback:{remote_id}".encode(), hashlib.sha256).hexdigest()


def token_matches(secret: str, remote_id: str, token: str) -> bool:
    """Constant-time check of a callback token."""
    return hmac.compare_digest(callback_token(secret, remote_id).encode(), token.encode())
