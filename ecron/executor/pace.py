"""How many polls a node sends at once: every worker while nobody else needs the node, fewer
while people (the API, callbacks included) are asking and the node is (nearly) always busy.
A node past its polling ceiling otherwise fills its event loop, and the threads the
database works in (SQLite's, in the process), with polls, and every request waits behind
them: the API starves. With nobody asking, a node polls as fast as it can.

Three readings, whatever the machine and the load: whether the API was asked anything in
the last ``ASKED_WITHIN`` (a middleware tells ``answered``, with how long each request took);
the share of the time spent on the CPU, smoothed over about half a second (by the loop's
thread, or by the whole process over the cores it may run on less a tenth for the
database's threads, whichever is higher); and how late a timer of the loop fires (its lag,
exported as ``ecron_event_loop_lag_seconds``).

The rule is additive increase, multiplicative decrease (as TCP's congestion window): every
``SAMPLE_EVERY``, while the API is asked, a lag over ``LAG_HIGH``, a busy share over
``BUSY_HIGH`` or a request slower than ``API_SLOW`` cuts the pace by ``CUT``, and a lag under
``LAG_LOW`` on a node under ``BUSY_LOW`` raises it by a twentieth of the workers, up to all
of them. With nobody asking, only a loop late by more than ``LAG_ALONE`` cuts it (fire times
would be that late too), and a lag under ``LAG_HIGH`` raises it: a loop a few milliseconds
late, or one slowed by a busy machine, is no reason to send fewer polls, and cutting on it
held a node polling 10,000 jobs alone at a third of its workers and two thirds of a core
(docs/performance.md). It never goes below ``FLOOR_SHARE`` of the workers, so polls always
go on. Polls that are not sent at once wait in due order (the oldest first), so every
execution's interval stretches by the same delay and none is starved. Triggers and cancels
are never held back.

Measured (docs/performance.md, "Past the polling ceiling"): on one core with 6,000 jobs
polled every second and 16 clients asking for runs, all the workers at once put run
requests and reads at 300-600 ms at p99; paced, about 100 ms."""

from __future__ import annotations

import asyncio
import os
import time

from ecron.metrics import Metrics

#: How often the pace is set again (seconds of the event loop's own clock: this measures
#: the loop, not a rule of the schedule).
SAMPLE_EVERY = 0.1
#: The API counts as asked for this long (seconds) after its last request.
ASKED_WITHIN = 1.0
#: A request answered slower than this (seconds) cuts the pace.
API_SLOW = 0.1
#: The busy share above which the pace is cut while the API is asked, and below which it
#: may grow again.
BUSY_HIGH = 0.85
BUSY_LOW = 0.75
#: The share of the cores the database's threads may use on top of the loop's before the
#: process counts as busy.
DATABASE_ALLOWANCE = 0.1
#: How much of the busy share each sample moves it by (a moving average over about half a
#: second: one busy moment does not cut the pace).
SMOOTHING = 0.3
#: Lag (seconds) of the loop above which fewer polls go out at once while the API is asked,
#: and below which more do; with nobody asking, below ``LAG_HIGH`` more do.
LAG_HIGH = 0.02
LAG_LOW = 0.005
#: Lag (seconds) above which fewer polls go out at once even with nobody asking: fire times
#: would be as late (the budget's p99 trigger lag is 100 ms).
LAG_ALONE = 0.1
#: What a busy sample multiplies the pace by.
CUT = 0.9
#: The pace never goes below this share of the workers (at least 2).
FLOOR_SHARE = 0.05


class PollPace:
    """The number of polls that may be out at once; see the module docstring."""

    def __init__(self, workers: int, metrics: Metrics) -> None:
        self.workers = workers
        self.limit = workers
        self.floor = min(workers, max(2, int(workers * FLOOR_SHARE)))
        #: The last readings: the busy share (smoothed), the lag (seconds).
        self.busy = 0.0
        self.lag = 0.0
        #: When the API was last asked (``time.monotonic``), and its slowest answer since
        #: the last sample.
        self._asked_at = float("-inf")
        self._slowest = 0.0
        self._gauge = metrics.poll_pace
        self._gauge.set(workers)
        self._lag = metrics.loop_lag

    def answered(self, seconds: float, now: float | None = None) -> None:
        """A request of the API took ``seconds`` to answer (``now``: ``time.monotonic``)."""
        self._asked_at = time.monotonic() if now is None else now
        self._slowest = max(self._slowest, seconds)

    def observe(self, busy: float, lag: float, now: float) -> None:
        """One sample (the busy share, the lag in seconds, ``time.monotonic`` now): set the
        pace again."""
        self.busy += SMOOTHING * (busy - self.busy)
        self.lag = lag
        self._lag.observe(lag)
        asked = now - self._asked_at < ASKED_WITHIN
        slow, self._slowest = self._slowest > API_SLOW, 0.0
        if asked:
            cut = lag > LAG_HIGH or slow or self.busy > BUSY_HIGH
            grow = lag < LAG_LOW and self.busy < BUSY_LOW
        else:
            cut, grow = lag > LAG_ALONE, lag < LAG_HIGH
        if cut:
            limit = max(self.floor, int(self.limit * CUT))
        elif grow:
            limit = min(self.workers, self.limit + max(1, self.workers // 20))
        else:
            return
        if limit != self.limit:
            self.limit = limit
            self._gauge.set(limit)

    async def run(self, stopping: asyncio.Event) -> None:
        """Sample every ``SAMPLE_EVERY`` until ``stopping`` is set (run on the loop's own
        thread: ``thread_time`` is that thread's CPU time)."""
        loop = asyncio.get_running_loop()
        cores = _cores()
        while not stopping.is_set():
            started, thread, process = loop.time(), time.thread_time(), time.process_time()
            await asyncio.sleep(SAMPLE_EVERY)
            elapsed = loop.time() - started
            if elapsed <= 0:
                continue
            busy = max(
                (time.thread_time() - thread) / elapsed,
                (time.process_time() - process) / elapsed / cores - DATABASE_ALLOWANCE,
            )
            self.observe(busy, max(0.0, elapsed - SAMPLE_EVERY), time.monotonic())


def _cores() -> int:
    """The cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1
