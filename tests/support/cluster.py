"""Real ``ecron run`` processes for the multi-node tests: config directories, starting and
stopping nodes, their API, and reading what they left in the database."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

import aiohttp
import sqlalchemy as sa

from ecron.store.sql import SqlStore
from ecron.store.tables import execution_table
from tests.support.service import wait_for


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def write_config(directory: Path, settings: str, tasks: str) -> Path:
    """A config directory: ``ecron.yaml`` holding ``settings`` and ``tasks/jobs.yaml``."""
    (directory / "tasks").mkdir(parents=True, exist_ok=True)
    (directory / "ecron.yaml").write_text(settings)
    (directory / "tasks" / "jobs.yaml").write_text(tasks)
    return directory


def task_yaml(name: str, url: str, **keys: str) -> str:
    """One task as a YAML list item (values written as they are)."""
    lines = [f"  - name: {name}", f"    url: {url}"]
    lines += [f"    {key}: {value}" for key, value in keys.items()]
    return "\n".join(lines) + "\n"


class NodeProcess(Protocol):
    """What the tests use of a node's process: a ``subprocess.Popen``, or a process forked
    from a warm interpreter (``tests.chaos.launcher``)."""

    @property
    def pid(self) -> int: ...

    @property
    def returncode(self) -> int | Any: ...

    def poll(self) -> int | None: ...

    def send_signal(self, sig: int) -> None: ...

    def kill(self) -> None: ...

    def terminate(self) -> None: ...

    def wait(self, timeout: float | None = None) -> int: ...


@dataclass
class Node:
    """One ``ecron run`` process and where to reach it."""

    name: str
    process: NodeProcess
    port: int
    log_path: Path

    @property
    def api(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log_tail(self, lines: int = 30) -> str:
        """The end of the node's log, for assertion messages."""
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return f"--- log of {self.name} ---\n" + "\n".join(text.splitlines()[-lines:])

    def events(self) -> list[dict[str, Any]]:
        """The node's JSON log lines, parsed."""
        found = []
        for line in self.log_path.read_text(errors="replace").splitlines():
            if line.startswith("{"):
                try:
                    found.append(json.loads(line))
                except ValueError:
                    continue
        return found


def start_node(name: str, directory: Path, database_url: str, logs: Path, **env: str) -> Node:
    """Start ``python -m ecron run -c directory`` on a free port; its log goes to a file
    (never a pipe, which a busy daemon would fill and block on)."""
    port = free_port()
    log_path = logs / f"{name}.log"
    environment = {
        **os.environ,
        "ECRON_DATABASE_URL": database_url,
        "ECRON_LISTEN": f"127.0.0.1:{port}",
        **env,
    }
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "ecron", "run", "-c", str(directory)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=environment,
        )
    return Node(name=name, process=process, port=port, log_path=log_path)


async def request(node: Node, method: str, path: str, **kwargs: Any) -> tuple[int, Any]:
    """One API call to ``node``: the status and the JSON answer."""
    timeout = aiohttp.ClientTimeout(total=5)
    if method == "POST" and "data" not in kwargs:
        kwargs.setdefault("json", {})  # what changes something is sent as JSON
    async with (
        aiohttp.ClientSession(timeout=timeout) as session,
        session.request(method, f"{node.api}{path}", **kwargs) as response,
    ):
        return response.status, await response.json()


async def wait_ready(node: Node, timeout: float = 30.0) -> None:
    """Wait until ``node`` answers /readyz with 200; fail at once if it exited."""

    async def ready() -> bool:
        if node.process.poll() is not None:
            raise AssertionError(
                f"{node.name} exited with {node.process.returncode}\n{node.log_tail()}"
            )
        try:
            status, _ = await request(node, "GET", "/readyz")
        except (aiohttp.ClientError, TimeoutError):
            return False
        return status == 200

    try:
        await wait_for(ready, timeout=timeout, interval=0.1)
    except AssertionError as exc:
        raise AssertionError(f"{node.name} not ready: {exc}\n{node.log_tail()}") from exc


async def wait_exit(node: Node, timeout: float) -> int:
    """Wait (without blocking the event loop) until ``node``'s process ends; its exit status."""
    try:
        await wait_for(lambda: node.process.poll() is not None, timeout=timeout, interval=0.05)
    except AssertionError as exc:
        raise AssertionError(f"{node.name} still running: {exc}\n{node.log_tail()}") from exc
    return node.process.returncode


async def let_time_pass(seconds: float) -> None:
    """Let ``seconds`` of wall-clock time pass while real nodes run: what only real time can
    show of real processes (a window of fire times, an outage or a node kept down for so
    long, the pace of kills or probes). Real processes cannot run on a test's clock, so this
    is the one sleep of the process-level tests (grep its callers to see each); every other
    wait there is for a condition (``wait_for``, ``wait_ready``, ``wait_exit``)."""
    await asyncio.sleep(seconds)


async def stop_node(node: Node, timeout: float = 20.0) -> int:
    """SIGTERM ``node`` and wait for it to end; its exit status."""
    node.process.send_signal(signal.SIGTERM)
    return await wait_exit(node, timeout)


async def kill_node(node: Node) -> None:
    """``kill -9``: the node dies at once, holding whatever it held."""
    node.process.kill()
    await wait_exit(node, 10.0)


def clean_up(nodes: Iterable[Node]) -> None:
    """Terminate every node still running, then kill those that do not stop (for ``finally``)."""
    nodes = list(nodes)
    for node in nodes:
        if node.process.poll() is None:
            node.process.terminate()
    for node in nodes:
        try:
            node.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            node.process.kill()
            node.process.wait(timeout=10)


async def execution(node: Node, eid: str) -> dict[str, Any]:
    """The snapshot of ``eid`` as ``node`` serves it."""
    status, snapshot = await request(node, "GET", f"/api/v1/executions/{eid}")
    assert status == 200, snapshot
    result: dict[str, Any] = snapshot
    return result


async def run_now(node: Node, name: str) -> str:
    """Start task ``name`` now through ``node``'s API; the new execution's id."""
    status, snapshot = await request(node, "POST", f"/api/v1/tasks/{name}/run")
    assert status == 202, snapshot
    eid: str = snapshot["id"]
    return eid


async def wait_snapshots(
    node: Node, eids: Iterable[str], check: Any, timeout: float, interval: float = 0.1
) -> dict[str, dict[str, Any]]:
    """Wait until ``check(snapshot)`` holds for every one of ``eids`` as ``node`` serves them."""
    eids = list(eids)

    async def all_hold() -> dict[str, dict[str, Any]] | None:
        snapshots = {eid: await execution(node, eid) for eid in eids}
        return snapshots if all(check(s) for s in snapshots.values()) else None

    result: dict[str, dict[str, Any]] = await wait_for(all_hold, timeout=timeout, interval=interval)
    return result


@dataclass(frozen=True)
class Row:
    """The columns of an execution row that the cluster tests look at."""

    eid: str
    task: str
    scheduled_at: datetime
    attempt: int
    resume_attempt: int
    status: str
    owner: str | None
    trigger_kind: str


async def execution_rows(database_url: str) -> list[Row]:
    """Every execution in the database, read directly."""
    store = SqlStore.open(database_url)
    columns = [getattr(execution_table.c, name) for name in Row.__dataclass_fields__]
    try:
        async with store.engines.read() as conn:
            rows = (await conn.execute(sa.select(*columns))).mappings().all()
    finally:
        await store.close()
    return [Row(**dict(row)) for row in rows]
