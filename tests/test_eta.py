"""The estimate of a running execution's end (``core.estimate_end``), behind the ``eta`` of
every snapshot: examples that say the rules, and properties that hold for any input."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from ecron.core import Execution, Status, Step, estimate_end, needs_history, typical_duration

T0 = datetime(2026, 12, 1, 3, 0, tzinfo=UTC)
EID = "01a2276a-4480-73e8-967c-b18487cfd3d1"
OLD = "01a2276a-0000-7000-8000-000000000000"


def running(progress: float = 0.0, **changes: object) -> Execution:
    """An execution RUNNING since ``T0`` at ``progress``."""
    values: dict[str, object] = {
        "eid": EID,
        "task": "etl",
        "scheduled_at": T0,
        "created_at": T0,
        "status": Status.RUNNING,
        "triggered_at": T0,
        "progress": progress,
    }
    values.update(changes)
    return Execution(**values)  # type: ignore[arg-type]


def steps(*states: tuple[str, Status, float]) -> tuple[Step, ...]:
    """Steps from ``(remote id owner, status, progress)``, numbered from 1."""
    return tuple(
        Step(number=n, name=f"s{n}", remote_id=f"{owner}.{n}", status=status, progress=progress)
        for n, (owner, status, progress) in enumerate(states, start=1)
    )


def minutes(n: float) -> timedelta:
    return timedelta(minutes=n)


def test_a_quarter_done_in_ten_minutes_ends_thirty_minutes_later_at_the_same_pace() -> None:
    """The pace so far is the progress over the time since the first trigger: 25 in
    10 minutes leaves 75, that is 30 minutes more."""
    assert estimate_end(running(25.0), T0 + minutes(10)) == T0 + minutes(40)


def test_between_reports_a_pace_measured_up_to_now_slips_later() -> None:
    """With no new report the same progress has taken longer, so the end moves later: 25
    after 20 minutes leaves 60 minutes more."""
    assert estimate_end(running(25.0), T0 + minutes(20)) == T0 + minutes(80)


def test_at_100_but_not_yet_ended_the_end_is_now() -> None:
    """A service that reported 100 without SUCCESS yet is expected to end any moment."""
    now = T0 + minutes(7)
    assert estimate_end(running(100.0), now) == now


def test_before_any_progress_the_estimate_is_the_median_of_recent_successful_runs() -> None:
    """At progress 0 the pace is unknown: the first trigger plus the median of the task's
    recent successful durations (an even count takes the mean of the middle two)."""
    history = [minutes(10), minutes(50), minutes(20), minutes(30)]
    assert typical_duration(history) == minutes(25)
    assert estimate_end(running(0.0), T0 + minutes(1), history) == T0 + minutes(25)
    assert estimate_end(running(0.0), T0 + minutes(1), [minutes(9)]) == T0 + minutes(9)


def test_before_any_progress_without_history_or_past_it_there_is_no_estimate() -> None:
    """No successful run to go by, or a run already longer than the usual: no estimate
    (rather than a false "any moment")."""
    assert estimate_end(running(0.0), T0 + minutes(1), []) is None
    assert estimate_end(running(0.0), T0 + minutes(31), [minutes(30)]) is None
    assert estimate_end(running(0.0), T0 + minutes(30), [minutes(30)]) == T0 + minutes(30)


def test_history_is_not_consulted_once_the_execution_has_progress_of_its_own() -> None:
    """Once it moves, the execution's own pace is the estimate, whatever the history."""
    execution = running(50.0)
    assert not needs_history(execution)
    now = T0 + minutes(10)
    assert (
        estimate_end(execution, now, [minutes(600)])
        == estimate_end(execution, now)
        == (T0 + minutes(20))
    )


@given(status=st.sampled_from([s for s in Status if s is not Status.RUNNING]))
def test_only_a_running_execution_has_an_estimate(status: Status) -> None:
    """SCHEDULED, PENDING and every final status (FAILED, SUCCESS, ...) have none."""
    execution = running(50.0, status=status, finished_at=T0 + minutes(5))
    assert estimate_end(execution, T0 + minutes(10), [minutes(20)]) is None
    assert not needs_history(execution)


