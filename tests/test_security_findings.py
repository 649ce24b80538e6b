"""The findings of the security review of issue 22 (S3 to S11), each shown fixed against
the real thing: a daemon on SQLite, real aiohttp services on 127.0.0.1, raw sockets,
a real redis-server."""

from __future__ import annotations

from pathlib import Path

import pytest

from ecron.signing import signature, verify
from tests.conftest import DaemonFactory, task
from tests.protocol_support import run_once
from tests.support.service import UserService, wait_for

SECRET = "s3cret"


@pytest.fixture
def database_url(tmp_path: Path) -> str:
    """These findings do not depend on the database: SQLite only."""
    return f"sqlite+aiosqlite:///{tmp_path / 'ecron.db'}"


# S6: the signature binds the execution id (v2).


async def test_a_captured_signed_trigger_replayed_under_another_execution_id_fails_v2(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """Every signed call carries v2 over "<t>.<METHOD>.<target>.<X-Ecron-Execution-Id>.<body>":
    the captured trigger verifies under its own execution id, and the same signature, path
    and body sent with another X-Ecron-Execution-Id does not."""
    user_service.duration = 0.05
    spec = task("job", f"{user_service.url}/jobs/x", secret=SECRET, body={"n": 1})
    async with make_daemon([spec]) as daemon:
        eid = await run_once(daemon, "job")
        await wait_for(lambda: user_service.calls_for(eid, "POST"), timeout=5)
    captured = user_service.calls_for(eid, "POST")[0]
    header = captured.headers["X-Ecron-Signature"]
    assert ",v2=" in header
    sent = captured.headers["X-Ecron-Execution-Id"]
    assert verify(SECRET, header, "POST", captured.path, captured.body, execution_id=sent)
    replayed = "0" * 26
    assert not verify(SECRET, header, "POST", captured.path, captured.body, execution_id=replayed)


def test_v2_is_the_hmac_of_time_method_target_execution_id_and_body() -> None:
    """v2=<hex HMAC-SHA256(secret, "<t>.<METHOD>.<target>.<eid>.<body>")>, beside v1; a call
    with no single execution id (a batch poll) signs an empty one."""
    import hashlib
    import hmac

    header = signature("k", "post", "/jobs/x", b"{}", 1700000000, execution_id="e1")
    v2 = hmac.new(b"k", b"1700000000.POST./jobs/x.e1.{}", hashlib.sha256).hexdigest()
    assert header.endswith(f",v2={v2}") and ",v1=" in header
    batch = signature("k", "GET", "/b?ids=a,b", b"", 1700000000)
    assert verify("k", batch, "GET", "/b?ids=a,b", b"", now=1700000000, execution_id="")
