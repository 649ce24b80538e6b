"""``ecron run`` processes that start in well under a second, for the crash loops and every
test of real nodes whose proof is not the start itself (``tests/test_cluster.py`` and the
like; ``ecron run`` from a shell is the README's and ``tests/test_cli.py``'s).

A plain ``python -m ecron run`` spends 2 to 4 seconds of a loaded 2-core machine importing
ecron and its libraries before it does anything; a crash loop of 20 kills cannot wait for
that each time, and the suite's other node tests spent that on each of their starts.
These nodes are forked from a multiprocessing *forkserver* that has imported ecron once:
each child then runs ``ecron run -c DIR`` exactly as the console script does (the same
``ecron.cli.main``, the same arguments, environment and log file), so only the imports
are saved. ``WarmProcess`` has the part of ``subprocess.Popen``'s surface
that ``tests.support.cluster`` uses, so its ``Node``, ``kill_node``, ``stop_node``,
``wait_ready`` and ``clean_up`` work on these nodes unchanged.
"""

from __future__ import annotations

import glob
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cluster import Node, free_port

#: What the forkserver imports once, so that its children start with it loaded.
PRELOAD = [
    "ecron.cli",
    "ecron.cli.daemon_cmds",
    "ecron.daemon",
    "ecron.store.migrate",
    "alembic.command",
    "alembic.config",
    "alembic.runtime.migration",
    "aiosqlite",
    "asyncpg",
    "uvloop",
    "tests.chaos.launcher",
]

_context = multiprocessing.get_context("forkserver")
_context.set_forkserver_preload(PRELOAD)


def _run(directory: str, environment: dict[str, str], log_path: str) -> None:
    """In the child: the log file as stdout and stderr, the node's environment, then the
    ``ecron`` console script's own entry point with ``run -c DIRECTORY``."""
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.environ.update(environment)
    sys.argv = ["ecron", "run", "-c", directory]
    from ecron.cli import main

    main()


class WarmProcess:
    """A node process forked from the forkserver, seen through ``Popen``'s methods."""

    def __init__(self, process: multiprocessing.process.BaseProcess) -> None:
        self._process = process

    @property
    def pid(self) -> int:
        assert self._process.pid is not None
        return self._process.pid

    @property
    def returncode(self) -> int | None:
        return self._process.exitcode

    def poll(self) -> int | None:
        return self._process.exitcode

    def send_signal(self, sig: int) -> None:
        if self._process.exitcode is None:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def wait(self, timeout: float | None = None) -> int:
        self._process.join(timeout)
        if self._process.exitcode is None:
            raise subprocess.TimeoutExpired(f"node {self.pid}", timeout or 0.0)
        return self._process.exitcode


def warm_up() -> None:
    """Start the forkserver (it imports ``PRELOAD``: seconds, once per test session)."""
    probe = _context.Process(target=_nothing)
    probe.start()
    probe.join(60)


def _nothing() -> None:
    """A child that does nothing (starts the forkserver)."""


def start_warm_node(
    name: str,
    directory: Path,
    database_url: str,
    logs: Path,
    *,
    port: int | None = None,
    **env: str,
) -> Node:
    """Like ``tests.support.cluster.start_node``: ``ecron run -c directory`` on a free port
    (or ``port``), its log in ``logs/<name>.log``; forked from the warm forkserver."""
    port = port or free_port()
    log_path = logs / f"{name}.log"
    environment = {
        "ECRON_DATABASE_URL": database_url,
        "ECRON_LISTEN": f"127.0.0.1:{port}",
        **env,
    }
    process = _context.Process(
        target=_run, args=(str(directory), environment, str(log_path)), name=f"ecron-{name}"
    )
    process.start()
    return Node(name=name, process=WarmProcess(process), port=port, log_path=log_path)


#: Where Debian's faketime package puts libfaketime (the ``faketime`` command preloads it).
LIBFAKETIME = "/usr/lib/*/faketime/libfaketime.so.1"


def libfaketime() -> str:
    """The path of libfaketime. Missing, it skips the test locally and fails it when
    CI=true (.ci/run installs Debian's faketime package)."""
    found = sorted(glob.glob(LIBFAKETIME))
    if not found or shutil.which("faketime") is None:
        reason = "faketime is not installed (Debian package faketime)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{reason}: it is required in CI", pytrace=False)
        pytest.skip(reason)
    return found[0]


def start_skewed_node(
    name: str, directory: Path, database_url: str, logs: Path, offset: str
) -> Node:
    """``ecron run -c directory`` whose wall clock (``time.time``, ``datetime.now``) is
    ``offset`` (``+5s``, ``-5s``) away from the machine's, the database's and the
    services': libfaketime preloaded, as the ``faketime -f OFFSET`` command does, but
    without that command's process in between (it would not pass SIGTERM on). Its
    monotonic clock (what asyncio sleeps on) is left alone, as on a machine whose clock is
    set wrong. Started cold, not from the forkserver: a preload needs a fresh program."""
    port = free_port()
    log_path = logs / f"{name}.log"
    environment = {
        **os.environ,
        "ECRON_DATABASE_URL": database_url,
        "ECRON_LISTEN": f"127.0.0.1:{port}",
        "LD_PRELOAD": libfaketime(),
        "FAKETIME": offset,
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
    }
    command = [sys.executable, "-m", "ecron", "run", "-c", str(directory)]
    with log_path.open("ab") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=environment)
    return Node(name=name, process=process, port=port, log_path=log_path)
