"""The ``ecron`` command as people run it: real processes, real ports, real signals."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from ecron.cli import cli, client_cmds, daemon_cmds, demo, validate  # noqa: F401  (registers commands)
from tests.support.service import wait_for

pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def ecron(*args: str) -> list[str]:
    return [sys.executable, "-m", "ecron", *args]


def write_config(directory: Path, port: int, service_port: int) -> None:
    (directory / "tasks").mkdir(parents=True)
    (directory / "ecron.yaml").write_text(
        f"database: sqlite+aiosqlite:///ecron.db\nlisten: 127.0.0.1:{port}\n"
        "tick: 100ms\nlog: {format: json, level: info}\n"
    )
    (directory / "tasks" / "jobs.yaml").write_text(
        "tasks:\n"
        "  - name: hello\n"
        "    schedule: manual\n"
        f"    url: http://127.0.0.1:{service_port}/jobs/hello\n"
        "    poll_interval: 200ms\n"
        "  - name: long\n"
        "    schedule: manual\n"
        f"    url: http://127.0.0.1:{service_port}/jobs/long\n"
        "    body: {duration: 60s}\n"
    )


def get_json(url: str) -> object:
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.loads(response.read())


@pytest.fixture
def example_service() -> Iterator[int]:
    """The example service as its own process, its jobs lasting 1 s."""
    port = free_port()
    script = Path(__file__).resolve().parent.parent / "examples" / "job_service.py"
    process = subprocess.Popen(
        [sys.executable, str(script), "--port", str(port), "--duration", "1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        wait_until_listening(port)
        yield port
    finally:
        ended(process)


def ended(process: subprocess.Popen[str], sig: int = signal.SIGTERM, timeout: float = 10) -> str:
    """Send ``sig`` to ``process`` and reap it (killed if it does not end within ``timeout``
    seconds, so that no process or pipe outlives the test); what it wrote on stderr."""
    process.send_signal(sig)
    try:
        _, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        _, err = process.communicate()
    return err or ""


def listening(port: int) -> bool:
    """True when something accepts connections on ``port`` of 127.0.0.1."""
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def wait_until_listening(port: int, timeout: float = 15.0) -> None:
    """Wait (these tests are synchronous) until a process listens on ``port``."""
    try:
        asyncio.run(wait_for(lambda: listening(port), timeout=timeout, interval=0.05))
    except AssertionError as exc:
        raise AssertionError(f"nothing listens on port {port}: {exc}") from exc


def test_ecron_run_serves_the_api_runs_a_task_and_stops_cleanly_on_sigterm(
    tmp_path: Path, example_service: int
) -> None:
    """`ecron run -c DIR` migrates, serves /healthz and the API, `ecron trigger --wait` follows a
    run to SUCCESS (exit 0), `ecron cancel` stops a long one, and SIGTERM ends the daemon with
    exit status 0."""
    port = free_port()
    write_config(tmp_path, port, example_service)
    daemon = subprocess.Popen(ecron("run", "-c", str(tmp_path)), stderr=subprocess.PIPE, text=True)
    try:
        wait_until_listening(port)
        health = get_json(f"http://127.0.0.1:{port}/healthz")
        assert isinstance(health, dict) and health["status"] == "ok" and health["node"]
        api = f"http://127.0.0.1:{port}"
        result = subprocess.run(
            ecron("trigger", "hello", "--wait", "--api", api),
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert result.returncode == 0, result.stdout + result.stderr
        assert "SUCCESS" in result.stdout
        listing = subprocess.run(
            ecron("executions", "--api", api), capture_output=True, text=True, timeout=30
        )
        assert "hello" in listing.stdout and "SUCCESS" in listing.stdout
        started = subprocess.run(
            ecron("trigger", "long", "--api", api), capture_output=True, text=True, timeout=30
        )
        eid = started.stdout.split()[-1]
        cancelled = subprocess.run(
            ecron("cancel", eid, "--api", api), capture_output=True, text=True, timeout=30
        )
        assert cancelled.returncode == 0, cancelled.stderr
        assert "CANCELLED" in cancelled.stdout and "acknowledged" in cancelled.stdout
        newest = subprocess.run(
            ecron("executions", "--limit", "1", "--api", api),
            capture_output=True,
            text=True,
            timeout=30,
            env={**os.environ, "COLUMNS": "200"},
        )
        cursor = re.search(r"more: --before (\S+)", newest.stdout)
        assert cursor is not None, newest.stdout
        older = subprocess.run(
            ecron("executions", "--before", cursor.group(1), "--api", api),
            capture_output=True,
            text=True,
            timeout=30,
            env={**os.environ, "COLUMNS": "200"},
        )
        assert older.returncode == 0 and "hello" in older.stdout and "long" not in older.stdout
    finally:
        logs = ended(daemon, signal.SIGTERM, timeout=20)
    assert daemon.returncode == 0, logs
    events = [json.loads(line)["event"] for line in logs.splitlines() if line.startswith("{")]
    assert "daemon_started" in events and "daemon_stopped" in events


def test_ecron_db_upgrade_creates_the_schema_once(tmp_path: Path) -> None:
    """`ecron db upgrade -c DIR` migrates a new database, then finds nothing to do."""
    write_config(tmp_path, free_port(), free_port())
    first = CliRunner().invoke(cli, ["db", "upgrade", "-c", str(tmp_path)])
    second = CliRunner().invoke(cli, ["db", "upgrade", "-c", str(tmp_path)])
    assert first.exit_code == 0 and "migrated from nothing" in first.output
    assert second.exit_code == 0 and "already at revision" in second.output
    assert (tmp_path / "ecron.db").exists()


def test_client_commands_say_clearly_when_no_daemon_answers() -> None:
    """Without a daemon the client commands exit 1 naming the URL they tried."""
    result = CliRunner().invoke(cli, ["tasks", "--api", f"http://127.0.0.1:{free_port()}"])
    assert result.exit_code == 1
    assert "cannot reach ecron at http://127.0.0.1:" in result.output


def test_the_demo_shows_an_execution_go_from_claimed_through_running_to_success(
    tmp_path: Path,
) -> None:
    """`ecron demo` runs the example service and the daemon and prints the moves of an
    execution: claimed ahead of its fire time (SCHEDULED), RUNNING with progress and an
    ETA, SUCCESS with how long it took. Each line starts with the time it was printed (to
    the second, with the zone: a clock that moves, not the fire time again). Asked for port
    0 it names the port it took; each line fits 80 columns (the database's path aside), ids
    short."""
    env = {**os.environ, "COLUMNS": "80"}
    result = subprocess.run(
        ecron(
            "demo",
            "--dir",
            str(tmp_path),
            "--port",
            "0",
            "--service-port",
            "0",
            "--every",
            "2s",
            "--duration",
            "1500ms",
            "--run-for",
            "7s",
        ),
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    port = re.search(r"dashboard http://127\.0\.0\.1:(\d+)/", result.stdout)
    assert port is not None and int(port.group(1)) > 0, result.stdout
    lines = [line for line in result.stdout.splitlines() if str(tmp_path) not in line]
    assert all(len(line) <= 80 for line in lines), result.stdout
    moves: dict[str, list[tuple[str, float]]] = {}
    clocks: dict[str, list[str]] = {}
    for line in lines:
        found = re.search(
            r"^(\d\d:\d\d:\d\d UTC)\s+([0-9a-f-]{8,35})\s.*?([\d.]+)%\s+"
            r"(SCHEDULED|PENDING|RUNNING|SUCCESS)",
            line,
        )
        if found:
            moves.setdefault(found.group(2), []).append((found.group(4), float(found.group(3))))
            clocks.setdefault(found.group(2), []).append(found.group(1))

    def went_all_the_way(seen: list[tuple[str, float]]) -> bool:
        statuses = [status for status, _ in seen]
        midway = [p for status, p in seen if status == "RUNNING" and 0 < p < 100]
        return statuses[0] == "SCHEDULED" and statuses[-1] == "SUCCESS" and bool(midway)

    assert any(went_all_the_way(seen) for seen in moves.values()), result.stdout
    assert any(len(set(times)) > 1 for times in clocks.values()), result.stdout
    assert all(times == sorted(times) for times in clocks.values()), result.stdout
    assert re.search(r"RUNNING\s+ETA \d\d:\d\d:\d\d UTC", result.stdout), result.stdout
    assert re.search(r"SUCCESS\s+in \d\.\d s", result.stdout), result.stdout
    assert "demo stopped" in result.stdout
