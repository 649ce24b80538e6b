"""What the config lets in or gives away (issue 34): a URL's password and secret query
values shown nowhere a change of it is told (N4), a task row's digest keyed so that a copy
of the database confirms no guess of a secret (N5), tokens long enough not to be guessed
and examples that ship none (N6), tokens-file changes taken by SIGHUP, revocation included
(N7), a tokens file others may write (N8), a caller written as a bare token (N9).
``ecron validate`` as a user runs it, and real nodes."""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import re
import signal
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import sqlalchemy as sa
from click.testing import CliRunner
from structlog.testing import capture_logs

from ecron.cli import cli, plan  # noqa: F401  (registers the command)
from ecron.config import Config, load_config
from ecron.config.digests import digest_key, spec_digest
from ecron.config.model import TaskSpec
from ecron.core.audit import AuditQuery
from ecron.daemon import Daemon
from ecron.store.tables import task_table
from tests.chaos.launcher import start_warm_node
from tests.support.cluster import (
    Node,
    clean_up,
    request,
    stop_node,
    task_yaml,
    write_config,
)
from tests.support.daemon import DaemonFactory, task
from tests.support.service import UserService, wait_for
from tests.test_security_findings import validate

ROOT = Path(__file__).resolve().parent.parent
#: A token a problem must never quote.
SECRET = "s3cret-t0ken-0123456789abcdef"


def config_dir(tmp_path: Path, ecron_yaml: str) -> Path:
    (tmp_path / "tasks").mkdir(parents=True, exist_ok=True)
    (tmp_path / "ecron.yaml").write_text(ecron_yaml)
    return tmp_path


def test_a_token_shorter_than_16_characters_is_an_error_naming_where_and_never_quoting_it(
    tmp_path: Path,
) -> None:
    """`api_token`, an `api_tokens` entry, `ECRON_API_TOKEN` and a tokens file's entry of 15
    characters are each refused (exit 1), naming the file or variable and the field, saying
    how to make one, and not quoting the token; 16 characters are accepted."""
    short = "0123456789abcde"  # 15
    cases = {
        "ecron.yaml: field 'api_token'": (f"api_token: {short}\n", {}),
        "ecron.yaml: field 'api_tokens[1].token'": (
            f"api_tokens: [{{name: ci, token: {short}, role: operator}}]\n",
            {},
        ),
        "environment variable ECRON_API_TOKEN: field 'api_token'": ("", {"ECRON_API_TOKEN": short}),
        "tokens.yaml: entry 1: field 'token'": ("api_tokens_file: tokens.yaml\n", {}),
    }
    for said, (ecron_yaml, environ) in cases.items():
        directory = config_dir(tmp_path / str(len(said)), ecron_yaml)
        (directory / "tokens.yaml").write_text(f"- {{name: ci, token: {short}, role: viewer}}\n")
        code, output = validate(directory, environ)
        assert code == 1, (said, output)
        assert said in output and "shorter than 16 characters" in output, (said, output)
        assert "openssl rand -hex 32" in output and short not in output, (said, output)
    fine = config_dir(tmp_path / "fine", f"api_token: {short}f\n")
    assert validate(fine)[0] == 0


def test_the_examples_ship_no_token_and_say_how_to_make_one() -> None:
    """No file of the repository's examples or docs sets a token or secret such as
    `change-me`: compose refuses to start without `ECRON_API_TOKEN` and `ECRON_SECRET` and
    says how to make them, and the Kubernetes Secret's values are empty (an empty token is
    a config error) until made with `openssl rand`."""
    compose = (ROOT / "examples/deploy/compose/compose.yaml").read_text()
    secret = (ROOT / "examples/deploy/kubernetes/secret.yaml").read_text()
    shipped = [
        path
        for path in [*ROOT.glob("examples/**/*"), *ROOT.glob("docs/*.md"), ROOT / "README.md"]
        if path.is_file() and re.search(r"change-?me", path.read_text(errors="replace"), re.I)
    ]
    assert shipped == []
    for variable in ("ECRON_API_TOKEN", "ECRON_SECRET"):
        assert re.search(rf"\$\{{{variable}:\?[^}}]*openssl rand -hex 32", compose), variable
    for key in ("api-token", "secret"):
        assert re.search(rf"^  {key}: \"\"$", secret, re.M), key
    assert "openssl rand -hex 32" in secret


