"""Alerts: a JSON POST to each webhook that wants the event, retried with backoff and signed
like task calls when the webhook has a secret.

Delivery never blocks or slows the scheduler: events go into a bounded queue (a full
queue drops the event, counted and logged) and are sent by their own tasks.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping
from contextlib import suppress
from datetime import datetime
from typing import Any

import aiohttp
import structlog
from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt
from yarl import URL

from ecron.backoff import exponential
from ecron.clock import iso
from ecron.config.model import NotifySettings, TaskSpec, Webhook
from ecron.errors import EcronError
from ecron.metrics import Metrics
from ecron.signing import signature

log = structlog.get_logger(__name__)

#: Events waiting to be sent; beyond this, new ones are dropped (and counted).
QUEUE_SIZE = 1000
#: The most of a receiver's answer read (bytes); it is not used, a larger one is cut off.
ANSWER_LIMIT = 64 * 1024
#: Deliveries in progress at once.
CONCURRENT_DELIVERIES = 16


class DeliveryFailed(EcronError):
    """A webhook did not answer 2xx (a redirect, 3xx, is not followed: a failure too)."""


class Notifier:
    """Sends alert events to the daemon's webhooks and the task's own."""

    def __init__(
        self,
        settings: NotifySettings,
        specs: Mapping[str, TaskSpec],
        session: aiohttp.ClientSession,
        metrics: Metrics,
        node_id: str,
    ) -> None:
        self.settings = settings
        self.specs = specs
        self.session = session
        self.metrics = metrics
        self.node_id = node_id
        self._queue: asyncio.Queue[tuple[Webhook, NotifySettings, dict[str, Any]]] = asyncio.Queue(
            maxsize=QUEUE_SIZE
        )
        self._pending: set[asyncio.Task[None]] = set()

    def event(self, kind: str, task: str, at: datetime, **details: Any) -> None:
        """Queue ``kind`` about ``task`` for every webhook that wants it; never waits."""
        payload = {"event": kind, "task": task, "at": iso(at), "node": self.node_id, **details}
        spec = self.specs.get(task)
        sources = [self.settings]
        if spec is not None and spec.notify is not None:
            sources.append(spec.notify)
        for source in sources:
            for hook in source.webhooks:
                if kind not in hook.events:
                    continue
                try:
                    self._queue.put_nowait((hook, source, payload))
                except asyncio.QueueFull:
                    self.metrics.alerts.labels(event=kind, outcome="dropped").inc()
                    log.error("alert_dropped", alert=kind, task=task, reason="queue full")

    async def run(self) -> None:
        """Send queued events until cancelled, a bounded number at a time."""
        limit = asyncio.Semaphore(CONCURRENT_DELIVERIES)
        while True:
            hook, source, payload = await self._queue.get()
            await limit.acquire()
            task = asyncio.create_task(self._deliver(hook, source, payload))
            self._pending.add(task)

            def done(finished: asyncio.Task[None]) -> None:
                self._pending.discard(finished)
                limit.release()
                self._queue.task_done()

            task.add_done_callback(done)

    async def drain(self, timeout: float) -> None:
        """Let queued and running deliveries finish (shutdown), for at most ``timeout`` s;
        what is left is counted as dropped."""
        with suppress(TimeoutError):
            await asyncio.wait_for(self._queue.join(), timeout=timeout)
        left = self._queue.qsize() + len(self._pending)
        while not self._queue.empty():
            _, _, payload = self._queue.get_nowait()
            self.metrics.alerts.labels(event=str(payload["event"]), outcome="dropped").inc()
        if left:
            log.error("alerts_dropped_at_shutdown", alerts=left)

    async def _deliver(
        self, hook: Webhook, source: NotifySettings, payload: dict[str, Any]
    ) -> None:
        kind = str(payload["event"])
        policy = source.retry
        retrying = AsyncRetrying(
            stop=stop_after_attempt(policy.attempts),
            wait=exponential(policy.backoff, policy.max_backoff, jitter=True),
            retry=retry_if_exception_type((DeliveryFailed, aiohttp.ClientError, TimeoutError)),
            reraise=True,
        )
        receiver = str(URL(hook.url).origin())  # the path may be a secret (Slack-style URLs)
        try:
            async for attempt in retrying:
                with attempt:
                    await self._post(hook, payload)
        except Exception as exc:
            self.metrics.alerts.labels(event=kind, outcome="failed").inc()
            log.error(
                "alert_failed",
                alert=kind,
                task=payload.get("task"),
                receiver=receiver,
                attempts=retrying.statistics.get("attempt_number", 1),
                error=str(exc)[:200],
            )
            return
        self.metrics.alerts.labels(event=kind, outcome="sent").inc()
        log.info("alert_sent", alert=kind, task=payload.get("task"), receiver=receiver)

    async def _post(self, hook: Webhook, payload: dict[str, Any]) -> None:
        body = json.dumps(payload).encode()
        url = URL(hook.url)
        headers = {**hook.headers, "Content-Type": "application/json"}
        if hook.secret:
            headers["X-Ecron-Signature"] = signature(
                hook.secret, "POST", url.raw_path_qs, body, int(time.time())
            )
        timeout = aiohttp.ClientTimeout(total=hook.timeout.total_seconds())
        async with self.session.post(
            url, data=body, headers=headers, timeout=timeout, allow_redirects=False
        ) as answer:  # a redirect is not followed: its target would get the headers and signature
            await read_capped(answer, ANSWER_LIMIT)  # unused, but read: the connection is reused
            if not 200 <= answer.status < 300:
                raise DeliveryFailed(f"HTTP {answer.status}")


async def read_capped(response: aiohttp.ClientResponse, limit: int) -> tuple[bytes, bool]:
    """The body, or ``(first bytes, True)`` when it is longer than ``limit``."""
    if response.content_length is not None:
        if response.content_length > limit:
            return b"", True
        return await response.read(), False  # the common case: one read of a known length
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.content.iter_chunked(64 * 1024):
        size += len(chunk)
        if size > limit:
            return b"", True
        chunks.append(chunk)
    return b"".join(chunks), False
