"""Who may call what (docs/security.md): every operation of the OpenAPI document that needs
the API token refuses a request without it or with a wrong one; a callback token opens
its own remote id and no other; every POST refuses a body over 1 MiB with 413; and the
dashboard holds no data of its own, its scripts asking only endpoints that need the token.

(That no secret shows anywhere is tests/test_secrets.py; that the dashboard shows hostile
messages, pause reasons and results as text, never as markup, is
tests/test_dashboard_clicks.py; task names cannot hold markup: [a-z0-9_.-].)
"""

from __future__ import annotations

import io
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from ecron.api import openapi
from ecron.api.dashboard import FILES
from ecron.daemon import Daemon
from ecron.signing import callback_token
from tests.support.daemon import DaemonFactory, task
from tests.support.loopback import session_from
from tests.support.service import UserService, wait_for

TOKEN = "api-t0ken-0123456789abcdef"
RIGHT = {"Authorization": f"Bearer {TOKEN}"}
#: Authorization headers that are not the API token, each spelt as people get it wrong.
WRONG = [
    {},
    {"Authorization": "Bearer nope"},
    {"Authorization": f"Bearer {TOKEN}x"},
    {"Authorization": f"Bearer {TOKEN[:-1]}"},
    {"Authorization": f"Bearer {TOKEN.upper()}"},
    {"Authorization": TOKEN},
    {"Authorization": f"Basic {TOKEN}"},
    {"Authorization": "Bearer "},
    {"X-Api-Token": TOKEN},
]
MIB = 1024 * 1024


@pytest.fixture
def database_url(tmp_path: Path) -> str:
    """Who may call what does not depend on the database: SQLite."""
    return f"sqlite+aiosqlite:///{tmp_path / 'ecron.db'}"


async def send(
    daemon: Daemon, method: str, path: str, headers: dict[str, str], data: Any = None
) -> tuple[int, Any]:
    """One request to the daemon, from a loopback address of its own (the tests here send
    hundreds of wrong tokens on purpose: from one address, past 30 a minute, they would be
    answered 429); its status and its body (JSON when it is JSON)."""
    async with (
        session_from() as session,
        session.request(
            method, f"http://127.0.0.1:{daemon.port}{path}", headers=headers, data=data
        ) as answer,
    ):
        if answer.content_type == "application/json":
            return answer.status, await answer.json()
        return answer.status, await answer.text()


async def start(daemon: Daemon, name: str) -> str:
    status, body = await send(daemon, "POST", f"/api/v1/tasks/{name}/run", RIGHT)
    assert status == 202, body
    eid: str = body["id"]
    return eid


@pytest.fixture
async def guarded(
    make_daemon: DaemonFactory, user_service: UserService
) -> AsyncIterator[tuple[Daemon, dict[str, str]]]:
    """A daemon with an API token and a public URL, a long-running one-call task and a
    two-step task, one execution of each RUNNING; and the values for the path parameters
    of every operation."""
    user_service.durations = {"long": 3600}
    url = f"{user_service.url}/jobs/long"
    specs = [
        task("job", url, concurrency="allow"),
        task(
            "etl",
            None,
            concurrency="allow",
            steps=[{"name": "a", "url": url}, {"name": "b", "url": url}],
        ),
    ]
    async with make_daemon(specs, api_token=TOKEN, public_url="http://ecron.test") as daemon:
        job, etl = await start(daemon, "job"), await start(daemon, "etl")
        await wait_for(lambda: user_service.calls_for(job) and user_service.calls_for(f"{etl}.1"))
        yield daemon, {"name": "job", "eid": job, "etl": etl}


def _path(operation: openapi.Operation, values: dict[str, str]) -> str:
    if operation.path == "/static/{name}":
        return "/static/dashboard.js"
    return operation.path.replace("{name}", values["name"]).replace("{eid}", values["eid"])


#: Mutating operations run last with the right token, cancel before resume.
_ORDER = ("/cancel", "/resume")


async def test_every_operation_that_needs_the_api_token_refuses_a_request_without_it(
    guarded: tuple[Daemon, dict[str, str]],
) -> None:
    """Walking every operation of the OpenAPI document (every route the daemon serves):
    one that needs the API token answers 401 with a JSON error, without a token and with
    each wrong one, and answers (no 401, no 5xx) with it; every POST needs the API token
    or, for the callback, a callback token (the API token does not open it); the others
    (health, metrics, the document, the dashboard's files) answer without any."""
    daemon, values = guarded
    needs: list[str] = []
    operations = sorted(openapi.OPERATIONS, key=lambda op: op.path.endswith(_ORDER))
    for operation in operations:
        label, path = f"{operation.method} {operation.path}", _path(operation, values)
        if operation.security == openapi.API_TOKEN:
            needs.append(label)
            for headers in WRONG:
                status, body = await send(daemon, operation.method, path, headers)
                assert status == 401, (label, headers, body)
                assert body["error"] == "missing or wrong API token", (label, body)
            status, body = await send(daemon, operation.method, path, RIGHT)
            assert status not in (401, 403) and status < 500, (label, status, body)
        elif operation.security == openapi.CALLBACK_TOKEN:
            for headers in [*WRONG, RIGHT]:  # the API token is not a callback token
                status, body = await send(daemon, "POST", path, headers, b"{}")
                assert status == 401, (label, headers, body)
                assert body["error"] == "missing or wrong callback token"
        else:
            assert operation.method == "GET", label
            status, _ = await send(daemon, operation.method, path, {})
            assert status == 200, (label, status)
    mutating = {f"{op.method} {op.path}" for op in openapi.OPERATIONS if op.method != "GET"}
    assert mutating - {"POST /api/v1/executions/{eid}/report"} <= set(needs)
    under_api = {
        f"{op.method} {op.path}"
        for op in openapi.OPERATIONS
        if op.path.startswith("/api/v1/") and op.security != openapi.CALLBACK_TOKEN
    }
    assert set(needs) == under_api - {f"GET {openapi.PATH}"}  # all of /api/v1 but two