def test_a_tokens_file_every_user_may_write_is_refused(tmp_path: Path) -> None:
    """A tokens file of mode 0666 (anyone on the machine could add an admin of their own)
    is a config error naming the file and how to fix it, quoting none of its tokens; the
    same file at 0640 is accepted."""
    directory = config_dir(tmp_path, "api_tokens_file: tokens.yaml\n")
    tokens = directory / "tokens.yaml"
    tokens.write_text(f"- {{name: ci, token: {SECRET}, role: admin}}\n")
    tokens.chmod(0o666)
    code, output = validate(directory)
    assert code == 1, output
    assert "tokens.yaml: is writable by every user" in output and "chmod o-w" in output
    assert SECRET not in output
    tokens.chmod(0o640)
    assert validate(directory)[0] == 0


def test_a_caller_written_as_a_bare_token_is_refused_without_quoting_it(tmp_path: Path) -> None:
    """A caller written as its token alone (`- TOKEN` instead of `{name, token, role}`), in
    ecron.yaml, in `ECRON_API_TOKENS` or in a tokens file, or a token that is not text, is
    a config error naming the file, the entry and the field, never quoting the token."""
    directory = config_dir(
        tmp_path,
        f"api_tokens:\n  - {SECRET}\n  - {{name: ci, token: 12345678901234567890, role: viewer}}\n"
        "api_tokens_file: tokens.yaml\n",
    )
    (directory / "tokens.yaml").write_text(f"- {SECRET}x\n- [{SECRET}y]\n")
    code, output = validate(directory)
    assert code == 1, output
    assert "ecron.yaml: field 'api_tokens[1]'" in output
    assert "ecron.yaml: field 'api_tokens[2].token'" in output
    assert "tokens.yaml: entry 1: field 'the entry'" in output
    assert "tokens.yaml: entry 2: field 'the entry'" in output
    assert SECRET not in output and "12345678901234567890" not in output
    directory = config_dir(tmp_path / "env", "")
    code, output = validate(directory, {"ECRON_API_TOKENS": f'["{SECRET}"]'})
    assert code == 1 and "api_tokens[1]" in output and SECRET not in output, output


async def test_sighup_applies_the_tokens_file_a_removed_token_is_refused_at_once(
    user_service: UserService, tmp_path: Path
) -> None:
    """A real node with `api_tokens_file` naming two callers. The file is rewritten without
    `ci` and with `grafana`, and the node gets SIGHUP: from then on `ci`'s token answers
    401 and `grafana`'s is served (it answered 401 before), the admin's works throughout,
    and the node exits 0."""
    admin, ci, grafana = (f"{name}-token-0123456789abcdef" for name in ("admin", "ci", "grafana"))
    directory = write_config(
        tmp_path / "config",
        "tick: 100ms\nlog: {format: json, level: info}\napi_tokens_file: tokens.yaml\n",
        "tasks:\n" + task_yaml("first", f"{user_service.url}/jobs/a", schedule="manual"),
    )
    tokens = directory / "tokens.yaml"
    tokens.write_text(
        f"- {{name: root, token: {admin}, role: admin}}\n"
        f"- {{name: ci, token: {ci}, role: operator}}\n"
    )
    tokens.chmod(0o600)
    database = f"sqlite+aiosqlite:///{tmp_path / 'ecron.db'}"
    running: list[Node] = []

    async def status(token: str) -> int:
        code, _ = await request(running[0], "GET", "/api/v1/tasks", headers=_bearer(token))
        return code

    try:
        running.append(start_warm_node("node", directory, database, tmp_path))
        node = running[0]
        await wait_for(lambda: _answers(node), timeout=30)
        before = {name: await status(t) for name, t in (("ci", ci), ("grafana", grafana))}
        tokens.write_text(
            f"- {{name: root, token: {admin}, role: admin}}\n"
            f"- {{name: grafana, token: {grafana}, role: viewer}}\n"
        )
        node.process.send_signal(signal.SIGHUP)
        await wait_for(lambda: _is(status(grafana), 200), timeout=10)
        after = {name: await status(t) for name, t in (("ci", ci), ("grafana", grafana))}
        admin_status = await status(admin)
        code = await stop_node(node)
    finally:
        clean_up(running)
    assert before == {"ci": 200, "grafana": 401}
    assert after == {"ci": 401, "grafana": 200}
    assert admin_status == 200
    assert code == 0, node.log_tail()


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def _answers(node: Node) -> bool:
    if node.process.poll() is not None:
        raise AssertionError(f"the node exited\n{node.log_tail()}")
    try:
        code, _ = await request(node, "GET", "/readyz")
    except (aiohttp.ClientError, OSError):
        return False
    return code == 200


