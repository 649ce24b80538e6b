"""PROTOCOL.md, X-Ecron-Signature: ecron signs every call of a task with a secret, and
``ecron.signing.verify`` checks it exactly as the protocol defines."""

from __future__ import annotations

import hashlib
import hmac
from pathlib import Path

import pytest
from aiohttp import web

from ecron.core import Reason, Status
from ecron.signing import callback_token, signature, token_matches, verify
from tests.protocol_support import ended, run_once
from tests.support.daemon import DaemonFactory, task
from tests.support.service import UserService

SECRET = "s3cret"


@pytest.fixture
def database_url(tmp_path: Path) -> str:
    """Signing does not depend on the database: these tests use SQLite only."""
    return f"sqlite+aiosqlite:///{tmp_path / 'ecron.db'}"


def test_a_signature_is_the_hmac_of_time_method_target_and_body_as_the_protocol_says() -> None:
    """t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<METHOD>.<target>.<body>")>."""
    expected = hmac.new(b"k", b'1700000000.POST./jobs/x?a=1.{"n": 1}', hashlib.sha256).hexdigest()
    assert signature("k", "post", "/jobs/x?a=1", b'{"n": 1}', 1700000000).startswith(
        f"t=1700000000,v1={expected},v2="
    )


def test_verify_accepts_the_right_signature_and_refuses_every_other() -> None:
    """A wrong secret, method, target or body, a stale or future time, or a malformed
    header are all refused; the right one within 5 minutes passes."""
    now = 1_800_000_000
    good = signature(SECRET, "GET", "/jobs/x/e1", b"", now)
    assert verify(SECRET, good, "GET", "/jobs/x/e1", b"", now=now + 299)
    assert not verify("other", good, "GET", "/jobs/x/e1", b"", now=now)
    assert not verify(SECRET, good, "DELETE", "/jobs/x/e1", b"", now=now)
    assert not verify(SECRET, good, "GET", "/jobs/x/e2", b"", now=now)
    assert not verify(SECRET, good, "GET", "/jobs/x/e1", b"x", now=now)
    assert not verify(SECRET, good, "GET", "/jobs/x/e1", b"", now=now + 301)
    assert not verify(SECRET, good, "GET", "/jobs/x/e1", b"", now=now - 301)
    huge_t = "t=" + "9" * 5000 + ",v1=" + "a" * 64
    for broken in ("", "t=abc,v1=00", f"t={now}", "v1=" + "0" * 64, f"t={now},v1=é", huge_t):
        assert not verify(SECRET, broken, "GET", "/jobs/x/e1", b"", now=now)


def test_a_callback_token_opens_one_remote_id_only() -> None:
    """Tokens are per remote id and compared in constant time."""
    token = callback_token(SECRET, "e1")
    assert token_matches(SECRET, "e1", token)
    assert not token_matches(SECRET, "e2", token)
    assert not token_matches("other", "e1", token)
    assert callback_token(SECRET, "e1.2") != token


async def test_every_call_of_a_task_with_a_secret_carries_a_signature_that_verifies(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """POST (with its exact body), GET and DELETE are each signed over the raw path and query
    as sent; a task without a secret sends no signature."""
    user_service.duration = 3600
    spec = task(
        "job",
        f"{user_service.url}/jobs/x?team=a%2Fb",
        secret=SECRET,
        body={"kind": "full"},
        task_timeout="700ms",
    )
    async with make_daemon([spec, task("plain", f"{user_service.url}/jobs/y")]) as daemon:
        eid = await run_once(daemon, "job")
        await ended(daemon, eid)
        plain = await run_once(daemon, "plain")
    calls = user_service.calls_for(eid)
    assert {c.method for c in calls} == {"POST", "GET", "DELETE"}
    for call in calls:
        header = call.headers["X-Ecron-Signature"]
        assert verify(SECRET, header, call.method, call.path, call.body), call
        assert not verify("wrong", header, call.method, call.path, call.body)
    assert calls[0].body == b'{"kind": "full"}'
    assert "X-Ecron-Signature" not in user_service.calls_for(plain)[0].headers


async def test_a_service_that_checks_signatures_refuses_a_task_signed_with_another_secret(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """The service answers 401 to a bad signature: the trigger is rejected, not retried."""

    async def checking(request: web.Request) -> web.StreamResponse | None:
        header = request.headers.get("X-Ecron-Signature", "")
        if not verify(SECRET, header, request.method, request.raw_path, await request.read()):
            return web.json_response({"error": "bad signature"}, status=401)
        return None

    user_service.behaviour = checking
    user_service.duration = 0.1
    good = task("good", f"{user_service.url}/jobs/x", secret=SECRET)
    bad = task("bad", f"{user_service.url}/jobs/x", secret="not-" + SECRET)
    async with make_daemon([good, bad]) as daemon:
        ok = await ended(daemon, await run_once(daemon, "good"))
        refused_id = await run_once(daemon, "bad")
        refused = await ended(daemon, refused_id)
    assert ok.status is Status.SUCCESS
    assert (refused.status, refused.reason) == (Status.FAILED, Reason.REJECTED)
    assert user_service.methods_for(refused_id) == ["POST"]
