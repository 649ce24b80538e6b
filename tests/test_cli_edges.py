"""The CLI's rough edges (issue 23): a client command starts without the daemon's imports,
a taken port is one line naming it, a YAML syntax error points at its real place, and
``ecron tasks`` drops whole columns at 80 columns rather than cut a name or a schedule."""

from __future__ import annotations

import asyncio
import importlib
import os
import re
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from click.testing import CliRunner

from ecron.cli import cli, client_cmds, validate  # noqa: F401  (registers commands)
from ecron.cli.display import short_length
from ecron.cli.group import COMMANDS
from ecron.daemon import Daemon
from ecron.ids import SHORT_ID
from tests.protocol_support import ended, run_once
from tests.support.daemon import DaemonFactory, task
from tests.support.processes import finished
from tests.support.service import UserService

#: The worktree, whose ``ecron`` the subprocesses run.
ROOT = Path(__file__).resolve().parent.parent
#: What a client command must not import: the daemon's parts and the libraries only they
#: need (together they were two thirds of ``ecron tasks``'s 1.5 s).
HEAVY = ("aiohttp", "pydantic", "sqlalchemy", "sqlmodel", "yaml", "structlog", "apscheduler")
HEAVY_ECRON = ("ecron.executor", "ecron.config", "ecron.daemon", "ecron.store", "ecron.api")
#: The modules of ``ecron/cli`` that define commands.
CLI_MODULES = [
    f"ecron.cli.{path.stem}"
    for path in sorted((ROOT / "ecron" / "cli").glob("*.py"))
    if "@cli." in path.read_text(encoding="utf-8")
]
#: A task name and a schedule that do not fit 80 columns side by side with the rest.
LONG_NAME = "warehouse-export-for-the-finance-team"
LONG_ZONE = "America/Argentina/Buenos_Aires"


@pytest.fixture
def database_url(tmp_path: Path) -> str:
    """The CLI does not depend on the database: SQLite here."""
    return f"sqlite+aiosqlite:///{tmp_path / 'ecron.db'}"


@pytest.fixture
async def daemon(make_daemon: DaemonFactory, user_service: UserService) -> AsyncIterator[Daemon]:
    """A daemon with a short task and one whose name and schedule are long."""
    user_service.durations.update(quick=0.2)
    url = f"{user_service.url}/jobs/quick"
    specs = [
        task("quick", url),
        task(LONG_NAME, url, schedule="0 3 * * 1-5", timezone=LONG_ZONE),
    ]
    async with make_daemon(specs) as running:
        yield running


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A port of 127.0.0.1 that a socket listens on for the whole test."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def ecron_process(
    *args: str, columns: int = 80, python: tuple[str, ...] = ()
) -> tuple[int, str, str]:
    """``python PYTHON -m ecron ARGS`` in a terminal of ``columns`` (the daemon of the test
    goes on serving meanwhile); its exit status, stdout and stderr."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        *python,
        "-m",
        "ecron",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "COLUMNS": str(columns)},
        cwd=ROOT,
    )
    out, err = await finished(process, timeout=60)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def test_a_client_command_imports_neither_aiohttp_nor_pydantic_nor_the_daemon(
    daemon: Daemon,
) -> None:
    """``ecron tasks`` against a live daemon loads click, rich and the standard library's
    HTTP client: none of the daemon's modules or libraries (``-X importtime`` lists every
    module the command imported), so it starts in a fraction of the time."""
    api = f"http://127.0.0.1:{daemon.port}"
    code, out, err = await ecron_process("tasks", "--api", api, python=("-X", "importtime"))
    assert code == 0, err
    assert "quick" in out
    imported = {
        line.rpartition("|")[2].strip() for line in err.splitlines() if line.startswith("import")
    }
    assert {"ecron.cli.client", "rich.table"} <= imported  # (importlib's own are not listed)
    heavy = sorted(
        name for name in imported if name.split(".")[0] in HEAVY or name.startswith(HEAVY_ECRON)
    )
    assert heavy == []


def test_the_table_of_commands_names_each_command_and_its_module() -> None:
    """``COMMANDS`` (what ``ecron`` imports for which command) is what the command modules
    define: a command missing from it, or under the wrong module, would never be found."""
    for module in sorted(set(COMMANDS.values()) | set(CLI_MODULES)):
        importlib.import_module(module)
    assert {name: command.callback.__module__ for name, command in cli.commands.items()} == (
        COMMANDS
    )


def test_every_command_is_still_listed_and_found() -> None:
    """The commands register when first asked for; ``--help`` still lists every one."""
    result = CliRunner().invoke(cli, ["--help"])
    assert result.exit_code == 0
    for name in ("run", "db", "demo", "validate", "plan", "tasks", "trigger", "watch", "audit"):
        assert re.search(rf"^\s+{re.escape(name)}\s", result.output, re.MULTILINE), name
    assert "check-service" in result.output


def write_config(directory: Path, port: int) -> None:
    (directory / "tasks").mkdir(parents=True)
    (directory / "ecron.yaml").write_text(
        f"database: sqlite+aiosqlite:///{directory / 'ecron.db'}\nlisten: 127.0.0.1:{port}\n"
        "log: {format: json, level: info}\n"
    )
    (directory / "tasks" / "jobs.yaml").write_text(
        "tasks:\n  - name: hello\n    schedule: manual\n    url: http://127.0.0.1:9/jobs/hello\n"
    )


def said_besides_logs(stderr: str) -> list[str]:
    """The lines of stderr that are not the daemon's JSON log lines."""
    return [line for line in stderr.splitlines() if line.strip() and not line.startswith("{")]


