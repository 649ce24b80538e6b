"""Findings S1 and S2 of issue 22: an API without a token cannot be driven or read by a web
page the operator opens (CSRF, DNS rebinding), and cannot be left open on a public address
by accident (DESIGN.md, "Without a token")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import pytest

from ecron.config import load_config
from ecron.config.model import DaemonSettings
from ecron.daemon import Daemon
from ecron.errors import ConfigError
from tests.support.daemon import DaemonFactory, task
from tests.support.service import UserService


async def send(daemon: Daemon, method: str, path: str, **kwargs: Any) -> tuple[int, Any]:
    """One request; the status and the answer (JSON when it is, else its text)."""
    async with (
        aiohttp.ClientSession() as session,
        session.request(method, f"http://127.0.0.1:{daemon.port}{path}", **kwargs) as answer,
    ):
        if answer.content_type == "application/json":
            return answer.status, await answer.json()
        return answer.status, await answer.text()


async def test_s1_a_web_page_cannot_drive_or_read_an_api_without_a_token(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """S1: with no token configured, a `text/plain` POST from another site's Origin to
    /run, a form POST to /pause and a read with an attacker's Host are refused 403 (and
    audited as `anonymous`, counted into two entries: the first refusal, then the rest);
    nothing runs and nothing is paused. The same requests as a
    client sends them (JSON, no Origin or this daemon's own, its Host) work."""
    specs = [task("quick", f"{user_service.url}/jobs/quick", concurrency="allow")]
    async with make_daemon(specs) as daemon:
        own = f"http://127.0.0.1:{daemon.port}"
        evil = {"Origin": "http://evil.example", "Content-Type": "text/plain"}
        refused = [
            await send(daemon, "POST", "/api/v1/tasks/quick/run", data="{}", headers=evil),
            await send(
                daemon,
                "POST",
                "/api/v1/tasks/quick/pause",
                data="reason=x",
                headers={"Content-Type": "application/x-www-form-urlencoded"},
            ),
            await send(
                daemon, "POST", "/api/v1/tasks/quick/run", json={}, headers={"Origin": "null"}
            ),
            await send(daemon, "GET", "/api/v1/tasks", headers={"Host": "attacker.example"}),
            await send(daemon, "GET", "/", headers={"Host": "attacker.example:8080"}),
        ]
        executions = await daemon.store.list_executions(task="quick", limit=10)
        task_row = await daemon.store.get_task("quick")
        allowed = [
            await send(daemon, "POST", "/api/v1/tasks/quick/run", json={}),
            await send(daemon, "POST", "/api/v1/tasks/quick/run", json={}, headers={"Origin": own}),
            await send(daemon, "GET", "/api/v1/tasks", headers={"Host": "localhost"}),
        ]
        _, audit = await send(daemon, "GET", "/api/v1/audit?limit=20")
    assert [status for status, _ in refused] == [403] * 5
    assert "another site" in refused[0][1]["detail"]
    assert "application/json" in refused[1][1]["detail"]
    assert "Host" in refused[3][1]["detail"]
    assert executions.items == [] and task_row is not None and not task_row.paused
    assert [status for status, _ in allowed] == [202, 202, 200]
    # the five refusals of one address: the first an entry at once, the others counted
    denied = [e for e in audit["items"] if e["status"] == 403][::-1]
    assert [(e["actor"], e["action"], e["count"]) for e in denied] == [
        ("anonymous", "run", 1),
        ("anonymous", "read", 4),
    ]
    assert denied[1]["detail"]["targets"] == ["quick", "/api/v1/tasks", "/"]


@pytest.mark.parametrize("listen", ["0.0.0.0:8080", "[::]:8080", "10.1.2.3:80", "ecron:8080"])
def test_s2_no_token_on_an_address_other_machines_reach_is_refused(listen: str) -> None:
    """S2: without a token the daemon refuses to listen anywhere but a loopback address,
    naming `listen` and the two ways out; a token or `allow_unauthenticated: true` lets it."""
    with pytest.raises(ValueError, match=r"listen: .* no API token is set.*allow_unauthenticated"):
        DaemonSettings(listen=listen)
    assert (
        DaemonSettings(listen=listen, api_token="t0k-0123456789abcdef").callers[0].name == "admin"
    )
    assert DaemonSettings(listen=listen, allow_unauthenticated=True).callers == []
    for loopback in ("127.0.0.1:8080", "127.0.0.2:80", "[::1]:8080", "localhost:8080"):
        assert DaemonSettings(listen=loopback).callers == []


@pytest.mark.parametrize(
    ("yaml", "environ", "variable"),
    [
        ("api_token: ${TOKEN}\n", {"TOKEN": ""}, None),
        ("api_token: ''\n", {}, None),
        ("", {"ECRON_API_TOKEN": ""}, "ECRON_API_TOKEN"),
        ("api_tokens: [{name: ci, token: '${CI}', role: operator}]\n", {"CI": ""}, None),
    ],
)
def test_s2_an_empty_token_is_an_error_never_no_token(
    tmp_path: Path, yaml: str, environ: dict[str, str], variable: str | None
) -> None:
    """S2: a token that comes out empty (an unset secret, an empty variable) is a config
    error naming where it came from and the field, never an API without a token."""
    (tmp_path / "ecron.yaml").write_text(yaml)
    (tmp_path / "tasks").mkdir()
    with pytest.raises(ConfigError) as raised:
        load_config(tmp_path, environ)
    problem = str(raised.value)
    assert "is empty" in problem and "token" in problem
    assert (variable or "ecron.yaml") in problem


def test_callers_come_from_ecron_yaml_the_environment_and_a_tokens_file(tmp_path: Path) -> None:
    """`api_token` is the admin `admin`; `api_tokens`, `ECRON_API_TOKENS` (YAML or JSON) and
    the file `api_tokens_file` names add callers; a name or a token used twice, a role that
    does not exist and an unreadable file are errors that name the field, never the
    token."""
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tokens.yaml").write_text(
        "- {name: grafana, token: v1ew-0123456789abcdef, role: viewer}\n"
    )
    (tmp_path / "ecron.yaml").write_text(
        "api_token: adm1n-0123456789abcdef\napi_tokens_file: tokens.yaml\n"
    )
    environ = {
        "ECRON_API_TOKENS": '[{"name": "ci", "token": "c1-0123456789abcdef", "role": "operator"}]'
    }
    callers = load_config(tmp_path, environ).daemon.callers
    assert [(c.name, str(c.role)) for c in callers] == [
        ("admin", "admin"),
        ("ci", "operator"),
        ("grafana", "viewer"),
    ]
    bad = {
        '[{"name": "ci", "token": "adm1n-0123456789abcdef", "role": "operator"}]': "same token",
        '[{"name": "admin", "token": "x1-0123456789abcdef", "role": "viewer"}]': (
            "'admin' is used twice"
        ),
        '[{"name": "ci", "token": "x1-0123456789abcdef", "role": "boss"}]': "'boss' is not valid",
    }
    for given, why in bad.items():
        with pytest.raises(ConfigError) as raised:
            load_config(tmp_path, {"ECRON_API_TOKENS": given})
        assert why in str(raised.value) and "adm1n-0123456789abcdef" not in str(raised.value)
    (tmp_path / "tokens.yaml").write_text(
        "- {name: grafana, token: v1ew-0123456789abcdef, role: boss}\n"
    )
    with pytest.raises(ConfigError, match=r"tokens.yaml: entry 1: field 'role': 'boss'"):
        load_config(tmp_path, {})
    (tmp_path / "tokens.yaml").unlink()
    with pytest.raises(ConfigError, match="api_tokens_file': cannot read"):
        load_config(tmp_path, {})


