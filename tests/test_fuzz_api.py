"""Bad input at the live API, fuzzed with hypothesis on a fixed budget: the callback endpoint
(random remote ids, Authorization headers, content types and raw bodies) and the query
parameters of the history and of every other GET.

tests/test_openapi_fuzz.py runs schemathesis over every operation from the OpenAPI
document: requests the schema describes, and their negations. This complements it with
what a schema cannot describe: bodies that are not JSON at all or not UTF-8, JSON nested
100,000 deep, NaN and huge integers; tokens of another id, of a step or of the parent, in
odd spellings; query parameters repeated, empty, with NUL or non-ASCII digits. And with an
oracle of the protocol's order for callbacks (404, then 401, then 400, then 409 or 200),
worked out from what the test knows, not from the answer.
"""

from __future__ import annotations

import asyncio
import json
import string
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp
import hypothesis.strategies as st
import pytest
import requests
from hypothesis import HealthCheck, given, settings

from ecron.core import InvalidReport, RemoteStatus, Status, parse_report
from ecron.signing import callback_token
from tests.support.daemon import DaemonFactory, task
from tests.support.openapi import AUTH, TOKEN
from tests.support.service import UserService, wait_for


def fuzz(examples: int) -> Any:
    """The fixed budget of one fuzz run."""
    return settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )


@pytest.fixture
def database_url(tmp_path: Path) -> str:
    """SQLite: the run is bounded to seconds (the store's answers to odd values on both
    databases are tests/test_daemon.py's)."""
    return f"sqlite+aiosqlite:///{tmp_path / 'ecron.db'}"


@dataclass(frozen=True)
class Live:
    """The daemon under test, what it holds, and its callback secret."""

    base: str
    secret: str
    #: Every remote id the daemon knows: executions and their steps.
    remote_ids: tuple[str, ...]
    tasks: tuple[str, ...]


async def start(daemon: Any, name: str, headers: dict[str, str]) -> str:
    """Run task ``name`` now through the API; the new execution's id."""
    url = f"http://127.0.0.1:{daemon.port}/api/v1/tasks/{name}/run"
    async with (
        aiohttp.ClientSession() as session,
        session.post(url, headers=headers, json={}) as answer,
    ):
        assert answer.status == 202, await answer.text()
        eid: str = (await answer.json())["id"]
        return eid


async def live_daemon(
    daemon: Any, user_service: UserService, headers: dict[str, str] | None = None
) -> Live:
    """Start executions that stay RUNNING (two one-call, one of two steps) and wait until
    their triggers arrived."""
    eids = [await start(daemon, name, headers or {}) for name in ("push", "push", "etl")]
    await wait_for(lambda: all(user_service.calls_for(e) for e in eids[:2]), timeout=5)
    remote = list(eids)
    for eid in eids:
        execution = await daemon.store.get_execution(eid)
        remote += [step.remote_id for step in execution.steps]
    return Live(
        f"http://127.0.0.1:{daemon.port}", daemon.callback_secret, tuple(remote), ("push", "etl")
    )


def specs(service: UserService) -> list[Any]:
    service.durations = {"long": 3600}
    url = f"{service.url}/jobs/long"
    return [
        task("push", url, mode="callback", concurrency="allow"),
        task(
            "etl",
            None,
            concurrency="allow",
            steps=[{"name": "a", "url": url}, {"name": "b", "url": url}],
        ),
    ]


# --- callbacks ---------------------------------------------------------------------------------


#: Remote ids that are not (the dot segments "." and ".." are left out: HTTP clients
#: resolve them before sending, so ecron never sees them).
ODD_IDS = ["", "x.", "%00", "\x00", "a/b", "é", "0" * 200, "x.0", "x.3", "x.9" + "9" * 20]
#: Header values HTTP allows (no control characters but tab).
header_text = st.text(alphabet=string.printable.strip() + " \t", max_size=40)


@st.composite
def targets(draw: st.DrawFn, live: Live) -> tuple[str, bool]:
    """(a remote id for the path, whether the daemon knows it)."""
    real = draw(st.sampled_from(live.remote_ids))
    choice = draw(st.integers(0, 3))
    if choice <= 1:
        return real, True
    if choice == 2:
        odd = draw(st.sampled_from(ODD_IDS)).replace("x", real.split(".")[0])
        return odd, odd in live.remote_ids
    text = draw(st.text(max_size=20).filter(lambda text: text not in (".", "..")))
    return text, text in live.remote_ids


