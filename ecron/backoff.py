"""Every backoff in ecron, in one place: tenacity wait strategies built once per setting.

Four things wait between attempts, and all of them wait the same way, exponentially
(``backoff``, doubled per attempt, at most ``max_backoff``):

- a task's next attempt after a FAILED one (``retry``: no jitter, so that the time of the
  next attempt is known when the failure is recorded and shown in ``upcoming``);
- the trigger POST of one execution (``trigger_retry``), an alert webhook
  (``notify.retry``) and a store transaction (``ecron.store.retry``): with jitter of up
  to one ``backoff``, so that many retries after one outage do not arrive together.

A strategy is built once for each distinct setting (``functools.cache``) and shared by
every retry that uses it; the strategies keep no state of their own (tenacity passes the
attempt in), so sharing them is safe.
"""

from __future__ import annotations

import functools
from datetime import timedelta

from tenacity import RetryCallState
from tenacity.wait import wait_base, wait_exponential, wait_exponential_jitter


def _seconds(value: timedelta | float) -> float:
    return value.total_seconds() if isinstance(value, timedelta) else float(value)


def exponential(
    backoff: timedelta | float, max_backoff: timedelta | float, *, jitter: bool
) -> wait_base:
    """``backoff`` after the first failed attempt, doubled per attempt, at most
    ``max_backoff``; with ``jitter``, plus up to one ``backoff`` at random."""
    return _exponential(_seconds(backoff), _seconds(max_backoff), jitter)


@functools.cache
def _exponential(backoff: float, max_backoff: float, jitter: bool) -> wait_base:
    if jitter:
        return wait_exponential_jitter(multiplier=backoff, max=max_backoff, jitter=backoff)
    # tenacity bounds the doubling itself: a huge attempt number gives ``max``.
    return wait_exponential(multiplier=backoff, max=max_backoff, min=0)


def delay_after(wait: wait_base, attempt: int) -> timedelta:
    """What ``wait`` waits after failed attempt ``attempt`` (1 for the first), asked
    outside a retry loop: for a retry that is planned, not slept."""
    state = RetryCallState(retry_object=None, fn=None, args=(), kwargs={})  # type: ignore[arg-type]
    state.attempt_number = max(1, attempt)
    return timedelta(seconds=wait(state))
