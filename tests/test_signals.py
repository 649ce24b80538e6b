"""Signals reach ``ecron run`` from before its daemon starts (docs/operations.md, "SIGHUP"
and "Graceful shutdown"): a SIGHUP that comes as the node has just said it is ready is a
reload, not the end of the process, and a SIGTERM while it starts ends the start cleanly.
Real processes, each with one moment of its start made to send itself the signal."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

#: ``ecron run -c DIR`` with one function of ``ecron.daemon`` replaced first (``PATCH``).
RUN = """
import asyncio, os, signal, sys
import ecron.daemon as daemon
{patch}
from ecron.cli import main
sys.argv = ["ecron", "run", "-c", sys.argv[1]]
main()
"""


def config(directory: Path) -> Path:
    (directory / "tasks").mkdir(parents=True)
    (directory / "ecron.yaml").write_text(
        f"database: sqlite+aiosqlite:///{directory / 'ecron.db'}\nlisten: 127.0.0.1:0\n"
        "log: {format: json, level: info}\n"
    )
    (directory / "tasks" / "jobs.yaml").write_text(
        "tasks:\n  - {name: report, url: 'http://127.0.0.1:9/jobs/x', schedule: manual}\n"
    )
    return directory


def run_node(directory: Path, patch: str) -> tuple[int, list[dict[str, Any]]]:
    """``ecron run`` with ``patch`` applied; its exit status and JSON log lines."""
    done = subprocess.run(
        [sys.executable, "-c", RUN.format(patch=patch), str(directory)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    lines = (done.stdout + done.stderr).splitlines()
    events = [json.loads(line) for line in lines if line.startswith("{")]
    return done.returncode, events


def test_a_sighup_as_the_node_has_just_started_reloads_it_and_does_not_end_it(
    tmp_path: Path,
) -> None:
    """The node sends itself SIGHUP the moment its daemon is up (before anything else of
    the run, as a SIGHUP sent when /readyz first answers may come): it reloads
    (``tasks_reloaded``), and a SIGTERM then stops it with status 0. The handlers used to
    be set after that moment, and the SIGHUP's default action ended the process."""
    patch = (
        "def settle_memory():\n"
        "    os.kill(os.getpid(), signal.SIGHUP)\n"
        "    asyncio.get_running_loop().call_later(1, os.kill, os.getpid(), signal.SIGTERM)\n"
        "daemon.settle_memory = settle_memory"
    )
    code, events = run_node(config(tmp_path), patch)
    names = [e["event"] for e in events]
    assert code == 0, (code, names)
    assert "tasks_reloaded" in names and names[-1] == "daemon_stopped", names


def test_a_sigterm_while_the_node_starts_ends_the_start_and_the_process_with_status_0(
    tmp_path: Path,
) -> None:
    """The node sends itself SIGTERM while it migrates its database (a start that would
    take a minute): the start ends at once, what it opened is closed, it logs
    ``daemon_stopped_while_starting`` and exits 0, never having said ``daemon_started``.
    It used to be ended on the spot by the signal (status -15)."""
    patch = (
        "async def upgrade(engines):\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    await asyncio.sleep(60)\n"
        "daemon.upgrade = upgrade"
    )
    code, events = run_node(config(tmp_path), patch)
    names = [e["event"] for e in events]
    assert code == 0, (code, names)
    assert names[-1] == "daemon_stopped_while_starting", names
    assert "daemon_started" not in names