def authorizations(live: Live, target: str) -> st.SearchStrategy[tuple[str | None, bool]]:
    """(an Authorization header or None, whether it opens ``target``)."""
    token = callback_token(live.secret, target)
    others = [r for r in live.remote_ids if r != target]
    return st.one_of(
        st.sampled_from(
            [
                (f"Bearer {token}", True),
                (f"bearer {token}", True),
                (f"BEARER    {token}   ", True),
                (f"Bearer {token.upper()}", False),
                (f"Basic {token}", False),
                (token, False),
                (f"Bearer {callback_token('another secret', target)}", False),
                (None, False),
                ("Bearer", False),
            ]
        ),
        st.sampled_from(others).map(
            lambda other: (f"Bearer {callback_token(live.secret, other)}", False)
        ),
        header_text.map(lambda text: (f"Bearer {text}", False)),
    )


#: Report-like objects, and what the protocol calls "not a report".
reports = st.fixed_dictionaries(
    {},
    optional={
        "status": st.sampled_from(["RUNNING", "running", " success ", "FAILED", "UNKNOWN", "x"])
        | st.integers(),
        "progress": st.floats(allow_nan=True) | st.text(max_size=3) | st.integers(),
        "message": st.text(max_size=30),
        "result": st.recursive(
            st.integers() | st.text(max_size=5), lambda inner: st.lists(inner, max_size=3)
        ),
        "interrupted": st.booleans(),
    },
)
bodies = st.one_of(
    reports.map(lambda report: json.dumps(report).encode()),
    reports.map(lambda report: json.dumps(report).encode("utf-16")),
    st.binary(max_size=64),
    st.sampled_from(
        [
            b"",
            b"null",
            b'{"status": "RUNNING", "progress": NaN}',
            b'{"status": "RUNNING", "progress": 1' + b"0" * 400 + b"}",
            b'{"status": "RUNNING", "status": "SUCCESS"}',
            b'{"status": "RUNNING", "message": "\xff\xfe"}',
            b"[" * 100_000 + b"]" * 100_000,
            b'{"status": "SUCCESS", "result": ' + b"[" * 990 + b"]" * 990 + b"}",
        ]
    ),
)
content_types = st.sampled_from(
    [None, "application/json", "text/plain", "application/json; charset=latin-1", "x/y; z"]
)


def is_report(body: bytes) -> bool:
    """Whether ``body`` is a report a callback may carry (PROTOCOL.md): JSON, decoded as the
    standard library does, that parses as a report saying something other than UNKNOWN."""
    try:
        parsed = parse_report(json.loads(body))
    except (ValueError, InvalidReport, RecursionError):
        return False
    return parsed.status is not RemoteStatus.UNKNOWN


def fuzz_callbacks(live: Live, examples: int) -> dict[int, int]:
    """Send random callbacks; each answer must be the one the protocol's order gives. How
    many of each status were answered."""
    seen: dict[int, int] = {}
    with requests.Session() as session:

        @fuzz(examples)
        @given(data=st.data(), body=bodies, content_type=content_types)
        def check(data: st.DataObject, body: bytes, content_type: str | None) -> None:
            target, known = data.draw(targets(live))
            authorization, opens = data.draw(authorizations(live, target))
            headers = {"Content-Type": content_type, "Authorization": authorization}
            answer = session.post(
                f"{live.base}/api/v1/executions/{quote(target, safe='')}/report",
                data=body,
                headers={k: v for k, v in headers.items() if v is not None},
                timeout=10,
            )
            seen[answer.status_code] = seen.get(answer.status_code, 0) + 1
            answered = answer.json()
            if not known:
                expected: set[int] = {404}
            elif not opens:
                expected = {401}
            elif not is_report(body):
                expected = {400}
            else:
                expected = {200, 409}
            assert answer.status_code in expected, (target, authorization, body[:80], answered)
            if answer.status_code == 200:
                assert answered["id"] == target.split(".")[0]
            else:
                assert isinstance(answered["error"], str) and answered["error"]

        check()
    return seen


