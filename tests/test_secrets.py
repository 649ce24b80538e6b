"""No secret shows anywhere (docs/security.md): task header values, call and step secrets,
the API token, the callback secret and the callback tokens made from it, webhook URLs,
secrets and headers, and database passwords never appear in the logs, in an error
answer, in a snapshot, in the task view, in ``/metrics``, in an alert, or in what
``ecron validate`` prints, valid config or broken.

One daemon is run from a config directory holding a distinctive value for every secret,
against a user service that echoes what it was sent into its answers (so that ecron's
own messages, which quote answers, are put to the test), and a webhook receiver; then
every surface is read and searched for each value.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path
from textwrap import dedent
from typing import Any

import aiohttp
import structlog
from aiohttp import web
from click.testing import CliRunner

import ecron.cli.validate  # noqa: F401  (registers the command)
from ecron import logs
from ecron.cli import cli
from ecron.config import load_config
from ecron.config.hidden import config_secrets
from ecron.daemon import Daemon
from ecron.signing import callback_token
from tests.protocol_support import ended
from tests.support.service import UserService, wait_for

#: One distinctive value per kind of secret.
SECRETS = {
    "header": "hdr-S3CRET-a1b2c3d4",
    "api_key": "key-S3CRET-e5f6g7h8",
    "signing": "sign-S3CRET-i9j0k1l2",
    "step_signing": "step-S3CRET-m3n4o5p6",
    "step_header": "stephdr-S3CRET-q7r8s9",
    "api_token": "api-S3CRET-t0u1v2w3",
    "callback": "cb-S3CRET-x4y5z6a7",
    "webhook_path": "whpath-S3CRET-b8c9d0",
    "webhook_signing": "whsign-S3CRET-e1f2g3",
    "webhook_header": "whhdr-S3CRET-h4i5j6",
    "db_password": "db-S3CRET-k7l8m9",
}
AUTH = {"Authorization": f"Bearer {SECRETS['api_token']}"}


def write_config(root: Path, service: str, hook: str) -> Path:
    """A config directory with every secret in it (the header's through a variable)."""
    s = SECRETS
    (root / "tasks").mkdir(parents=True)
    (root / "ecron.yaml").write_text(
        dedent(f"""\
        database: sqlite+aiosqlite:///ecron.db
        listen: 127.0.0.1:0
        public_url: http://127.0.0.1:9
        api_token: {s["api_token"]}
        secret: {s["callback"]}
        tick: 50ms
        notify:
          retry: {{attempts: 3, backoff: 10ms, max_backoff: 20ms}}
          webhooks:
            - url: {hook}/hooks/{s["webhook_path"]}
              secret: {s["webhook_signing"]}
              headers: {{X-Hook: {s["webhook_header"]}}}
        """)
    )
    (root / "tasks" / "t.yaml").write_text(
        dedent(f"""\
        tasks:
          - name: echo
            schedule: manual
            url: {service}/jobs/echo
            headers: {{Authorization: "Bearer ${{HEADER}}", X-Api-Key: {s["api_key"]}}}
            secret: {s["signing"]}
            poll_interval: 50ms
            max_probe_failures: 2
            request_timeout: 2s
          - name: steps
            schedule: manual
            headers: {{X-Api-Key: {s["api_key"]}}}
            steps:
              - name: a
                url: {service}/jobs/a
                secret: {s["step_signing"]}
                headers: {{X-Step: {s["step_header"]}}}
        """)
    )
    return root


def echoing(service: UserService) -> Any:
    """The user service's answers: a poll (and a step's trigger) answers a "status" made of
    every credential it was sent, which is not a report, so ecron's message quotes it."""

    async def answer(request: web.Request) -> web.StreamResponse | None:
        if request.method == "POST" and "/jobs/echo" in request.path:
            return None  # the job starts, RUNNING
        quoted = " ".join(
            request.headers.get(name, "")
            for name in ("Authorization", "X-Api-Key", "X-Step", "X-Ecron-Callback-Token")
        )
        return web.json_response({"status": quoted, "message": "see status"})

    return answer


class Receiver:
    """A webhook receiver: refuses the first three deliveries (every try of the first
    alert, so its failure is logged), keeps the bodies of the rest."""

    def __init__(self) -> None:
        self.bodies: list[str] = []
        self.refused = 0

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.text()
        if self.refused < 3:
            self.refused += 1
            return web.Response(status=503, text="busy")
        self.bodies.append(body)
        return web.Response(status=204)


async def surfaces(daemon: Daemon, eids: list[str]) -> dict[str, str]:
    """Every answer a person or a tool can read, by what it is."""
    base = f"http://127.0.0.1:{daemon.port}"
    wrong = {"Authorization": f"Bearer {SECRETS['api_token'][:-1]}"}
    asks: list[tuple[str, str, dict[str, str], Any]] = [
        ("GET", "/api/v1/tasks", AUTH, None),
        ("GET", "/api/v1/tasks/echo", AUTH, None),
        ("GET", "/api/v1/tasks/steps", AUTH, None),
        ("GET", "/api/v1/tasks/nope", AUTH, None),
        ("GET", "/api/v1/executions?limit=500", AUTH, None),
        ("GET", "/metrics", {}, None),
        ("GET", "/readyz", {}, None),
        ("GET", "/healthz", {}, None),
        ("GET", "/api/v1/openapi.json", {}, None),
        ("GET", "/api/v1/tasks", {}, None),
        ("POST", "/api/v1/tasks/echo/run", wrong, None),
    ]
    for eid in eids:
        token = {"Authorization": f"Bearer {callback_token(SECRETS['callback'], eid)}"}
        asks += [
            ("GET", f"/api/v1/executions/{eid}", AUTH, None),
            ("GET", f"/api/v1/executions/{eid}/steps", AUTH, None),
            ("POST", f"/api/v1/executions/{eid}/cancel", AUTH, None),
            ("POST", f"/api/v1/executions/{eid}/report", wrong, b"{}"),
            ("POST", f"/api/v1/executions/{eid}/report", token, b'{"status": "nope"}'),
        ]
    found = {}
    async with aiohttp.ClientSession() as session:
        for method, path, headers, data in asks:
            async with session.request(method, base + path, headers=headers, data=data) as r:
                found[f"{method} {path} ({r.status})"] = f"{dict(r.headers)}\n{await r.text()}"
    return found


def validate(directory: Path, environ: dict[str, str]) -> tuple[int, str]:
    """``ecron validate -c DIR`` in ``environ``: its exit code and everything it printed."""
    result = CliRunner().invoke(cli, ["validate", "-c", str(directory)], env=environ)
    return result.exit_code, result.stdout + result.stderr


def leaked(text: str, extra: list[str]) -> list[str]:
    """Which secret values (and ``extra`` ones, made from them) appear in ``text``."""
    return [value for value in [*SECRETS.values(), *extra] if value in text]


async def test_no_secret_shows_in_logs_answers_snapshots_alerts_metrics_or_validate(
    user_service: UserService, json_logs: io.StringIO, tmp_path: Path
) -> None:
    """With a distinctive value for every secret, and a service that echoes its calls'
    credentials into its answers: two executions end FAILED protocol_error (their
    messages quoting the answers, with the secrets written ***), one alert fails (logged)
    and one is delivered, and none of the values, nor the callback tokens ecron made,
    shows in any log line, API answer (snapshots, the task view, errors), /metrics, alert
    body, or ``ecron validate``'s output."""
    user_service.duration = 3600
    user_service.behaviour = echoing(user_service)
    receiver = Receiver()
    app = web.Application()
    app.router.add_post("/hooks/{rest}", receiver.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    hook = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
    environ = {"HEADER": SECRETS["header"]}
    directory = write_config(tmp_path / "config", user_service.url, hook)
    try:
        async with Daemon(load_config(directory, environ)) as daemon:
            eids = [await _run(daemon, name) for name in ("echo", "steps")]
            executions = [await ended(daemon, eid) for eid in eids]
            await wait_for(lambda: receiver.bodies, timeout=10)
            # the other alert fails for good after its retries: logged before the node stops
            await wait_for(lambda: '"alert_failed"' in json_logs.getvalue(), timeout=20)
            answers = await surfaces(daemon, eids)
    finally:
        await runner.cleanup()
    tokens = [callback_token(SECRETS["callback"], r) for r in (*eids, f"{eids[1]}.1")]
    assert [(e.status.value, str(e.reason)) for e in executions] == [
        ("FAILED", "protocol_error"),
        ("FAILED", "protocol_error"),
    ]
    assert all("***" in (e.message or "") for e in executions), [e.message for e in executions]
    for surface, text in answers.items():
        assert leaked(text, tokens) == [], surface
    log_text = json_logs.getvalue()
    assert '"alert_failed"' in log_text and '"alert_sent"' in log_text
    assert leaked(log_text, tokens) == []
    assert leaked("\n".join(receiver.bodies), tokens) == []
    code, printed = validate(directory, environ)
    assert code == 0 and "echo" in printed and leaked(printed, []) == []


async def _run(daemon: Daemon, name: str) -> str:
    url = f"http://127.0.0.1:{daemon.port}/api/v1/tasks/{name}/run"
    async with aiohttp.ClientSession() as session, session.post(url, headers=AUTH) as answer:
        assert answer.status == 202
        eid: str = (await answer.json())["id"]
        return eid


def test_validate_names_every_broken_secret_without_quoting_it(tmp_path: Path) -> None:
    """A config whose secrets are written wrong (a list for a token, a broken ${ in a
    signing secret, a mapping for a header, a webhook URL without http, a database URL of
    the wrong scheme or with a port that is not a number, each holding a secret value):
    ``ecron validate`` names each file, task and field, and quotes none of the values."""
    s = SECRETS
    (tmp_path / "tasks").mkdir()
    (tmp_path / "ecron.yaml").write_text(
        dedent(f"""\
        database: postgres://ecron:{s["db_password"]}@db/ecron
        api_token: [{s["api_token"]}]
        secret: {{x: {s["callback"]}}}
        notify:
          webhooks:
            - {{url: "htp://hooks/{s["webhook_path"]}", secret: [{s["webhook_signing"]}]}}
        """)
    )
    (tmp_path / "tasks" / "t.yaml").write_text(
        dedent(f"""\
        tasks:
          - name: t
            schedule: manual
            url: http://s/jobs
            headers: {{Authorization: {{bearer: {s["header"]}}}, X-Key: "{s["api_key"]}${{"}}
            secret: "{s["signing"]}${{"
            steps: [{{name: a, secret: [{s["step_signing"]}]}}]
        """)
    )
    code, printed = validate(tmp_path, {})
    port = {"ECRON_DATABASE_URL": f"postgresql+asyncpg://ecron:{s['db_password']}@db:x/ecron"}
    port_code, port_printed = validate(tmp_path, port)
    assert code == port_code == 1
    for field in ("database", "api_token", "secret", "notify.webhooks[1].url"):
        assert f"ecron.yaml: field '{field}'" in printed, field
    for field in ("headers.Authorization", "headers.X-Key", "secret", "steps[1].secret"):
        assert f"tasks/t.yaml: task 't': field '{field}'" in printed, field
    assert "environment variable ECRON_DATABASE_URL: field 'database'" in port_printed
    assert "postgres://ecron:***@db/ecron" in printed  # the rest of the URL helps
    assert leaked(printed + port_printed, []) == []


def test_a_database_password_is_hidden_from_log_lines_and_from_a_failed_start(
    tmp_path: Path, json_logs: io.StringIO
) -> None:
    """The password of the database URL (as written and percent-decoded) is registered
    as a secret: a log line quoting the URL shows ***; and ``ecron run`` against a
    PostgreSQL that does not answer fails without printing it."""
    password = "db-S3CRET%2Fk7l8m9"
    url = f"postgresql+asyncpg://ecron:{password}@127.0.0.1:1/ecron"
    (tmp_path / "ecron.yaml").write_text(f"database: {url}\nlisten: 127.0.0.1:0\n")
    config = load_config(tmp_path, {})
    logs.hide(config_secrets(config))
    structlog.get_logger("test").warning("database_unreachable", url=url, text=f"in {url}")
    line = json.loads(json_logs.getvalue().splitlines()[-1])
    assert line["url"] == line["text"].removeprefix("in ") == url.replace(password, "***")
    assert "db-S3CRET/k7l8m9" in config_secrets(config)
    environ = {k: v for k, v in os.environ.items() if not k.startswith("ECRON_")}
    started = subprocess.run(
        [sys.executable, "-m", "ecron", "run", "-c", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        env=environ,
        cwd=Path(__file__).resolve().parent.parent,
    )
    assert started.returncode != 0
    assert "S3CRET" not in started.stdout + started.stderr
