"""``ecron run`` processes that start in well under a second, for the crash loops.

A plain ``python -m ecron run`` spends 2 to 4 seconds of a loaded 2-core machine importing
ecron and its libraries before it does anything; a crash loop of 20 kills cannot wait for
that each time. These nodes are forked from a multiprocessing *forkserver* that has
imported ecron once: each child then runs ``ecron run -c DIR`` exactly as the console
script does (the same ``ecron.cli.main``, the same arguments, environment and log file), so
only the imports are saved. ``WarmProcess`` has the part of ``subprocess.Popen``'s surface
that ``tests.support.cluster`` uses, so its ``Node``, ``kill_node``, ``stop_node``,
``wait_ready`` and ``clean_up`` work on these nodes unchanged.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
from pathlib import Path

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