async def _is(status: Any, expected: int) -> bool:
    return bool(await status == expected)


async def test_a_urls_password_and_secret_query_values_show_nowhere_a_change_is_told(
    tmp_path: Path, json_logs: io.StringIO
) -> None:
    """A task's URL gains a password and `?api_key=`, its poll URL a `token=`: `ecron plan`
    (text and `--json`), the node's `tasks_synced` log line at the reload and the audit
    log's `change` entry each show the change, with `***` where the password and the
    secret values were, and none of them (nor does any log line)."""
    password, key, token = "hunter2-pw-0123", "k3y-value-0123", "t0ken-value-0123"
    url = f"https://ops:{password}@svc.example/jobs?api_key={key}&kind=full"
    directory = tmp_path / "config"
    tasks = directory / "tasks" / "report.yaml"
    tasks.parent.mkdir(parents=True)
    (directory / "ecron.yaml").write_text(f"database: sqlite+aiosqlite:///{tmp_path / 'e.db'}\n")
    tasks.write_text(
        "tasks:\n" + task_yaml("report", "https://svc.example/jobs", schedule="manual")
    )
    async with Daemon(load_config(directory)) as daemon:
        tasks.write_text(
            "tasks:\n"
            + task_yaml(
                "report",
                url,
                schedule="manual",
                poll_url=f"{url}&token={token}&id={{execution_id}}",
            )
        )
        planned = [
            await asyncio.to_thread(CliRunner().invoke, cli, ["plan", "-c", str(directory), *args])
            for args in ([], ["--json"])
        ]
        await daemon.reload(load_config(directory))
        entries = (await daemon.audit.page(AuditQuery(task="report", action="change"))).items
    logs = json_logs.getvalue()
    synced = [line for line in logs.splitlines() if '"tasks_synced"' in line]
    told = {"plan": planned[0].output, "plan --json": planned[1].output, "log": synced[-1]}
    told["audit"] = json.dumps([entry.detail for entry in entries])
    for where, text in told.items():
        assert "url" in text and "***" in text, (where, text)
        assert "ops:***@svc.example" in text and "api_key=***" in text, (where, text)
    assert "token=***" in told["plan --json"] and "token=***" in told["audit"]
    for secret in (password, key, token):
        for where, text in {**told, "every log line": logs}.items():
            assert secret not in text, (where, secret)


