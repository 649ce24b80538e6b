"""What the CLI gives away or lets in (issue 34): text from outside never steers the
terminal (N1), and a token need not be on the command line, where ``ps`` shows it to every
user of the machine. Against a live daemon and real processes."""

from __future__ import annotations

import asyncio
import re
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from click.testing import CliRunner, Result

from ecron.cli.group import cli
from ecron.daemon import Daemon
from tests.protocol_support import ended, reply
from tests.support.daemon import DaemonFactory, task
from tests.support.service import UserService

#: An admin's token (16 characters at least).
ADMIN = "admin-token-0123456789abcdef"
#: What a hostile service, caller or file puts in its text: hide what follows, set the
#: window's title, ring, turn the line around, clear the screen (a C1 CSI).
HOSTILE = "\x1b[8m hidden \x1b]0;pwned\x07 \u202e evil \x9b2J\r over"
#: What must never reach a terminal raw: C0 but the line feed, DEL, C1 and the marks that
#: reorder text.
RAW = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2066-\u2069\ufeff]")

pytestmark = pytest.mark.usefixtures("logs_to_stderr")


@pytest.fixture
def database_url(tmp_path: Path) -> str:
    """What the CLI prints does not depend on the database: SQLite."""
    return f"sqlite+aiosqlite:///{tmp_path / 'ecron.db'}"


@pytest.fixture
async def daemon(make_daemon: DaemonFactory, user_service: UserService) -> AsyncIterator[Daemon]:
    """A daemon that asks for an admin token, with one task."""
    callers = [{"name": "root", "token": ADMIN, "role": "admin"}]
    spec = task("report", f"{user_service.url}/jobs/report")
    async with make_daemon([spec], api_tokens=callers) as running:
        yield running


async def ecron(daemon: Daemon, *args: str) -> Result:
    """``ecron ARGS`` against the daemon with the admin token, from a thread (the daemon
    goes on serving)."""
    env = {
        "COLUMNS": "200",
        "ECRON_API_URL": f"http://127.0.0.1:{daemon.port}",
        "ECRON_API_TOKEN": ADMIN,
    }
    return await asyncio.to_thread(CliRunner().invoke, cli, list(args), env=env)


async def test_control_characters_from_services_callers_and_the_database_are_shown_escaped(
    daemon: Daemon, user_service: UserService
) -> None:
    """A refused request whose path holds ``ESC[8m`` (which would hide every older row of
    ``ecron audit``), a service's message and a pause reason full of escape sequences, a
    carriage return, a C1 control and a right-to-left override: ``audit``, ``executions``,
    ``show``, ``pause`` and ``watch --json`` print each of them written out (``\\x1b``),
    none raw."""
    async with aiohttp.ClientSession() as session:
        base = f"http://127.0.0.1:{daemon.port}/api/v1/tasks"
        async with session.post(f"{base}/%1B%5B8m%0Dhidden/run") as refused:
            assert refused.status == 401
    user_service.script["POST"] = [reply(200, {"status": "FAILED", "message": HOSTILE})]
    execution, _ = await daemon.parts.commands.run_now("report")
    eid = execution.eid
    await ended(daemon, eid)
    outputs = {
        "audit": await ecron(daemon, "audit", "--wide"),
        "executions": await ecron(daemon, "executions", "--wide"),
        "show": await ecron(daemon, "show", eid),
        "pause": await ecron(daemon, "pause", "report", "--reason", HOSTILE),
        "watch": await ecron(daemon, "watch", eid, "--json"),
    }
    for name, result in outputs.items():
        assert result.exit_code in (0, 1), (name, result.output)
        assert RAW.search(result.output) is None, (name, result.output)
    assert "\\x1b[8m\\rhidden" in outputs["audit"].output
    for name in ("executions", "show", "pause"):
        assert "\\x1b[8m hidden \\x1b]0;pwned\\x07 \\u202e evil \\x9b2J\\r over" in (
            outputs[name].output
        ), name
    assert "\\u202e evil \\u009b2J" in outputs["watch"].output


async def test_the_cli_reads_its_token_from_a_file_and_it_never_shows_in_ps(
    tmp_path: Path,
) -> None:
    """``ecron tasks --token-file F`` sends the file's token (its line end left out), and
    the command line of the running process, which every user of the machine can read
    (``ps``, ``/proc/PID/cmdline``), does not hold it."""
    token = "cli-token-from-a-file-0123456789"
    secret_file = tmp_path / "token"
    secret_file.write_text(token + "\n")
    secret_file.chmod(0o600)
    asked, go_on = asyncio.Event(), asyncio.Event()
    sent: list[str] = []

    async def tasks(request: web.Request) -> web.Response:
        sent.append(request.headers.get("Authorization", ""))
        asked.set()
        await go_on.wait()  # the process waits for its answer while its command line is read
        return web.json_response({"items": []})

    app = web.Application()
    app.router.add_get("/api/v1/tasks", tasks)
    runner = web.AppRunner(app, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "ecron",
            "tasks",
            "--api",
            f"http://127.0.0.1:{port}",
            "--token-file",
            str(secret_file),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        try:
            done = asyncio.ensure_future(process.wait())
            await asyncio.wait(
                [done, asyncio.ensure_future(asked.wait())],
                timeout=30,
                return_when=asyncio.FIRST_COMPLETED,
            )
            assert asked.is_set(), await _output(process)
            command_line = await asyncio.to_thread(Path(f"/proc/{process.pid}/cmdline").read_bytes)
            go_on.set()
            assert await asyncio.wait_for(process.wait(), 30) == 0, await _output(process)
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
    finally:
        go_on.set()
        await runner.cleanup()
    assert sent == [f"Bearer {token}"]
    assert str(secret_file).encode() in command_line
    assert token.encode() not in command_line


async def _output(process: asyncio.subprocess.Process) -> str:
    """What the process printed so far (it has ended, or is killed first)."""
    if process.returncode is None:
        process.kill()
        await process.wait()
    assert process.stdout is not None
    return (await process.stdout.read()).decode(errors="replace")
