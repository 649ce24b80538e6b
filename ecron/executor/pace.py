"""How many polls a node sends at once: every worker while its event loop has time to
spare, fewer while it is (nearly) always busy. A node past its polling ceiling otherwise
fills its loop with poll answers, and the API, callbacks and claims wait behind them (the
API starves), and so do the database's threads (SQLite's run in the process). Two readings
say that the loop is full, whatever the machine and the load: the share of the time spent on
the CPU (by the loop's thread; or by the whole process over the cores it may run on, less a
tenth for the database's threads, whichever is higher), smoothed over about half a second,
and how late a timer of the loop fires (its lag).

The rule is additive increase, multiplicative decrease (as TCP's congestion window): a busy
share over ``BUSY_HIGH``, or a lag over ``LAG_HIGH``, cuts the pace by ``CUT``; a busy share
under ``BUSY_LOW`` with a lag under ``LAG_LOW`` raises it by a twentieth of the workers, up to
all of them; it never goes below ``FLOOR_SHARE`` of them (work that is not polls may keep
the node busy too, and polls must go on). Polls that are not sent at once wait in due order
(the oldest first), so every execution's interval stretches by the same delay and none is
starved. Triggers and cancels are never held back.

Measured (docs/performance.md, "Past the polling ceiling"): on one core with 6,000 jobs
polled every second, the pace that keeps the loop's thread about 80 % busy is what keeps run
requests and reads under 250 ms at p99; all the workers at once put them at 300-600 ms."""

from __future__ import annotations

import asyncio
import os
import time

from ecron.metrics import Metrics

#: How often the loop is sampled (seconds of the event loop's own clock: this measures the
#: loop, not a rule of the schedule).
SAMPLE_EVERY = 0.1
#: The share of the time the loop's thread may spend on the CPU before fewer polls go out
#: at once (the rest is the control plane's: the API, callbacks, claims), and below which
#: more do.
BUSY_HIGH = 0.85
BUSY_LOW = 0.75
#: Lag (seconds) of the loop above which fewer polls go out at once, and below which more do.
LAG_HIGH = 0.02
LAG_LOW = 0.005
#: What a busy sample multiplies the pace by.
CUT = 0.9
#: The share of the cores the database's threads may use on top of the loop's before the
#: process counts as busy (SQLite works in threads of the process; PostgreSQL does not).
DATABASE_ALLOWANCE = 0.1
#: How much of the busy share each sample moves it by (a moving average over about half a
#: second: one busy moment does not cut the pace).
SMOOTHING = 0.3
#: The pace never goes below this share of the workers (at least 2): work that is not
#: polls may keep the node busy too, and polls must still go on.
FLOOR_SHARE = 0.05


class PollPace:
    """The number of polls that may be out at once; see the module docstring."""

    def __init__(self, workers: int, metrics: Metrics) -> None:
        self.workers = workers
        self.limit = workers
        self.floor = min(workers, max(2, int(workers * FLOOR_SHARE)))
        #: The last sample: the loop thread's busy share, and its lag in seconds.
        self.busy = 0.0
        self.lag = 0.0
        self._gauge = metrics.poll_pace
        self._gauge.set(workers)

    def observe(self, busy: float, lag: float) -> None:
        """One sample of the loop (its thread's busy share, its lag): adjust the pace."""
        busy = self.busy + SMOOTHING * (busy - self.busy)
        self.busy, self.lag = busy, lag
        if busy > BUSY_HIGH or lag > LAG_HIGH:
            limit = max(self.floor, int(self.limit * CUT))
        elif busy < BUSY_LOW and lag < LAG_LOW:
            limit = min(self.workers, self.limit + max(1, self.workers // 20))
        else:
            return
        if limit != self.limit:
            self.limit = limit
            self._gauge.set(limit)

    async def run(self, stopping: asyncio.Event) -> None:
        """Sample the loop every ``SAMPLE_EVERY`` until ``stopping`` is set (run on the
        loop's own thread: ``thread_time`` is that thread's CPU time)."""
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
            self.observe(busy, max(0.0, elapsed - SAMPLE_EVERY))


def _cores() -> int:
    """The cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1