def test_ecron_run_on_a_taken_port_says_so_in_one_line(tmp_path: Path, taken_port: int) -> None:
    """``ecron run`` on a port something listens on exits 1 with one line naming the
    address, and no traceback."""
    write_config(tmp_path, taken_port)
    result = subprocess.run(
        [sys.executable, "-m", "ecron", "run", "-c", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert result.returncode == 1
    assert said_besides_logs(result.stderr) == [
        f"Error: cannot listen on 127.0.0.1:{taken_port}: the address is already in use "
        "(another ecron, or another program?)"
    ], result.stderr


@pytest.mark.parametrize("option", ["--port", "--service-port"])
def test_ecron_demo_on_a_taken_port_says_so_in_one_line(taken_port: int, option: str) -> None:
    """``ecron demo`` with its API's or its example service's port taken exits 1 with one
    line naming the port, and no traceback."""
    ports = {"--port": str(free_port()), "--service-port": "0", option: str(taken_port)}
    result = subprocess.run(
        [sys.executable, "-m", "ecron", "demo", *(x for kv in ports.items() for x in kv)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert said_besides_logs(result.stderr) == [
        f"Error: cannot listen on 127.0.0.1:{taken_port}: the address is already in use "
        "(another ecron, or another program?)"
    ], result.stderr


def test_an_unclosed_quote_is_reported_where_it_opens(tmp_path: Path) -> None:
    """A quote left open on line 3 of a 5-line task file: PyYAML only finds out at the end
    of the file, so ``ecron validate`` names line 3 (where the quote opens) and says what
    PyYAML said, not "line 6"."""
    (tmp_path / "tasks").mkdir()
    (tmp_path / "ecron.yaml").write_text("database: sqlite+aiosqlite:///ecron.db\n")
    (tmp_path / "tasks" / "jobs.yaml").write_text(
        "tasks:\n"
        "  - name: hello\n"
        '    url: "http://127.0.0.1:8081/jobs/hello\n'
        "    schedule: manual\n"
        "    poll_interval: 5s\n"
    )
    result = CliRunner().invoke(cli, ["validate", "-c", str(tmp_path)])
    assert result.exit_code == 1
    assert (
        "tasks/jobs.yaml: line 3, column 10: the YAML cannot be read: while scanning a quoted "
        "scalar, found unexpected end of stream at the end of the file."
    ) in result.output
    assert "line 6" not in result.output


def test_a_misplaced_key_is_reported_where_it_is_with_the_mapping_it_breaks(
    tmp_path: Path,
) -> None:
    """When PyYAML stops on a token in the middle of the file, that token's place leads and
    the place where the collection it breaks began follows."""
    (tmp_path / "tasks").mkdir()
    (tmp_path / "ecron.yaml").write_text("database: sqlite+aiosqlite:///ecron.db\n")
    (tmp_path / "tasks" / "jobs.yaml").write_text(
        "tasks:\n  - name: hello\n    url: http://s/jobs\n   schedule: manual\n"
    )
    result = CliRunner().invoke(cli, ["validate", "-c", str(tmp_path)])
    assert result.exit_code == 1
    assert (
        "tasks/jobs.yaml: line 4, column 4: the YAML cannot be read: while parsing a block "
        "collection (from line 2, column 3), did not find expected '-' indicator."
    ) in result.output


async def test_tasks_at_80_columns_drop_whole_columns_and_never_cut_a_name_or_schedule(
    daemon: Daemon,
) -> None:
    """A task name and schedule too long for 80 columns with the rest: ``ecron tasks``
    leaves out whole columns (``at`` first), says which, and prints every name and schedule
    whole on its task's one line; wider, every column is there, with the ids cut to the
    shortest prefix that tells them apart, which ``ecron show`` takes."""
    eids = [await run_once(daemon, name) for name in ("quick", LONG_NAME)]
    for eid in eids:
        await ended(daemon, eid)
    api = f"http://127.0.0.1:{daemon.port}"
    code, out, err = await ecron_process("tasks", "--api", api)
    assert code == 0, err
    lines = out.splitlines()
    header, body = lines[0], lines[2:]
    assert header.split() == ["task", "schedule"], out
    schedule = f"cron 0 3 * * 1-5 ({LONG_ZONE})"
    assert any(line.startswith(LONG_NAME) and line.rstrip().endswith(schedule) for line in body)
    assert len(body) == 3 and body[-1].startswith("(next fire, last run, at, last id left out")
    code, out, err = await ecron_process("tasks", "--api", api, columns=200)
    assert code == 0, err
    length = short_length(eids)
    rows = [re.split(r"\s{2,}", line.strip()) for line in out.splitlines()[2:]]
    assert sorted(row[-1] for row in rows) == sorted(eid[:length] for eid in eids), out
    code, out, err = await ecron_process("show", eids[1][:length], "--api", api)
    assert code == 0 and eids[1] in out, err


async def ended_run(daemon: Daemon) -> str:
    """The id of a run of ``quick`` asked through the API, once it has ended."""
    eid = await run_once(daemon, "quick")
    await ended(daemon, eid)
    return eid


async def test_a_short_id_in_a_table_is_unique_in_the_whole_history(daemon: Daemon) -> None:
    """Runs made within a minute share their first 8 characters (the top of a UUIDv7's
    millisecond clock). ``ecron tasks`` shows only the last, and ``executions --limit 1``
    one: each cuts it where it is the start of no other id in the database, not only of
    those on screen, so ``ecron show`` finds it instead of answering 409."""
    eids = [await ended_run(daemon), await ended_run(daemon)]
    while eids[-1][:SHORT_ID] != eids[-2][:SHORT_ID]:  # the clock's top moved in between
        eids.append(await ended_run(daemon))
    api = f"http://127.0.0.1:{daemon.port}"
    code, out, err = await ecron_process("tasks", "--api", api, columns=200)
    assert code == 0, err
    row = next(line.split() for line in out.splitlines() if line.startswith("quick"))
    shown = row[-1]
    assert eids[-1].startswith(shown) and len(shown) > SHORT_ID
    assert not any(eid.startswith(shown) for eid in eids[:-1])
    assert short_length([eids[-1]]) == SHORT_ID  # among the ids shown, 8 would have done
    code, out, err = await ecron_process("show", shown, "--api", api)
    assert code == 0 and eids[-1] in out, err
    code, out, err = await ecron_process("show", eids[-1][:SHORT_ID], "--api", api)
    assert code == 1 and "execution ids; give more of the id" in err, err
    code, out, err = await ecron_process("executions", "--limit", "1", "--api", api)
    assert code == 0, err
    assert out.splitlines()[2].split()[0] == shown


async def test_a_daemon_too_old_to_say_leaves_ids_unique_among_those_shown(
    daemon: Daemon,
) -> None:
    """Against a daemon without ``/api/v1/short-ids`` (it answers 404: one of an older
    version, here a server that serves a live daemon's task list and nothing else),
    ``ecron tasks`` still prints its table, the ids cut where they differ from each other."""
    eids = [await ended_run(daemon), await ended_run(daemon)]
    api = f"http://127.0.0.1:{daemon.port}"
    async with aiohttp.ClientSession() as session, session.get(api + "/api/v1/tasks") as got:
        listed = await got.json()

    async def task_list(_request: web.Request) -> web.Response:
        return web.json_response(listed)

    older = web.Application()
    older.router.add_get("/api/v1/tasks", task_list)
    runner = web.AppRunner(older)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        port = runner.addresses[0][1]
        code, out, err = await ecron_process(
            "tasks", "--api", f"http://127.0.0.1:{port}", columns=200
        )
    finally:
        await runner.cleanup()
    assert code == 0, err
    row = next(line.split() for line in out.splitlines() if line.startswith("quick"))
    assert row[-1] == eids[-1][:SHORT_ID]
