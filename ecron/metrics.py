"""Prometheus metrics: one registry per daemon, every series named and documented here.

Label values are bounded: task names, statuses, reasons, call kinds, outcomes, answers;
never an execution id. docs/observability.md lists every series.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

#: Buckets for things measured in seconds that range from milliseconds to hours.
LONG_BUCKETS = (0.1, 0.5, 1, 5, 15, 30, 60, 300, 900, 1800, 3600, 7200, 21600, 86400)
#: Buckets for short delays: trigger lag, poll lateness, HTTP calls, database operations.
SHORT_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


class Metrics:
    """Every series ecron exports."""

    def __init__(self) -> None:
        self.registry = registry = CollectorRegistry(auto_describe=True)
        self.executions_finished = Counter(
            "ecron_executions_finished",
            "Executions that reached a final status.",
            ["task", "status", "reason"],
            registry=registry,
        )
        self.execution_duration = Histogram(
            "ecron_execution_duration_seconds",
            "From the first trigger to the end, of finished executions.",
            ["task"],
            buckets=LONG_BUCKETS,
            registry=registry,
        )
        self.trigger_lag = Histogram(
            "ecron_trigger_lag_seconds",
            "From the fire time (plus jitter) to the first trigger leaving.",
            ["task"],
            buckets=SHORT_BUCKETS,
            registry=registry,
        )
        self.poll_lateness = Histogram(
            "ecron_poll_lateness_seconds",
            "How much later than planned a poll (or deadline check) was started.",
            buckets=SHORT_BUCKETS,
            registry=registry,
        )
        self.in_flight = Gauge(
            "ecron_executions_in_flight",
            "Executions this node drives (held leases).",
            registry=registry,
        )
        self.http_calls = Counter(
            "ecron_http_calls",
            "Calls to user services, by call and outcome.",
            ["call", "outcome"],
            registry=registry,
        )
        self.http_duration = Histogram(
            "ecron_http_call_duration_seconds",
            "Duration of calls to user services.",
            ["call"],
            buckets=SHORT_BUCKETS,
            registry=registry,
        )
        self.callbacks = Counter(
            "ecron_callbacks",
            "Callback requests, by the HTTP status answered.",
            ["answer"],
            registry=registry,
        )
        self.claims = Counter(
            "ecron_claims",
            "Work this node claimed: fire times, abandoned executions taken over, stale ones.",
            ["kind"],
            registry=registry,
        )
        self.leases_lost = Counter(
            "ecron_leases_lost",
            "Executions this node let go because another node took the lease.",
            registry=registry,
        )
        self.patrol_runs = Counter(
            "ecron_patrol_runs", "Patrol rounds run by this node.", registry=registry
        )
        self.patrol_failures = Counter(
            "ecron_patrol_job_failures",
            "Patrol jobs that raised, by job.",
            ["job"],
            registry=registry,
        )
        self.db_duration = Histogram(
            "ecron_db_operation_seconds",
            "Duration of database transactions, by kind.",
            ["operation"],
            buckets=SHORT_BUCKETS,
            registry=registry,
        )
        self.alerts = Counter(
            "ecron_alerts",
            "Alert webhooks, by event and outcome (sent, failed, dropped).",
            ["event", "outcome"],
            registry=registry,
        )

    def track_in_flight(self, count: Callable[[], int]) -> None:
        """Read the in-flight gauge from ``count`` at each scrape."""
        self.in_flight.set_function(lambda: float(count()))

    def exposition(self) -> bytes:
        """The text format for ``/metrics``."""
        return generate_latest(self.registry)


class Series:
    """The per-task children of the series the engine updates for every execution, looked up
    once per label set (a label lookup costs more than the update)."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics
        self._lag: dict[str, Histogram] = {}
        self._duration: dict[str, Histogram] = {}
        self._finished: dict[tuple[str, str, str], Counter] = {}

    def trigger_lag(self, task: str) -> Histogram:
        found = self._lag.get(task)
        if found is None:
            found = self._lag[task] = self.metrics.trigger_lag.labels(task=task)
        return found

    def duration(self, task: str) -> Histogram:
        found = self._duration.get(task)
        if found is None:
            found = self._duration[task] = self.metrics.execution_duration.labels(task=task)
        return found

    def finished(self, task: str, status: str, reason: str) -> Counter:
        key = (task, status, reason)
        found = self._finished.get(key)
        if found is None:
            found = self._finished[key] = self.metrics.executions_finished.labels(
                task=task, status=status, reason=reason
            )
        return found
