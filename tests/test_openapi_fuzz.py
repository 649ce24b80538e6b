"""schemathesis against a live daemon (SQLite, a real user service, the API token on): from
the OpenAPI document it serves, it sends valid and invalid requests to every operation and
checks each answer (no 5xx; status, content type and body as documented; the token really
asked for). Path parameters are sometimes real task names and execution ids, so that runs,
pauses, cancels, resumes and callbacks are exercised too, not only 404s."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import hypothesis.strategies as st
import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis import Case, GenerationMode
from schemathesis.checks import positive_data_acceptance

from ecron.api import openapi
from ecron.signing import callback_token
from tests.protocol_support import ended
from tests.support.daemon import DaemonFactory, task
from tests.support.openapi import TOKEN, Recorder, served_document
from tests.support.service import UserService, wait_for

#: Generated requests per operation and generation mode: enough to reach odd corners,
#: few enough for the whole run to take seconds.
EXAMPLES = 25
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,  # the same requests on every run, in CI too
    database=None,
    phases=(Phase.explicit, Phase.generate, Phase.shrink),
    suppress_health_check=list(HealthCheck),
)


@pytest.fixture
def database_url(tmp_path: Path) -> str:
    """SQLite: the run is bounded to seconds, and the answers that depend on the database
    (a NUL character, which PostgreSQL cannot store) have their own test on both, in
    tests/test_daemon.py."""
    return f"sqlite+aiosqlite:///{tmp_path / 'ecron.db'}"


#: The callers of the runs with a role below admin, and their tokens.
VIEWER, OPERATOR = "v1ewer-t0k-0123456789", "0perat0r-t0k-0123456789"
CALLERS = [
    {"name": "grafana", "token": VIEWER, "role": "viewer"},
    {"name": "ci", "token": OPERATOR, "role": "operator"},
]
#: How each run calls the API: its token (None: the daemon asks for none).
AS = {"admin": TOKEN, "none": None, "viewer": VIEWER, "operator": OPERATOR}


@dataclass(frozen=True)
class Live:
    """The daemon under test: where it is, what it holds, and its callback secret."""

    base: str
    secret: str
    #: The API token the run sends; None when the daemon asks for none.
    token: str | None
    names: tuple[str, ...]
    #: Executions for every operation on one; ``reported`` ones only for callbacks (the
    #: others are cancelled on the way).
    eids: tuple[str, ...]
    reported: tuple[str, ...]


def cases(operation: Any, mode: GenerationMode, live: Live) -> st.SearchStrategy[Case] | None:
    """Requests for ``operation`` in ``mode``, most of them on real tasks and executions (in
    negative mode those keep a real name or id and break the query or the body). None when
    nothing of it can be made invalid."""
    raw = operation.definition.raw
    parameters = raw.get("parameters", [])
    in_path = {p["name"] for p in parameters if p["in"] == "path"}
    real = [{"name": name} for name in live.names] if "name" in in_path else []
    if "eid" in in_path:
        eids = live.reported if operation.path.endswith("/report") else live.eids
        real += [{"eid": eid} for eid in eids]
    strategies = [operation.as_strategy(mode, path_parameters=values) for values in real]
    if mode is GenerationMode.POSITIVE:
        return st.one_of(*strategies, operation.as_strategy(mode))
    rest = "requestBody" in raw or any(p["in"] != "path" for p in parameters)
    strategies = strategies if rest else []
    if rest or any("pattern" in p["schema"] for p in parameters):
        strategies.append(operation.as_strategy(mode))
    return st.one_of(*strategies) if strategies else None


#: Operations that end executions go last, so that the others still find some running.
LAST = ("/cancel", "/resume")
#: Operations whose schema-valid requests may still be refused 400: a backfill's period is
#: checked against the clock and the task's schedule (a period that ends in the future, a
#: manual task), which no schema can say; what they answer is still checked against the
#: document, and a 400 of theirs must name the field.
BEYOND_THE_SCHEMA = ("/api/v1/tasks/{name}/backfill",)


def names_the_field(ctx: Any, response: Any, case: Case) -> bool | None:
    """A 400 of an operation in ``BEYOND_THE_SCHEMA`` says which field is wrong."""
    if case.operation.path in BEYOND_THE_SCHEMA and response.status_code == 400:
        detail = response.json()["detail"]
        assert isinstance(detail, dict) and isinstance(detail.get("field"), str), detail
    return None


def headers_for(case: Case, live: Live) -> dict[str, str]:
    """The API token (if any), or for a callback the callback token of the id in its path;
    a POST without a body of its own says it is JSON, as clients send them (a daemon
    without a token refuses any other)."""
    if case.path.endswith("/report"):
        remote = str((case.path_parameters or {})["eid"])
        return {"Authorization": f"Bearer {callback_token(live.secret, remote)}"}
    headers = {} if live.token is None else {"Authorization": f"Bearer {live.token}"}
    if case.method == "POST" and "requestBody" not in case.operation.definition.raw:
        headers["Content-Type"] = "application/json"
    return headers


def fuzz(live: Live, examples: int) -> tuple[dict[str, set[int]], list[str]]:
    """Run schemathesis over every operation in both modes: the statuses each operation
    answered, and what schemathesis found wrong."""
    schema = schemathesis.openapi.from_url(f"{live.base}/api/v1/openapi.json", timeout=10)
    schema.config.generation.update(with_security_parameters=False)  # the test sends tokens
    seen: dict[str, set[int]] = {}
    found: list[str] = []
    with requests.Session() as session:
        operations = [result.ok() for result in schema.get_all_operations()]
        for operation in sorted(operations, key=lambda op: op.path.endswith(LAST)):
            for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
                strategy = cases(operation, mode, live)
                if strategy is None:
                    continue

                excluded = []
                if operation.path in BEYOND_THE_SCHEMA and mode is GenerationMode.POSITIVE:
                    excluded = [positive_data_acceptance]

                @settings(FUZZ, max_examples=examples)
                @given(case=strategy)
                def check(case: Case) -> None:
                    answer = case.call_and_validate(
                        base_url=live.base,
                        session=session,
                        headers=headers_for(case, live),
                        additional_checks=[names_the_field],
                        excluded_checks=excluded,  # noqa: B023
                    )
                    seen.setdefault(case.operation.label, set()).add(answer.status_code)

                try:
                    check()
                except (AssertionError, BaseExceptionGroup) as exc:
                    found.append(f"{operation.label} ({mode.value}): {exc}")
    return seen, found


@pytest.mark.parametrize("caller", ["admin", "none", "viewer", "operator"])
async def test_schemathesis_finds_no_server_error_and_no_answer_outside_the_document(
    make_daemon: DaemonFactory, user_service: UserService, caller: str
) -> None:
    """Every operation, fed valid and invalid requests (some on real tasks and executions),
    answers without a 5xx, with a documented status, content type and body, and refuses
    requests without the token; real runs, pauses, cancels, resumes and callbacks happen on
    the way; the whole run takes seconds. So it does as an admin, on a daemon that asks for
    no token (its document declares none), and as a viewer and an operator (whose refused
    calls answer the documented 403)."""
    user_service.durations = {"quick": 0.1, "push": 3600}
    one = {"url": f"{user_service.url}/jobs/quick"}
    specs = [
        task("quick", one["url"]),
        task("etl", None, steps=[{"name": "a", **one}, {"name": "b", **one}]),
        task("push", f"{user_service.url}/jobs/push", mode="callback", concurrency="allow"),
    ]
    tokens = {} if caller == "none" else {"api_token": TOKEN, "api_tokens": CALLERS}
    # schemathesis checks that each operation refuses a request without the token, from
    # this one address: past 30 a minute the daemon would answer it 429 to everything
    tokens["bad_tokens_per_minute"] = 1_000_000
    async with make_daemon(specs, **tokens) as daemon:
        api = Recorder(daemon, await served_document(daemon))
        eids = []
        for name in ("quick", "etl", "push", "push", "push", "push"):
            _, snapshot = await api.send(
                "POST", "/api/v1/tasks/{name}/run", f"/api/v1/tasks/{name}/run"
            )
            eids.append(snapshot["id"])
        await ended(daemon, eids[0])
        await ended(daemon, eids[1])
        await wait_for(lambda: all(user_service.calls_for(eid) for eid in eids[2:]), timeout=5)
        assert api.problems == []
        live = Live(
            f"http://127.0.0.1:{daemon.port}",
            daemon.callback_secret,
            token=AS[caller],
            names=("quick", "etl", "push"),
            eids=tuple(eids[:4]),
            reported=(*eids[4:], f"{eids[1]}.2"),
        )
        examples = EXAMPLES if caller in ("admin", "none") else EXAMPLES // 5
        seen, found = await asyncio.to_thread(fuzz, live, examples)
    assert found == []
    reached = {label: statuses - {404} for label, statuses in seen.items()}
    described = {f"{op.method} {op.path}" for op in openapi.OPERATIONS}
    assert set(seen) == described - {f"GET {openapi.PATH}"}  # schemathesis skips its source
    assert {200, 400} <= reached["POST /api/v1/executions/{eid}/report"]
    if caller == "viewer":
        assert reached["POST /api/v1/tasks/{name}/run"] == {403}
        assert reached["GET /api/v1/audit"] == {403}
        assert {200} <= reached["GET /api/v1/executions"]
        return
    assert {202} <= reached["POST /api/v1/tasks/{name}/run"]
    assert {200, 400} <= reached["POST /api/v1/tasks/{name}/pause"]
    assert {200} <= reached["POST /api/v1/executions/{eid}/cancel"]
    assert {202} <= reached["POST /api/v1/executions/{eid}/resume"]
    assert reached["GET /api/v1/audit"] == ({403} if caller == "operator" else {200, 400})
    if caller in ("admin", "none"):
        assert {200, 400} <= reached["GET /api/v1/executions"]