def test_a_multi_step_execution_goes_at_the_pace_of_its_mean_progress() -> None:
    """Steps weigh the same: step 1 of 2 done in 10 minutes (progress 50) leaves 10."""
    execution = running(50.0, steps=steps((EID, Status.SUCCESS, 100.0), (EID, Status.PENDING, 0.0)))
    assert estimate_end(execution, T0 + minutes(10)) == T0 + minutes(20)


def test_a_resume_counts_only_its_own_progress_towards_its_pace() -> None:
    """A resume that kept step 1 of 4 from the execution it continues starts at 25, which
    took none of its time: 25 more in 10 minutes leaves 50, 20 minutes more."""
    execution = running(
        50.0,
        steps=steps(
            (OLD, Status.SUCCESS, 100.0),
            (EID, Status.SUCCESS, 100.0),
            (EID, Status.PENDING, 0.0),
            (EID, Status.PENDING, 0.0),
        ),
    )
    assert estimate_end(execution, T0 + minutes(10)) == T0 + minutes(30)


def test_a_resume_before_progress_of_its_own_expects_the_share_of_work_it_has_left() -> None:
    """Kept step 1 of 4 and no progress since: three quarters of the usual 40 minutes."""
    execution = running(
        25.0,
        steps=steps(
            (OLD, Status.SUCCESS, 100.0),
            (EID, Status.RUNNING, 0.0),
            (EID, Status.PENDING, 0.0),
            (EID, Status.PENDING, 0.0),
        ),
    )
    assert needs_history(execution)
    assert estimate_end(execution, T0 + minutes(1), [minutes(40)]) == T0 + minutes(30)


def test_a_pace_too_slow_for_the_calendar_gives_no_estimate() -> None:
    """A billionth of a percent after a day would end after the year 9999: no estimate."""
    assert estimate_end(running(1e-9), T0 + timedelta(days=1)) is None


progress = st.floats(min_value=0.0, max_value=100.0)
elapsed = st.floats(min_value=0.0, max_value=10 * 86400.0).map(lambda s: timedelta(seconds=s))
history = st.lists(
    st.floats(min_value=0.001, max_value=86400.0).map(lambda s: timedelta(seconds=s)),
    max_size=20,
)


@given(progress=progress, elapsed=elapsed, history=history)
def test_an_estimate_is_never_before_now(
    progress: float, elapsed: timedelta, history: list[timedelta]
) -> None:
    """Whatever the progress, the time gone and the history: the end is now or later."""
    now = T0 + elapsed
    end = estimate_end(running(progress), now, history)
    assert end is None or end >= now


@given(progress=progress, first=elapsed, more=elapsed, history=history)
def test_as_time_passes_without_news_the_estimate_never_moves_earlier(
    progress: float, first: timedelta, more: timedelta, history: list[timedelta]
) -> None:
    """For one state of the execution, a later look gives an end no earlier; and if the
    later look has an estimate, so had the earlier one."""
    execution = running(progress)
    sooner = estimate_end(execution, T0 + first, history)
    later = estimate_end(execution, T0 + first + more, history)
    if later is not None:
        assert sooner is not None and sooner <= later


@given(low=progress, high=progress, spent=elapsed)
def test_more_progress_at_the_same_moment_never_makes_the_end_later(
    low: float, high: float, spent: timedelta
) -> None:
    """Between two executions that have both moved, the one further along ends no later."""
    low, high = sorted((low, high))
    now = T0 + spent
    behind, ahead = estimate_end(running(low), now), estimate_end(running(high), now)
    if low > 0 and behind is not None:
        assert ahead is not None and ahead <= behind


@given(progress=progress, spent=elapsed, history=history)
def test_the_history_counts_exactly_when_needs_history_says_so(
    progress: float, spent: timedelta, history: list[timedelta]
) -> None:
    """Callers read the history only where ``needs_history``: elsewhere it changes
    nothing, and where it is needed no history means no estimate."""
    execution, now = running(progress), T0 + spent
    if needs_history(execution):
        assert estimate_end(execution, now, []) is None
    else:
        assert estimate_end(execution, now, history) == estimate_end(execution, now, [])