async def test_a_405_says_which_methods_the_path_takes(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """A method a path does not serve answers 405 with an `Allow` header naming the ones
    it does (schemathesis's ST204), and the JSON error as every error."""
    async with (
        make_daemon([task("quick", f"{user_service.url}/jobs/quick")]) as daemon,
        aiohttp.ClientSession() as session,
        session.delete(f"http://127.0.0.1:{daemon.port}/api/v1/tasks/quick/run") as answer,
    ):
        allow, status, body = answer.headers.get("Allow"), answer.status, await answer.json()
    assert status == 405 and body["error"] == "Method Not Allowed"
    assert allow is not None and set(allow.split(",")) == {"POST"}


async def test_the_document_declares_the_token_only_where_one_is_asked_for(
    make_daemon: DaemonFactory,
) -> None:
    """Without a token the served OpenAPI document has no `apiToken` scheme and no
    operation asks for one (nor answers 401); with one, every guarded operation asks for
    it and answers 401 and 403."""
    async with make_daemon([]) as daemon:
        _, open_document = await send(daemon, "GET", "/api/v1/openapi.json")
    async with make_daemon([], api_token="t0k-0123456789abcdef") as daemon:
        _, guarded = await send(daemon, "GET", "/api/v1/openapi.json")
    assert "apiToken" not in open_document["components"]["securitySchemes"]
    assert open_document["security"] == []
    runs = open_document["paths"]["/api/v1/tasks/{name}/run"]["post"]
    assert runs["security"] == [] and "401" not in runs["responses"]
    guarded_run = guarded["paths"]["/api/v1/tasks/{name}/run"]["post"]
    assert guarded_run["security"] == [{"apiToken": []}]
    assert {"401", "403"} <= set(guarded_run["responses"])