async def test_a_task_rows_spec_hash_is_keyed_with_the_daemons_secret_and_confirms_no_guess(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """The task row's `spec_hash` is an HMAC keyed from the daemon's secret, not a plain
    SHA-256 of the spec: from a copy of the database, the digest of the spec with a
    guessed header value (the right one included) matches nothing. A row of an older ecron
    (a plain digest) is rewritten keyed at the next sync, and that is no change: no
    `tasks_synced` change, no audit entry."""
    header = {"Authorization": "Bearer the-right-guess-0123456789"}
    spec = task("report", f"{user_service.url}/jobs/x", headers=header)
    async with make_daemon([spec]) as daemon:
        stored = await _spec_hash(daemon)
        keyed = spec_digest(spec.dumped, digest_key(daemon.callback_secret))
        plain = hashlib.sha256(orjson.dumps(spec.dumped, option=orjson.OPT_SORT_KEYS)).hexdigest()
        async with daemon.store.engines.write() as conn:  # as an older ecron wrote it
            await conn.execute(sa.update(task_table).values(spec_hash=plain))
        with capture_logs() as logs:
            again = task("report", f"{user_service.url}/jobs/x", headers=header)
            await daemon.reload(_config(daemon, again))
        rewritten = await _spec_hash(daemon)
        changes = (await daemon.audit.page(AuditQuery(task="report", action="change"))).items
    assert stored == keyed and stored != plain
    assert rewritten == keyed
    assert [line for line in logs if line["event"] == "tasks_synced"] == []
    assert changes == []


async def _spec_hash(daemon: Daemon) -> str:
    async with daemon.store.engines.read() as conn:
        query = sa.select(task_table.c.spec_hash).where(task_table.c.name == "report")
        return str((await conn.execute(query)).scalar_one())


def _config(daemon: Daemon, *specs: TaskSpec) -> Config:
    return Config(
        directory=daemon.config.directory, daemon=daemon.settings, tasks={s.name: s for s in specs}
    )


async def test_plan_keys_the_digests_as_the_node_does_and_an_older_database_shows_no_change(
    tmp_path: Path,
) -> None:
    """A node wrote the task rows, their digests keyed from the secret it generated and
    stored, or from the configured `secret`: `ecron plan` of the same files keys its own
    as the node does and says no change (unkeyed, it read the task's header as changed).
    On a database an older ecron wrote (plain SHA-256 digests), neither `ecron plan` nor a
    node's start sees a change, and the start rewrites the rows keyed."""
    header = "{Authorization: 'Bearer the-services-token-0123456789'}"
    tasks = "tasks:\n" + task_yaml(
        "report", "http://127.0.0.1:9/jobs/x", schedule="'0 0 1 1 *'", headers=header
    )
    configured = "secret: the-configured-secret-0123456789abcdef\n"
    for case, secret in (("generated", ""), ("configured", configured)):
        database = f"sqlite+aiosqlite:///{tmp_path / case}.db"
        directory = write_config(
            tmp_path / case, f"database: '{database}'\nlisten: 127.0.0.1:0\n{secret}", tasks
        )
        async with Daemon(load_config(directory)) as daemon:
            keyed = await _spec_hash(daemon)
        result = await asyncio.to_thread(CliRunner().invoke, cli, ["plan", "-c", str(directory)])
        assert (result.exit_code, result.stdout) == (0, NO_CHANGE), (case, result.output)
    async with Daemon(load_config(directory)) as daemon:  # as an older ecron wrote it
        plain = daemon.specs["report"].plain_digest
        async with daemon.store.engines.write() as conn:
            await conn.execute(sa.update(task_table).values(spec_hash=plain))
    result = await asyncio.to_thread(CliRunner().invoke, cli, ["plan", "-c", str(directory)])
    assert (result.exit_code, result.stdout) == (0, NO_CHANGE), result.output
    with capture_logs() as logs:
        async with Daemon(load_config(directory)) as daemon:
            rewritten = await _spec_hash(daemon)
    assert [line for line in logs if line["event"] == "tasks_synced"] == []
    assert rewritten == keyed != plain


NO_CHANGE = "No change: 0 to add, 0 to change, 0 to retire\n"
