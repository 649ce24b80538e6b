"""``Recent``, the cache of what was worked out for executions in flight: it keeps what is
asked for and lets go of what is not (an ended execution's), so that a node's memory
follows its work in flight, not its history (bench/soak.py showed 50,000 ended executions'
poll headers kept, about 200 MiB, before the cache was cleared)."""

from __future__ import annotations

from ecron.executor.recent import Recent


class Ticks:
    """A monotonic clock moved by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_an_entry_asked_for_stays_and_one_no_longer_asked_for_goes_within_two_periods() -> None:
    ticks = Ticks()
    cache: Recent[str, int] = Recent(ticks, keep=60)
    cache.put("polled", 1)
    cache.put("ended", 2)
    for _ in range(10):  # ten minutes of polls every 30 s: "polled" is asked for throughout
        ticks.now += 30
        assert cache.get("polled") == 1
    assert cache.get("ended") is None
    assert len(cache) == 1


def test_an_entry_is_kept_at_least_keep_seconds_after_its_last_use() -> None:
    ticks = Ticks()
    cache: Recent[str, int] = Recent(ticks, keep=60)
    cache.put("slow", 1)
    ticks.now += 59
    assert cache.get("other") is None  # no swap yet
    ticks.now += 2
    assert cache.get("other") is None  # swapped: "slow" is in the older generation
    assert cache.get("slow") == 1  # 61 s after its last use, still there (and moved up)
    ticks.now += 121
    assert cache.get("other") is None  # two swaps without a use of "slow"
    assert cache.get("slow") is None


def test_a_burst_past_the_bound_keeps_the_newest_and_at_most_twice_the_bound() -> None:
    ticks = Ticks()
    cache: Recent[int, int] = Recent(ticks, keep=60, most=100)
    for n in range(1000):
        cache.put(n, n)
    assert len(cache) <= 200
    assert cache.get(999) == 999 and cache.get(0) is None