async def test_random_callbacks_get_the_answer_of_the_protocols_order_and_never_a_500(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """Random remote ids (real ones, steps, odd spellings, random text), Authorization
    headers (the right token in odd spellings, another id's, a step's, a wrong secret's,
    none), content types and raw bodies: each callback is answered 404, 401, 400, or
    409/200, in the protocol's order, with a JSON error naming the refusal, never a 5xx;
    the daemon is still ready afterwards."""
    async with make_daemon(specs(user_service), public_url="http://ecron.test") as daemon:
        live = await live_daemon(daemon, user_service)
        seen = await asyncio.to_thread(fuzz_callbacks, live, 150)
        ready = await asyncio.to_thread(requests.get, f"{live.base}/readyz", timeout=10)
    assert ready.status_code == 200
    assert not [status for status in seen if status >= 500]
    assert {200, 400, 401, 404} <= set(seen), seen  # the budget reaches every answer


# --- query parameters --------------------------------------------------------------------------


QUERY_VALUES = ["", " 5 ", "0", "501", "-1", "1e3", "1_0", "\u0665", "0x10", "10" * 30, "\x00"]
query_values = st.sampled_from(QUERY_VALUES) | st.text(max_size=12)
statuses = st.sampled_from(["", "running", "SUCCESS", "scheduled", "nope", *map(str, Status)])


@st.composite
def history_queries(draw: st.DrawFn, live: Live) -> list[tuple[str, str]]:
    """Query parameters for the history: known and unknown keys, repeated, odd values."""
    values = {
        "limit": query_values | st.integers(-3, 600).map(str),
        "status": statuses | query_values,
        "task": st.sampled_from(["", *live.tasks]) | query_values,
        "before": st.sampled_from(live.remote_ids) | query_values,
        "other": query_values,
    }
    keys = draw(st.lists(st.sampled_from(sorted(values)), max_size=5))
    return [(key, draw(values[key])) for key in keys]


def _whole(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


def check_page(query: list[tuple[str, str]], status: int, body: Any) -> None:
    """A history answer agrees with its query: a 400 names a parameter that was given, a
    200 holds at most ``limit`` items, each of the asked status and task, before the cursor."""
    first: dict[str, str] = {}
    for key, value in query:
        first.setdefault(key, value)  # aiohttp reads the first of repeated keys
    if status == 400:
        assert any(key in body["error"] for key in ("limit", "status", "before")), body
        return
    assert status == 200, (query, body)
    limit = _whole(first.get("limit", "50"))
    assert limit is None or len(body["items"]) <= limit
    for item in body["items"]:
        if first.get("status"):
            assert item["status"] == first["status"].upper()
        if first.get("task"):
            assert item["task"] == first["task"]
        if first.get("before"):
            assert item["id"] < first["before"]


def fuzz_queries(live: Live, examples: int) -> dict[str, set[int]]:
    """Send random queries to the history and to every other GET; what each answered."""
    seen: dict[str, set[int]] = {}
    others = [
        "/api/v1/tasks",
        "/api/v1/tasks/push",
        f"/api/v1/executions/{live.remote_ids[0]}",
        f"/api/v1/executions/{live.remote_ids[0]}/steps",
        "/healthz",
        "/readyz",
        "/metrics",
        "/api/v1/openapi.json",
        "/",
    ]
    with requests.Session() as session:

        @fuzz(examples)
        @given(data=st.data(), path=st.sampled_from(["/api/v1/executions", *others]))
        def check(data: st.DataObject, path: str) -> None:
            query = data.draw(history_queries(live))
            answer = session.get(live.base + path, params=query, headers=AUTH, timeout=10)
            seen.setdefault(path, set()).add(answer.status_code)
            if path == "/api/v1/executions":
                check_page(query, answer.status_code, answer.json())
            else:  # other parameters are not read: the answer is the usual one
                assert answer.status_code == 200, (path, query, answer.text[:200])

        check()
    return seen


async def test_random_query_parameters_get_a_page_that_agrees_or_a_400_naming_the_parameter(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """Random, repeated and odd query parameters: the history answers a page that agrees
    with them (at most limit items, of the status, the task, before the cursor) or a 400
    whose error names the parameter; every other GET ignores them; never a 5xx."""
    async with make_daemon(specs(user_service), api_token=TOKEN) as daemon:
        live = await live_daemon(daemon, user_service, AUTH)
        seen = await asyncio.to_thread(fuzz_queries, live, 150)
    assert {200, 400} <= seen["/api/v1/executions"], seen
