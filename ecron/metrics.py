"""Prometheus metrics: one registry per daemon, every series named and documented here.

Label values are bounded: task names, statuses, reasons, call kinds, outcomes, answers;
never an execution id. docs/observability.md lists every series.
"""

from __future__ import annotations

import math
import time
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from itertools import accumulate
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

#: Buckets for things measured in seconds that range from milliseconds to hours.
LONG_BUCKETS = (0.1, 0.5, 1, 5, 15, 30, 60, 300, 900, 1800, 3600, 7200, 21600, 86400)
#: Buckets for short delays: trigger lag, poll lateness, HTTP calls, database operations.
SHORT_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


class Metrics:
    """Every series ecron exports."""

    def __init__(self) -> None:
        self.registry = registry = CollectorRegistry(auto_describe=True)
        self.executions_finished = PerLabelCounter(
            "ecron_executions_finished",
            "Executions that reached a final status.",
            ("task", "status", "reason"),
        )
        self.execution_duration = PerLabelHistogram(
            "ecron_execution_duration_seconds",
            "From the first trigger to the end, of finished executions.",
            ("task",),
            LONG_BUCKETS,
        )
        self.trigger_lag = PerLabelHistogram(
            "ecron_trigger_lag_seconds",
            "From the fire time (plus jitter) to the first trigger leaving.",
            ("task",),
            SHORT_BUCKETS,
        )
        self.fires_excluded = PerLabelCounter(
            "ecron_fires_excluded",
            "Fire times planned out by the task's calendar or blackouts (no execution).",
            ("task", "reason"),
        )
        self.last_success = LatestPerLabel(
            "ecron_task_last_success_timestamp_seconds",
            "When the newest SUCCESS of the task ended, in Unix seconds.",
            "task",
        )
        for series in (
            self.executions_finished,
            self.execution_duration,
            self.trigger_lag,
            self.fires_excluded,
            self.last_success,
        ):
            registry.register(series)
        self._add_call_series(registry)
        self._add_node_series(registry)
        self._add_pool_series(registry)

    def _add_call_series(self, registry: CollectorRegistry) -> None:
        """The series of the calls to user services, and of the reports they push."""
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
        self.saturated = Gauge(
            "ecron_node_saturated",
            "1 while this node has more due polls than it can send (polls stretch evenly).",
            registry=registry,
        )
        self.poll_delay = Gauge(
            "ecron_poll_delay_seconds",
            "How long the oldest due poll has waited for a worker.",
            registry=registry,
        )
        self.poll_pace = Gauge(
            "ecron_poll_pace",
            "How many polls may be out at once (fewer while the event loop runs late).",
            registry=registry,
        )
        self.loop_lag = Histogram(
            "ecron_event_loop_lag_seconds",
            "How late a timer of the event loop fired (sampled every 0.1 s): how long any "
            "call, poll, callback or API request waited for the loop.",
            buckets=SHORT_BUCKETS,
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
        self.queue_messages = Counter(
            "ecron_queue_messages",
            "Report messages read from the Redis stream, by what came of them.",
            ["outcome"],
            registry=registry,
        )

    def _add_pool_series(self, registry: CollectorRegistry) -> None:
        self.pool_running = Gauge(
            "ecron_pool_running",
            "Executions of the pool's tasks PENDING or RUNNING, on every node.",
            ["pool"],
            registry=registry,
        )
        self.pool_waiting = Gauge(
            "ecron_pool_waiting",
            "Runs of the pool's tasks waiting for its room, its pace or a Retry-After.",
            ["pool"],
            registry=registry,
        )

    def _add_node_series(self, registry: CollectorRegistry) -> None:
        """The series of this node's own work: claims, leases, patrol, database, alerts."""
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

    def excluded(self, task: str, counts: Mapping[str, int]) -> None:
        """Count the fire times of ``task`` planned out, by reason."""
        for reason, count in counts.items():
            if count:
                self.fires_excluded.inc(task, reason, amount=float(count))

    def track_in_flight(self, count: Callable[[], int]) -> None:
        """Read the in-flight gauge from ``count`` at each scrape."""
        self.in_flight.set_function(lambda: float(count()))

    def track_load(self, load: Callable[[], Mapping[str, Any]]) -> None:
        """Read ``ecron_node_saturated`` and ``ecron_poll_delay_seconds`` from ``load`` (the
        engine's) at each scrape."""
        self.saturated.set_function(lambda: float(bool(load()["saturated"])))
        self.poll_delay.set_function(lambda: float(load()["poll_delay_seconds"]))

    def exposition(self) -> bytes:
        """The text format for ``/metrics``."""
        return generate_latest(self.registry)


class PerLabelCounter(Collector):
    """A counter with one child per label set (a task's, thousands of them), each a plain
    number made the first time it counts: a ``prometheus_client`` child costs a lock and
    microseconds to make, which ten thousand tasks firing at once would pay together. The
    event loop is its one writer; the scrape reads it."""

    def __init__(self, name: str, documentation: str, labels: tuple[str, ...]) -> None:
        self.name, self.documentation, self.labels = name, documentation, labels
        self._counts: dict[tuple[str, ...], list[float]] = {}

    def inc(self, *values: str, amount: float = 1.0) -> None:
        """Count ``amount`` for the label values ``values`` (in the order of ``labels``)."""
        count = self._counts.get(values)
        if count is None:
            count = self._counts[values] = [0.0, time.time()]
        count[0] += amount

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(self.name, self.documentation, labels=self.labels)
        for values, (count, created) in list(self._counts.items()):
            family.add_metric(values, count, created=created)
        yield family

    def describe(self) -> Iterator[Metric]:
        yield CounterMetricFamily(self.name, self.documentation, labels=self.labels)


class LatestPerLabel(Collector):
    """A gauge with one value per label value (a task's), which only moves forward: the
    newest of what this node saw and what the database says."""

    def __init__(self, name: str, documentation: str, label: str) -> None:
        self.name, self.documentation, self.label = name, documentation, label
        self._values: dict[str, float] = {}

    def saw(self, value: str, at: float) -> None:
        """``at`` for label value ``value``, unless a later one is known."""
        if at > self._values.get(value, -math.inf):
            self._values[value] = at

    def keep_only(self, values: Iterable[str]) -> None:
        """Forget the label values not in ``values`` (tasks no longer in the config)."""
        wanted = set(values)
        for value in [v for v in self._values if v not in wanted]:
            del self._values[value]

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(self.name, self.documentation, labels=(self.label,))
        for value, at in list(self._values.items()):
            family.add_metric((value,), at)
        yield family

    def describe(self) -> Iterator[Metric]:
        yield GaugeMetricFamily(self.name, self.documentation, labels=(self.label,))


class PerLabelHistogram(Collector):
    """A histogram with one child per label set, each a list of bucket counts (see
    ``PerLabelCounter``). Exposed exactly as ``prometheus_client`` exposes a histogram."""

    def __init__(
        self, name: str, documentation: str, labels: tuple[str, ...], buckets: Sequence[float]
    ) -> None:
        self.name, self.documentation, self.labels = name, documentation, labels
        self.bounds = tuple(float(b) for b in buckets)
        self._edges = [floatToGoString(b) for b in (*self.bounds, math.inf)]  # type: ignore[no-untyped-call]
        #: Per label set: a count per bucket (the last one +Inf), the sum, when it was made.
        self._children: dict[tuple[str, ...], tuple[list[int], list[float]]] = {}

    def observe(self, value: float, *values: str) -> None:
        """Observe ``value`` for the label values ``values``."""
        child = self._children.get(values)
        if child is None:
            child = self._children[values] = ([0] * (len(self.bounds) + 1), [0.0, time.time()])
        child[0][bisect_left(self.bounds, value)] += 1
        child[1][0] += value

    def collect(self) -> Iterator[Metric]:
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labels)
        for values, (counts, (total, created)) in list(self._children.items()):
            buckets = list(zip(self._edges, accumulate(counts), strict=True))
            family.add_metric(values, buckets, total)
            family.samples.append(
                Sample(f"{self.name}_created", dict(zip(self.labels, values, strict=True)), created)
            )
        yield family

    def describe(self) -> Iterator[Metric]:
        yield HistogramMetricFamily(self.name, self.documentation, labels=self.labels)


class Series:
    """The per-task series the engine updates for every execution, with the per-call
    lookups of the others done once."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def trigger_lag(self, task: str, seconds: float) -> None:
        self.metrics.trigger_lag.observe(seconds, task)

    def duration(self, task: str, seconds: float) -> None:
        self.metrics.execution_duration.observe(seconds, task)

    def finished(self, task: str, status: str, reason: str) -> None:
        self.metrics.executions_finished.inc(task, status, reason)