async def test_a_callback_token_opens_its_own_remote_id_and_no_other(
    guarded: tuple[Daemon, dict[str, str]],
) -> None:
    """The tokens of a one-call execution, of a two-step execution and of each of its
    steps: each opens exactly its own remote id (answered 400 for the empty report it
    carries), and is refused 401 on every other one: another execution, the parent of a
    step, a step of its execution, the sibling step."""
    daemon, values = guarded
    ids = [values["eid"], values["etl"], f"{values['etl']}.1", f"{values['etl']}.2"]
    answers = {}
    for owner in ids:
        token = {"Authorization": f"Bearer {callback_token(daemon.callback_secret, owner)}"}
        for target in ids:
            path = f"/api/v1/executions/{target}/report"
            answers[owner, target] = (await send(daemon, "POST", path, token, b"{}"))[0]
    assert answers == {(o, t): 400 if o == t else 401 for o in ids for t in ids}


async def _chunks() -> AsyncIterator[bytes]:
    """A body of 2 MiB sent in chunks, with no Content-Length."""
    for _ in range(32):
        yield b"x" * (64 * 1024)


async def test_every_post_with_a_body_over_1_mib_answers_413(
    guarded: tuple[Daemon, dict[str, str]],
) -> None:
    """Every POST of the document, sent a 2 MiB body with its length and then in chunks
    without one, answers 413 with a JSON error, whether or not the endpoint reads a body;
    nothing it would have done was done."""
    daemon, values = guarded
    posts = [op for op in openapi.OPERATIONS if op.method == "POST"]
    assert len(posts) >= 6
    for operation in posts:
        path = _path(operation, values)
        token = TOKEN
        if operation.security == openapi.CALLBACK_TOKEN:
            token = callback_token(daemon.callback_secret, values["eid"])
        for body in (b"{" + b" " * (2 * MIB) + b"}", None):
            data = io.BytesIO(body) if body is not None else _chunks()
            headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
            status, answer = await send(daemon, "POST", path, headers, data)
            assert status == 413, (operation.path, body is None, answer)
            assert answer["error"] == "Request Entity Too Large"
    execution = await daemon.store.get_execution(values["eid"])
    assert execution is not None and not execution.is_final  # not cancelled
    assert not (await daemon.store.get_task("job")).paused  # type: ignore[union-attr]
    assert len((await daemon.store.list_executions(task="job")).items) == 1  # not run again


#: An API path as the dashboard's scripts write it: `/tasks/${quote(name)}/run`.
_SCRIPT_PATH = re.compile(r"""[`"](/(?:tasks|executions)[^`"?]*)""")


async def test_the_dashboard_holds_no_data_and_asks_only_endpoints_that_need_the_token(
    guarded: tuple[Daemon, dict[str, str]],
) -> None:
    """The page and its files, served without the token, hold no task name or execution
    id of the daemon (they are the same bytes for every daemon); every API path their
    scripts ask is an operation that needs the API token, and answers 401 without it."""
    daemon, values = guarded
    asked = set()
    for path in FILES:
        status, text = await send(daemon, "GET", path, {})
        assert status == 200
        assert values["eid"] not in text and values["etl"] not in text and "etl" not in text
        for found in _SCRIPT_PATH.findall(text):
            template = re.sub(r"\$\{quote\((\w+)\)\}", r"{\1}", found).rstrip("/")
            asked.add("/api/v1" + template)
    assert {"/api/v1/tasks", "/api/v1/executions", "/api/v1/tasks/{name}/run"} <= asked
    guarded_paths = {op.path for op in openapi.OPERATIONS if op.security == openapi.API_TOKEN}
    assert asked <= guarded_paths, asked - guarded_paths
    for operation in openapi.OPERATIONS:
        if operation.path in asked:
            status, _ = await send(daemon, operation.method, _path(operation, values), {})
            assert status == 401, operation.path


def test_every_test_docs_security_md_names_exists() -> None:
    """docs/security.md names the test behind each rule: each named file and test exists,
    so the document cannot go on citing a test that was renamed or removed."""
    root = Path(__file__).resolve().parent.parent
    text = (root / "docs" / "security.md").read_text()
    named = re.findall(r"`(tests/\w+\.py)(?:::(\w+))?`", text)
    assert len(named) >= 10
    for path, test in named:
        source = (root / path).read_text()
        assert not test or re.search(rf"^(async )?def {test}\(", source, re.M), (path, test)
