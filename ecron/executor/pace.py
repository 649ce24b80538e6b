"""How many polls a node sends at once: every worker while its event loop keeps time, fewer
while the loop runs late. A node past its polling ceiling otherwise fills the loop with poll
answers, and the API, callbacks and claims wait behind them (the API starves); measured lag
of the loop itself is what says that the loop is full, whatever the machine and the load.

The rule is additive increase, multiplicative decrease (as TCP's congestion window): each
sample of the loop's lag above ``LAG_HIGH`` cuts the pace by ``CUT``; each sample below
``LAG_LOW`` raises it by a twentieth of the workers, up to all of them. Polls that are not
sent at once wait in due order (the oldest first), so every execution's interval stretches
by the same delay and none is starved. Triggers and cancels are never held back."""

from __future__ import annotations

import asyncio

from ecron.metrics import Metrics

#: How often the loop's lag is sampled (seconds of the event loop's own clock: this
#: measures the loop, not a rule of the schedule).
SAMPLE_EVERY = 0.05
#: Lag (seconds) above which fewer polls go out at once, and below which more do.
LAG_HIGH = 0.02
LAG_LOW = 0.005
#: What a sample above ``LAG_HIGH`` multiplies the pace by.
CUT = 0.7
#: The pace never goes below this many polls at once.
FLOOR = 2


class PollPace:
    """The number of polls that may be out at once; see the module docstring."""

    def __init__(self, workers: int, metrics: Metrics) -> None:
        self.workers = workers
        self.limit = workers
        #: The last lag sampled, in seconds.
        self.lag = 0.0
        self._gauge = metrics.poll_pace
        self._gauge.set(workers)

    def observe(self, lag: float) -> None:
        """One sample of the loop's lag (seconds): adjust the pace."""
        self.lag = lag
        if lag > LAG_HIGH:
            limit = max(min(FLOOR, self.workers), int(self.limit * CUT))
        elif lag < LAG_LOW:
            limit = min(self.workers, self.limit + max(1, self.workers // 20))
        else:
            return
        if limit != self.limit:
            self.limit = limit
            self._gauge.set(limit)

    async def run(self, stopping: asyncio.Event) -> None:
        """Sample the loop's lag every ``SAMPLE_EVERY`` until ``stopping`` is set."""
        loop = asyncio.get_running_loop()
        while not stopping.is_set():
            started = loop.time()
            await asyncio.sleep(SAMPLE_EVERY)
            self.observe(max(0.0, loop.time() - started - SAMPLE_EVERY))
