"""Every backoff in ecron comes from ``ecron.backoff``: exponential, capped, jittered where
many retries could arrive together, and built once per setting."""

from __future__ import annotations

from datetime import timedelta

from hypothesis import given
from hypothesis import strategies as st

from ecron.backoff import delay_after, exponential


@given(
    backoff=st.floats(min_value=0.01, max_value=60),
    ceiling=st.floats(min_value=0.01, max_value=3600),
    attempt=st.integers(min_value=1, max_value=10_000),
)
def test_a_planned_delay_doubles_per_attempt_up_to_the_maximum(
    backoff: float, ceiling: float, attempt: int
) -> None:
    """Without jitter the delay is exactly ``backoff * 2**(attempt-1)``, at most the
    maximum, for any attempt (a huge one does not overflow)."""
    delay = delay_after(exponential(backoff, ceiling, jitter=False), attempt).total_seconds()
    expected = min(backoff * 2.0 ** min(attempt - 1, 1000), ceiling)
    assert abs(delay - expected) < 1e-6


@given(attempt=st.integers(min_value=1, max_value=20))
def test_jitter_adds_at_most_one_backoff_and_never_passes_the_maximum(attempt: int) -> None:
    """Jittered: between the planned delay and one ``backoff`` more, capped."""
    wait = exponential(timedelta(seconds=1), timedelta(seconds=30), jitter=True)
    delay = delay_after(wait, attempt).total_seconds()
    planned = min(2.0 ** (attempt - 1), 30.0)
    assert planned <= delay <= min(planned + 1, 30.0)


def test_one_setting_builds_one_strategy() -> None:
    """The same setting, as a duration or in seconds, shares one strategy object; another
    setting gets its own."""
    first = exponential(timedelta(seconds=2), timedelta(minutes=1), jitter=True)
    assert exponential(2.0, 60.0, jitter=True) is first
    assert exponential(2.0, 60.0, jitter=False) is not first
