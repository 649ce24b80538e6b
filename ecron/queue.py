"""The Redis Streams report channel (PROTOCOL.md, "Reports through a message queue"): one
consumer per node in the stream's consumer group, its name the node id.

Each message (``execution_id``, ``token``, ``report``) goes through ``take_report``, the
same checks and the same one function as a callback, and is then acknowledged, whatever
came of it, and counted (``ecron_queue_messages_total{outcome}``). Only a message whose
handling raised (the database away) is left pending: it is delivered again when it has
been idle ``claim_idle`` (``XAUTOCLAIM``, by this node or any other), at most
``MAX_DELIVERIES`` times, then acknowledged as ``failed``. Messages a dead node had read
but not acknowledged are claimed the same way. Redis going away is retried with the house
backoff; ``problem`` says so (``/readyz`` shows it when ``queue.required``).

ecron never trims the stream: the service's ``XADD ... MAXLEN ~ N`` does (docs/protocol.md).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from contextlib import suppress
from typing import Any

import structlog
from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError, ResponseError

from ecron.backoff import delay_after, exponential
from ecron.commands import Commands
from ecron.config.queue import QueueSettings
from ecron.config.secrets import without_password
from ecron.core import Channel
from ecron.ids import shown_id
from ecron.metrics import Metrics
from ecron.pushed import Pushed, take_report
from ecron.store.base import Store

log = structlog.get_logger(__name__)

#: The most messages one read or one claim takes.
BATCH = 100
#: The longest one read waits for messages, in seconds (less when ``claim_idle`` is short:
#: claims are looked for every half ``claim_idle``, between reads).
BLOCK = 1.0
#: Deliveries of a message whose handling raised before it is acknowledged as ``failed``.
MAX_DELIVERIES = 5
#: The waits after Redis could not be read, or a message could not be handled (seconds).
BACKOFF, MAX_BACKOFF = 0.1, 5.0
#: The outcome of a message acknowledged after ``MAX_DELIVERIES`` failed handlings.
FAILED = "failed"
#: Every outcome counted (the label values of ``ecron_queue_messages_total``).
OUTCOMES = (*(str(outcome) for outcome in Pushed), FAILED)
#: The largest report a message may carry (bytes): the callback endpoint's body limit.
REPORT_LIMIT = 1024 * 1024
#: The most of a message's ``execution_id`` quoted in a log line (real ids have at most 64).
ID_SHOWN = 100
#: The most ``XAUTOCLAIM`` pages taken in one claim round.
CLAIM_PAGES = 10
#: A consumer of the group that read nothing for this long and holds no message (a node
#: that stopped or died, under a node id that will not come back: ``node_id: auto``) is
#: deleted from the group, so that restarts do not pile up consumers (seconds).
FORGET_AFTER = 3600.0
#: How often the group's consumers are looked over for such ones (seconds).
SWEEP_EVERY = 600.0

Message = tuple[bytes, dict[bytes, bytes] | None]


def connect(settings: QueueSettings) -> Redis:
    """A client for ``settings.url`` (no I/O yet). redis-py's own retries are off: the
    consumer retries, with the house backoff, and says so."""
    return Redis.from_url(
        settings.url,
        socket_connect_timeout=5,
        socket_timeout=BLOCK + 5,
        retry=Retry(NoBackoff(), 0),
    )


class QueueConsumer:
    """This node's consumer of the report stream; ``run`` until ``stop``."""

    def __init__(
        self,
        *,
        settings: QueueSettings,
        client: Redis,
        store: Store,
        commands: Commands,
        secret: Callable[[], str],
        metrics: Metrics,
        node_id: str,
    ) -> None:
        self.settings = settings
        self.client = client
        self.store = store
        self.commands = commands
        #: The callback secret (read from the database at start, after this is built).
        self.secret = secret
        self.node_id = node_id
        self.where = without_password(settings.url)
        #: Why the stream cannot be read now; None while it can.
        #: (``/readyz`` is open to all: no host, no error text; the log line has those.)
        self.problem: str | None = "queue: not read yet"
        self._counted = {name: metrics.queue_messages.labels(outcome=name) for name in OUTCOMES}
        self._wait = exponential(BACKOFF, MAX_BACKOFF, jitter=True)
        claim_idle = settings.claim_idle.total_seconds()
        self._idle_ms = max(1, int(claim_idle * 1000))
        self._every = min(BLOCK, claim_idle / 2)
        self._next_claim = 0.0
        self._next_sweep = 0.0
        self._handling_failed = 0
        self._stopping = asyncio.Event()

    def stop(self) -> None:
        """End ``run`` between two reads (a read under way is given up)."""
        self._stopping.set()

    async def run(self) -> None:
        """Read, handle and acknowledge until stopped; Redis going away is waited out."""
        away = 0
        while not self._stopping.is_set():
            try:
                await self._join()
                if away:
                    log.info("queue_reachable", url=self.where, after_attempts=away)
                away = 0
                self.problem = None
                while not self._stopping.is_set():
                    await self._round()
            except RedisError as exc:
                away += 1
                delay = delay_after(self._wait, away).total_seconds()
                self.problem = "queue: unreachable"
                log.warning(
                    "queue_unreachable",
                    url=self.where,
                    error=f"{type(exc).__name__}: {exc}",
                    attempt=away,
                    retry_in=round(delay, 3),
                )
                await self._pause(delay)

    async def _join(self) -> None:
        """Create the group (and the stream) unless there, then take up the messages this
        consumer had read and not acknowledged (a restart under the same node id)."""
        try:
            await self.client.xgroup_create(
                self.settings.stream, self.settings.group, id="0", mkstream=True
            )
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise
        after: bytes | str = "0"
        while not self._stopping.is_set():
            messages = await self._read(after, block=None)
            if not messages:
                return
            await self._handle_all(messages)
            after = messages[-1][0]

    async def _round(self) -> None:
        """Claim what has been idle too long (every half ``claim_idle``), then read on."""
        if time.monotonic() >= self._next_claim:
            await self._claim()
            self._next_claim = time.monotonic() + self._every
        if time.monotonic() >= self._next_sweep:
            await self._forget_gone_consumers()
            self._next_sweep = time.monotonic() + SWEEP_EVERY
        reading = asyncio.ensure_future(self._read(">", block=self._every))
        stopping = asyncio.ensure_future(self._stopping.wait())
        try:
            await asyncio.wait({reading, stopping}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopping.cancel()
        if not reading.done():
            reading.cancel()  # stopping: the read is given up, nothing was handled
            with suppress(asyncio.CancelledError, RedisError):
                await reading
            return
        messages = reading.result()
        if messages:
            await self._handle_all(messages)
        if self._handling_failed:  # the database is away: give it time before reading on
            await self._pause(delay_after(self._wait, self._handling_failed).total_seconds())

    async def _read(self, after: bytes | str, block: float | None) -> list[Message]:
        """Up to ``BATCH`` messages after ``after`` (``>``: new ones; an id: this
        consumer's pending ones), waiting up to ``block`` seconds for new ones."""
        reply: Any = await self.client.xreadgroup(
            self.settings.group,
            self.node_id,
            {self.settings.stream: after},
            count=BATCH,
            block=None if block is None else max(1, int(block * 1000)),
        )
        if not reply:
            return []
        _, messages = reply[0]
        return list(messages)

    async def _claim(self) -> None:
        """Take over the messages pending longer than ``claim_idle`` (a dead node's, or ones
        whose handling failed here), page by page."""
        start: bytes | str = "0-0"
        for _ in range(CLAIM_PAGES):
            reply: Any = await self.client.xautoclaim(
                self.settings.stream,
                self.settings.group,
                self.node_id,
                min_idle_time=self._idle_ms,
                start_id=start,
                count=BATCH,
            )
            start, messages = reply[0], list(reply[1])
            if messages:
                log.info("queue_messages_claimed", count=len(messages), node=self.node_id)
                await self._handle_all(messages)
            if start in (b"0-0", "0-0"):
                return

    async def _forget_gone_consumers(self) -> None:
        """Delete the group's consumers other than this one that hold no message and have
        not read for ``FORGET_AFTER`` (a live node reads every second or so; what a dead one
        held was claimed after ``claim_idle``). Only an empty consumer is deleted, so that
        no pending message is dropped with it."""
        consumers: Any = await self.client.xinfo_consumers(
            self.settings.stream, self.settings.group
        )
        for consumer in consumers:
            name = consumer["name"]
            name = name.decode() if isinstance(name, bytes) else str(name)
            idle = int(consumer.get("inactive", consumer["idle"])) / 1000
            if name == self.node_id or int(consumer["pending"]) or idle < FORGET_AFTER:
                continue
            await self.client.xgroup_delconsumer(self.settings.stream, self.settings.group, name)
            log.info("queue_consumer_forgotten", consumer=name, idle_seconds=round(idle))

    async def _handle_all(self, messages: Sequence[Message]) -> None:
        """Handle each message in order; acknowledge the handled ones in one call."""
        handled = []
        failed = 0
        for message_id, fields in messages:
            if await self._handle(message_id, fields or {}):
                handled.append(message_id)
            else:
                failed += 1
        self._handling_failed = self._handling_failed + 1 if failed else 0
        if handled:
            await self.client.xack(self.settings.stream, self.settings.group, *handled)

    async def _handle(self, message_id: bytes, fields: dict[bytes, bytes]) -> bool:
        """Check and apply one message; True when it is to be acknowledged."""
        remote = _text(fields.get(b"execution_id"))
        token = _text(fields.get(b"token")) or None
        report = fields.get(b"report", b"")
        if not remote:
            self._refused(message_id, remote, Pushed.MALFORMED, "the message has no execution_id")
            return True
        if len(report) > REPORT_LIMIT:
            why = f"the report is {len(report)} bytes, over the limit of {REPORT_LIMIT}"
            self._refused(message_id, remote, Pushed.MALFORMED, why)
            return True

        async def body() -> bytes:
            return report

        try:
            taken = await take_report(
                store=self.store,
                commands=self.commands,
                secret=self.secret(),
                remote=remote,
                token=token,
                body=body,
                channel=Channel.QUEUE,
            )
        except Exception as exc:
            return await self._failed(message_id, remote, exc)
        if taken.outcome is Pushed.APPLIED:
            self._counted[str(Pushed.APPLIED)].inc()
            log.debug("queue_report_applied", execution_id=remote, message_id=_text(message_id))
        else:
            why = f"{taken.why}: {taken.detail}" if taken.detail else taken.why
            self._refused(message_id, remote, taken.outcome, why)
        return True

    def _refused(self, message_id: bytes, remote: str, outcome: Pushed, why: str) -> None:
        self._counted[str(outcome)].inc()
        log.warning(
            "queue_message_refused",
            execution_id=remote[:ID_SHOWN],
            message_id=_text(message_id),
            outcome=str(outcome),
            why=why,
        )

    async def _failed(self, message_id: bytes, remote: str, exc: Exception) -> bool:
        """A message whose handling raised: left pending for another delivery, or, after
        ``MAX_DELIVERIES``, acknowledged and counted ``failed``."""
        pending: Any = await self.client.xpending_range(
            self.settings.stream, self.settings.group, min=message_id, max=message_id, count=1
        )
        delivered = int(pending[0]["times_delivered"]) if pending else MAX_DELIVERIES
        error = f"{type(exc).__name__}: {exc}"
        if delivered >= MAX_DELIVERIES:
            self._counted[FAILED].inc()
            log.error(
                "queue_message_dropped",
                execution_id=shown_id(remote),
                message_id=_text(message_id),
                deliveries=delivered,
                error=error,
            )
            return True
        log.warning(
            "queue_message_failed",
            execution_id=shown_id(remote),
            message_id=_text(message_id),
            delivery=delivered,
            deliveries_left=MAX_DELIVERIES - delivered,
            error=error,
        )
        return False

    async def _pause(self, seconds: float) -> None:
        """Wait ``seconds``, or less when stopped meanwhile."""
        with suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), seconds)


def _text(value: bytes | str | None) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else value.decode("utf-8", "replace")
