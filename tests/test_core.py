"""The execution state machine (PROTOCOL.md: "Reports", "How ecron reads each outcome")."""

from __future__ import annotations

import copy
import dataclasses
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ecron.core import (
    ACTIVE,
    FINAL,
    HELD,
    CancelSent,
    Channel,
    Event,
    Execution,
    InvalidReport,
    ProbeFailed,
    Reason,
    RemoteStatus,
    Report,
    Reported,
    Skipped,
    Status,
    Stopped,
    TriggerFailed,
    TriggerSent,
    apply,
    deadline_passed,
    parse_report,
)
from ecron.core.model import MESSAGE_LIMIT, RESULT_DEPTH, RESULT_LIMIT
from ecron.core.status import TRANSITIONS, can_move

T0 = datetime(2026, 5, 4, 12, 0, tzinfo=UTC)
SECOND = timedelta(seconds=1)


def execution(**changes: Any) -> Execution:
    """A fresh PENDING execution created at T0, with ``changes`` applied."""
    base = Execution(
        eid="01J0000000000000000000000",
        task="nightly",
        scheduled_at=T0,
        created_at=T0,
        status=Status.PENDING,
    )
    return base.evolve(**changes)


def running(**changes: Any) -> Execution:
    """An execution triggered at T0 with a one-hour deadline, RUNNING at 10 %."""
    return execution(
        status=Status.RUNNING,
        progress=10.0,
        message="working",
        triggered_at=T0,
        last_report_at=T0,
        deadline=T0 + timedelta(hours=1),
        not_before=T0 + 5 * SECOND,
    ).evolve(**changes)


def report(status: str, **fields: Any) -> Reported:
    """A report parsed from a body, as it arrives by poll unless ``channel`` says otherwise."""
    channel = fields.pop("channel", Channel.POLL)
    return Reported(parse_report({"status": status, **fields}), channel)


# --- strategies -----------------------------------------------------------------------------

offsets = st.integers(min_value=0, max_value=4 * 3600).map(lambda n: n * SECOND)
moments = offsets.map(lambda offset: T0 + offset)
texts = st.text(max_size=20)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | texts,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(texts, children, max_size=3),
    max_leaves=8,
)
FAILED_REASONS = [
    Reason.REMOTE_FAILED,
    Reason.REJECTED,
    Reason.PROTOCOL_ERROR,
    Reason.TRIGGER_FAILED,
    Reason.UNREACHABLE,
    Reason.LOST,
    Reason.INTERRUPTED,
]
SKIPPED_REASONS = [Reason.MISFIRE, Reason.OVERLAP, Reason.PAUSED]


@st.composite
def executions(draw: st.DrawFn) -> Execution:
    """Any execution a store could hold: consistent status, progress, reason and times."""
    status = draw(st.sampled_from(Status))
    triggered_at = draw(st.none() | moments)
    deadline = None
    if triggered_at is not None:
        deadline = triggered_at + draw(st.integers(min_value=1, max_value=7200)) * SECOND
    reason = None
    if status is Status.FAILED:
        reason = draw(st.sampled_from(FAILED_REASONS))
    elif status is Status.SKIPPED:
        reason = draw(st.sampled_from(SKIPPED_REASONS))
    progress = 100.0 if status is Status.SUCCESS else draw(st.floats(min_value=0, max_value=100))
    return execution(
        status=status,
        reason=reason,
        progress=progress,
        message=draw(st.none() | texts),
        result=draw(json_values) if status is Status.SUCCESS else None,
        triggered_at=triggered_at,
        deadline=deadline,
        last_report_at=draw(st.none() | moments),
        finished_at=draw(moments) if status in FINAL else None,
        not_before=draw(st.none() | moments),
        probe_failures=draw(st.integers(min_value=0, max_value=6)),
        cancel_sent_at=draw(st.none() | moments),
        cancel_acknowledged=draw(st.none() | st.booleans()) if status in FINAL else None,
    )


any_progress = st.none() | st.floats(allow_nan=False, min_value=-1e6, max_value=1e6)


@st.composite
def reports(draw: st.DrawFn) -> Report:
    """Any report: parsed from a body of any shape, or built directly with any progress."""
    if draw(st.booleans()):
        body = {
            "status": draw(
                st.sampled_from(["running", "SUCCESS", " Failed ", "unknown", "Running"])
            ),
            "progress": draw(
                any_progress | st.text(max_size=3) | st.booleans() | st.just(float("nan"))
            ),
            "message": draw(st.none() | texts | st.integers()),
            "result": draw(json_values),
            "interrupted": draw(st.none() | st.booleans() | st.integers(0, 1)),
        }
        return parse_report(body)
    return Report(
        status=draw(st.sampled_from(RemoteStatus)),
        progress=draw(any_progress),
        message=draw(st.none() | texts),
        result=draw(json_values),
        result_truncated=draw(st.booleans()),
        interrupted=draw(st.booleans()),
    )


events = st.one_of(
    st.builds(Reported, reports(), st.sampled_from(Channel)),
    st.builds(TriggerSent, st.integers(min_value=1, max_value=7200).map(lambda n: n * SECOND)),
    st.builds(TriggerFailed, st.sampled_from(FAILED_REASONS), texts),
    st.builds(
        ProbeFailed,
        st.sampled_from(["unreachable", "protocol_error"]),
        st.integers(min_value=1, max_value=6),
        texts,
    ),
    st.builds(CancelSent),
    st.builds(
        Stopped,
        st.sampled_from([Status.TIMED_OUT, Status.CANCELLED]),
        st.none() | st.booleans(),
        texts,
    ),
    st.builds(Skipped, st.sampled_from(SKIPPED_REASONS), texts),
)


def timeline() -> st.SearchStrategy[list[tuple[timedelta, Event]]]:
    """Events, each with a non-negative step of time after the one before."""
    steps = st.integers(min_value=0, max_value=1800).map(lambda n: n * SECOND)
    return st.lists(st.tuples(steps, events), max_size=25)


# --- properties of apply --------------------------------------------------------------------


@settings(max_examples=400)
@given(start=executions(), timeline=timeline())
def test_every_transition_keeps_the_invariants_of_the_state_machine(
    start: Execution, timeline: list[tuple[timedelta, Event]]
) -> None:
    """Final stays final, progress stays in 0..100, moves follow TRANSITIONS, finished_at exact."""
    current = start
    now = max([T0] + [t for t in (start.finished_at, start.last_report_at) if t is not None])
    for step, event in timeline:
        now += step
        result = apply(current, event, now)
        before, after = result.before, result.after
        assert before is current
        if before.is_final:
            assert after == before
            assert not result.changed
            assert result.ignored is not None
        assert 0.0 <= after.progress <= 100.0
        if after.status is Status.SUCCESS:
            assert after.progress == 100.0
        assert can_move(before.status, after.status)
        if after.status != before.status:
            assert after.status in TRANSITIONS[before.status]
        if result.finished:
            assert after.finished_at == now
        elif not after.is_final:
            assert after.finished_at is None
        else:
            assert after.finished_at == before.finished_at
        assert after.not_before == before.not_before  # a fact of the run: never moved
        assert result.changed == (after != before)
        assert after.eid == before.eid
        assert after.scheduled_at == before.scheduled_at
        current = after


@given(start=executions(), event=events, offset=offsets)
def test_apply_never_mutates_its_input(start: Execution, event: Event, offset: timedelta) -> None:
    """The execution and the event given to apply are exactly as they were afterwards."""
    if start.status is Status.SUCCESS:
        start = start.evolve(result={"rows": [1, 2, 3], "nested": {"a": "b"}})
    execution_copy = copy.deepcopy(start)
    event_copy = copy.deepcopy(event)
    apply(start, event, T0 + offset)
    assert start == execution_copy
    assert event == event_copy


@given(start=executions(), event=events, offset=offsets)
def test_a_final_execution_never_changes(start: Execution, event: Event, offset: timedelta) -> None:
    """Whatever happens to a final execution, apply hands it back unchanged."""
    final = start.evolve(status=Status.CANCELLED, reason=None, finished_at=T0, not_before=None)
    result = apply(final, event, T0 + offset)
    assert result.after == final
    assert not result.changed
    assert not result.finished
    assert not result.cancel_due


@given(start=executions(), report_=reports(), channel=st.sampled_from(Channel), late=offsets)
def test_a_report_at_or_after_the_deadline_only_asks_for_the_cancel_call(
    start: Execution, report_: Report, channel: Channel, late: timedelta
) -> None:
    """Past the deadline a report of any kind, on any channel, changes nothing; cancel is due
    (once: see the next test)."""
    active = start.evolve(
        status=Status.RUNNING,
        reason=None,
        finished_at=None,
        deadline=T0,
        progress=50.0,
        cancel_sent_at=None,
    )
    result = apply(active, Reported(report_, channel), T0 + late)
    assert result.after == active
    assert result.cancel_due
    assert result.ignored == "deadline passed"


@given(start=executions(), report_=reports(), channel=st.sampled_from(Channel), late=offsets)
def test_once_the_cancel_call_was_sent_reports_and_failed_probes_change_nothing(
    start: Execution, report_: Report, channel: Channel, late: timedelta
) -> None:
    """PROTOCOL.md: after a cancel, later reports change nothing, before or after the
    deadline, on every channel; neither does a failed probe. Only the stop ends it."""
    sent = start.evolve(status=Status.RUNNING, reason=None, finished_at=None, cancel_sent_at=T0)
    for event in (Reported(report_, channel), ProbeFailed("unreachable", 1, "gone")):
        result = apply(sent, event, T0 + late)
        assert result.after == sent
        assert not result.cancel_due
        assert result.ignored == "the cancel call was sent"
    stopped = apply(sent, Stopped(Status.CANCELLED, True, "cancelled"), T0 + late)
    assert stopped.after.status is Status.CANCELLED


# --- parse_report ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "status"),
    [
        ("running", RemoteStatus.RUNNING),
        ("RUNNING", RemoteStatus.RUNNING),
        (" Success ", RemoteStatus.SUCCESS),
        ("fAiLeD", RemoteStatus.FAILED),
        ("unknown", RemoteStatus.UNKNOWN),
    ],
)
def test_parse_report_matches_the_status_without_regard_to_case(
    raw: str, status: RemoteStatus
) -> None:
    """``status`` is read case-insensitively, surrounding spaces ignored."""
    parsed = parse_report({"status": raw})
    assert parsed.status is status
    assert parsed.progress is None
    assert parsed.message is None
    assert parsed.warnings == ()


@pytest.mark.parametrize("body", [None, [], ["status", "RUNNING"], "RUNNING", 42, True])
def test_parse_report_refuses_a_body_that_is_not_an_object(body: Any) -> None:
    """A report is a JSON object; anything else is not a report."""
    with pytest.raises(InvalidReport, match="a report is a JSON object"):
        parse_report(body)


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"progress": 10},
        {"status": None},
        {"status": 1},
        {"status": True},
        {"status": ["RUNNING"]},
    ],
)
def test_parse_report_refuses_a_missing_or_non_string_status(body: dict[str, Any]) -> None:
    """Without a string ``status`` the body is not a report."""
    with pytest.raises(InvalidReport, match="needs a string 'status'"):
        parse_report(body)


@pytest.mark.parametrize("status", ["DONE", "", "   ", "PENDING", "OK", "RUNNING!"])
def test_parse_report_refuses_an_unknown_status(status: str) -> None:
    """Only RUNNING, SUCCESS, FAILED and UNKNOWN are statuses; the error names the one given."""
    with pytest.raises(InvalidReport, match=f"unknown status {status!r}"):
        parse_report({"status": status})


@pytest.mark.parametrize("progress", ["42", "", True, False, float("nan"), float("inf"), [42], {}])
def test_a_progress_that_is_not_a_number_is_ignored_with_a_warning(progress: Any) -> None:
    """A non-number progress is dropped and named in ``warnings``; the report still counts."""
    parsed = parse_report({"status": "RUNNING", "progress": progress, "message": "still going"})
    assert parsed.status is RemoteStatus.RUNNING
    assert parsed.progress is None
    assert parsed.message == "still going"
    assert len(parsed.warnings) == 1
    assert "is not a number" in parsed.warnings[0]


def test_a_missing_or_null_progress_is_no_warning() -> None:
    """Leaving progress out (or null) is allowed and says nothing."""
    for body in ({"status": "RUNNING"}, {"status": "RUNNING", "progress": None}):
        parsed = parse_report(body)
        assert parsed.progress is None
        assert parsed.warnings == ()


@pytest.mark.parametrize(
    ("progress", "stored"),
    [(150, 100.0), (100.0001, 100.0), (-5, 0.0), (-0.5, 0.0), (0, 0.0), (42, 42.0), (99.5, 99.5)],
)
def test_progress_outside_zero_to_hundred_is_clamped(progress: float, stored: float) -> None:
    """Values outside 0..100 are clamped; values inside are kept as floats."""
    parsed = parse_report({"status": "RUNNING", "progress": progress})
    assert parsed.progress == stored
    assert isinstance(parsed.progress, float)
    assert parsed.warnings == ()


def test_message_is_cut_to_a_thousand_characters() -> None:
    """A long message is stored cut to 1,000 characters; a short one whole."""
    long = "é" * 999 + "xyz" + "z" * 5000
    assert parse_report({"status": "RUNNING", "message": long}).message == long[:MESSAGE_LIMIT]
    assert len(long[:MESSAGE_LIMIT]) == 1000
    assert parse_report({"status": "RUNNING", "message": "page 42"}).message == "page 42"


def test_a_nul_character_in_a_message_becomes_a_replacement_character() -> None:
    """PostgreSQL's text cannot hold NUL: each one in a message is stored as U+FFFD, the
    rest of the message as sent."""
    parsed = parse_report({"status": "RUNNING", "message": "a\x00b\x00"})
    assert parsed.message == "a\ufffdb\ufffd" and parsed.warnings == ()


def test_a_message_that_is_not_a_string_is_ignored_with_a_warning() -> None:
    """A non-string message is dropped and named in ``warnings``."""
    parsed = parse_report({"status": "RUNNING", "message": {"text": "hi"}})
    assert parsed.message is None
    assert parsed.warnings != ()


def test_a_small_result_is_kept_as_it_is() -> None:
    """A result well under 64 KiB is stored unchanged and not flagged."""
    result = {"rows": 1234, "files": ["a.csv", "b.csv"], "ok": True}
    parsed = parse_report({"status": "SUCCESS", "result": result})
    assert parsed.result == result
    assert not parsed.result_truncated


def test_a_result_exactly_at_the_limit_is_kept() -> None:
    """A result whose JSON is exactly 64 KiB is not cut."""
    result = "x" * (RESULT_LIMIT - 2)  # plus two quotes
    parsed = parse_report({"status": "SUCCESS", "result": result})
    assert parsed.result == result
    assert not parsed.result_truncated


def test_a_result_over_64_kib_is_cut_and_flagged() -> None:
    """A result larger than 64 KiB of JSON is cut to at most 64 KiB and flagged."""
    result = {"rows": ["ü" * 100] * 1000}
    assert len(json.dumps(result, ensure_ascii=False).encode()) > RESULT_LIMIT
    parsed = parse_report({"status": "SUCCESS", "result": result})
    assert parsed.result_truncated
    assert isinstance(parsed.result, str)
    assert 0 < len(parsed.result.encode()) <= RESULT_LIMIT
    assert json.dumps(result, ensure_ascii=False).startswith(parsed.result)


def _nest(depth: int) -> Any:
    """A value of ``depth`` nested lists and dicts, built without recursion."""
    value: Any = []
    for level in range(depth - 1):
        value = {"x": value} if level % 2 else [value]
    return value


def test_a_result_nested_deeper_than_the_limit_is_dropped_flagged_and_warned_about() -> None:
    """A result 100 levels deep is kept; one more level (or 5,000: deeper than any encoder
    can write back) is not stored, the report is flagged and still counts, and the reason
    is in its warnings, never a RecursionError."""
    kept = parse_report({"status": "SUCCESS", "result": _nest(RESULT_DEPTH)})
    assert kept.result == _nest(RESULT_DEPTH) and not kept.result_truncated
    for depth in (RESULT_DEPTH + 1, 5000):
        parsed = parse_report({"status": "SUCCESS", "result": _nest(depth)})
        assert (parsed.status, parsed.result, parsed.result_truncated) == (
            RemoteStatus.SUCCESS,
            None,
            True,
        )
        assert parsed.warnings == (
            f"result is nested more than {RESULT_DEPTH} levels deep; not stored",
        )


@pytest.mark.parametrize(
    ("value", "interrupted"),
    [(True, True), (False, False), ("true", False), (1, False), (None, False)],
)
def test_interrupted_counts_only_when_exactly_true(value: Any, interrupted: bool) -> None:
    """Only the JSON ``true`` marks a failure as interrupted; 1 or "true" do not."""
    assert parse_report({"status": "FAILED", "interrupted": value}).interrupted is interrupted


def test_interrupted_is_false_when_left_out() -> None:
    """A FAILED report without ``interrupted`` is an ordinary failure."""
    assert parse_report({"status": "FAILED"}).interrupted is False


# --- apply: reports -------------------------------------------------------------------------


def test_a_running_report_moves_pending_to_running_with_progress_and_message() -> None:
    """The first RUNNING report makes a PENDING execution RUNNING and stores what it says."""
    pending = execution(triggered_at=T0, deadline=T0 + timedelta(hours=1))
    now = T0 + SECOND
    result = apply(pending, report("running", progress=42, message="page 42 of 100"), now)
    assert result.changed
    assert not result.finished
    assert result.after.status is Status.RUNNING
    assert result.after.progress == 42.0
    assert result.after.message == "page 42 of 100"
    assert result.after.last_report_at == now
    assert result.after.finished_at is None


def test_a_running_report_without_progress_keeps_the_progress_known() -> None:
    """A report that leaves out progress and message does not reset them."""
    result = apply(running(progress=33.0), report("RUNNING", channel=Channel.CALLBACK), T0 + SECOND)
    assert result.after.progress == 33.0
    assert result.after.message == "working"


def test_a_poll_that_says_nothing_new_is_not_a_change() -> None:
    """A poll repeating the known progress and message writes nothing (not even last_report_at)."""
    before = running(progress=42.0, message="page 42")
    result = apply(before, report("RUNNING", progress=42, message="page 42"), T0 + 10 * SECOND)
    assert not result.changed
    assert result.after == before
    assert result.ignored == "nothing new"


def test_a_callback_that_says_nothing_new_is_still_a_change() -> None:
    """A callback is a sign of life: last_report_at moves even when nothing else does."""
    before = running(progress=42.0, message="page 42")
    now = T0 + 10 * SECOND
    result = apply(
        before, report("RUNNING", progress=42, message="page 42", channel=Channel.CALLBACK), now
    )
    assert result.changed
    assert result.after == before.evolve(last_report_at=now)


def test_a_poll_with_new_progress_is_a_change() -> None:
    """A poll that moves progress is written, with the time of the report."""
    now = T0 + 10 * SECOND
    result = apply(running(progress=42.0), report("RUNNING", progress=43), now)
    assert result.changed
    assert result.after.progress == 43.0
    assert result.after.last_report_at == now


def test_a_success_report_sets_progress_to_100_and_finishes_with_the_result() -> None:
    """SUCCESS is final: progress 100, finished_at now, the result stored, no more polls."""
    now = T0 + 30 * SECOND
    result = apply(
        running(progress=80.0), report("success", result={"rows": 7}, message="done"), now
    )
    after = result.after
    assert result.finished
    assert after.status is Status.SUCCESS
    assert after.reason is None
    assert after.progress == 100.0
    assert after.finished_at == now
    assert after.last_report_at == now
    assert after.result == {"rows": 7}
    assert after.result_truncated is False
    assert after.message == "done"
    assert after.not_before == T0 + 5 * SECOND  # kept: when it could start, not a poll time


def test_a_success_report_with_a_low_progress_still_ends_at_100() -> None:
    """Whatever progress a SUCCESS report carries, a successful execution is at 100 %."""
    result = apply(running(), report("SUCCESS", progress=12), T0 + SECOND)
    assert result.after.progress == 100.0


def test_a_success_report_keeps_the_truncation_flag_of_its_result() -> None:
    """A cut result stays flagged on the execution."""
    big = {"blob": "x" * (RESULT_LIMIT + 10)}
    result = apply(running(), report("SUCCESS", result=big), T0 + SECOND)
    assert result.after.result_truncated is True
    assert isinstance(result.after.result, str)


def test_a_success_report_may_overtake_the_trigger_answer() -> None:
    """A PENDING execution can go straight to SUCCESS (e.g. by callback)."""
    result = apply(execution(), report("SUCCESS", channel=Channel.CALLBACK), T0 + SECOND)
    assert result.after.status is Status.SUCCESS
    assert result.finished


def test_a_failed_report_ends_failed_remote_failed() -> None:
    """FAILED from the user service is a final failure with reason remote_failed."""
    now = T0 + SECOND
    result = apply(running(progress=60.0), report("FAILED", message="disk full"), now)
    assert result.finished
    assert result.after.status is Status.FAILED
    assert result.after.reason is Reason.REMOTE_FAILED
    assert result.after.message == "disk full"
    assert result.after.progress == 60.0
    assert result.after.finished_at == now


def test_a_failed_report_marked_interrupted_ends_failed_interrupted() -> None:
    """FAILED with ``interrupted: true`` is an interruption, safe to resume."""
    result = apply(running(), report("FAILED", interrupted=True), T0 + SECOND)
    assert result.after.status is Status.FAILED
    assert result.after.reason is Reason.INTERRUPTED


def test_a_failed_report_stores_its_progress_within_bounds() -> None:
    """The progress a FAILED report carries is stored, clamped to 0..100 even if built by hand."""
    assert apply(running(), report("FAILED", progress=70), T0 + SECOND).after.progress == 70.0
    built = Reported(Report(RemoteStatus.FAILED, progress=250.0), Channel.POLL)
    assert apply(running(), built, T0 + SECOND).after.progress == 100.0


def test_an_unknown_answer_to_the_trigger_ends_failed_rejected() -> None:
    """A service that does not know the eid it was just given rejected the execution."""
    result = apply(execution(), report("UNKNOWN", channel=Channel.TRIGGER), T0 + SECOND)
    assert result.after.status is Status.FAILED
    assert result.after.reason is Reason.REJECTED
    assert result.after.finished_at == T0 + SECOND


@pytest.mark.parametrize("channel", [Channel.POLL, Channel.CALLBACK])
def test_an_unknown_answer_while_running_ends_failed_lost(channel: Channel) -> None:
    """The service lost an eid it had accepted: FAILED lost (an interruption)."""
    result = apply(running(), report("UNKNOWN", channel=channel), T0 + SECOND)
    assert result.after.status is Status.FAILED
    assert result.after.reason is Reason.LOST
    assert result.finished


def test_an_unknown_answer_to_a_poll_while_pending_ends_it_trigger_failed() -> None:
    """A PENDING execution is polled only when its trigger's outcome stayed unknown after the
    retries: UNKNOWN then means it never started, and there is no budget left to send it."""
    pending = execution(triggered_at=T0, deadline=T0 + timedelta(hours=1))
    result = apply(pending, report("UNKNOWN"), T0 + SECOND)
    assert result.after.status is Status.FAILED
    assert result.after.reason is Reason.TRIGGER_FAILED
    assert result.after.finished_at == T0 + SECOND


@pytest.mark.parametrize("late", [timedelta(0), SECOND, timedelta(days=1)])
def test_a_report_at_or_after_the_deadline_changes_nothing_and_asks_for_cancel(
    late: timedelta,
) -> None:
    """Even a SUCCESS is too late at the deadline: nothing changes and cancel_due is set."""
    before = running()
    assert before.deadline is not None
    result = apply(before, report("SUCCESS"), before.deadline + late)
    assert not result.changed
    assert result.cancel_due
    assert deadline_passed(before, before.deadline + late)


def test_a_report_just_before_the_deadline_is_applied() -> None:
    """One microsecond before the deadline the report still counts."""
    before = running()
    assert before.deadline is not None
    now = before.deadline - timedelta(microseconds=1)
    result = apply(before, report("SUCCESS"), now)
    assert result.after.status is Status.SUCCESS
    assert not result.cancel_due
    assert not deadline_passed(before, now)


def test_an_execution_without_a_deadline_never_passes_it() -> None:
    """Before the first trigger there is no deadline to pass."""
    assert not deadline_passed(execution(), T0 + timedelta(days=365))


@pytest.mark.parametrize("status", sorted(FINAL))
def test_a_report_about_a_final_execution_changes_nothing(status: Status) -> None:
    """Once final, later reports (even a SUCCESS) are ignored, on every channel."""
    final = running(status=status, finished_at=T0, not_before=None)
    for channel in Channel:
        for said in ("RUNNING", "SUCCESS", "FAILED", "UNKNOWN"):
            result = apply(final, report(said, progress=99, channel=channel), T0 + SECOND)
            assert result.after == final
            assert not result.changed
            assert result.ignored == f"execution is {status}"


def test_a_good_report_resets_the_probe_failures() -> None:
    """A valid poll after failed ones starts the count again, and that is written."""
    before = running(progress=42.0, message="m", probe_failures=3)
    result = apply(before, report("RUNNING", progress=42, message="m"), T0 + SECOND)
    assert result.changed
    assert result.after.probe_failures == 0


# --- apply: other events --------------------------------------------------------------------


def test_the_first_trigger_sets_triggered_at_and_the_deadline() -> None:
    """The first trigger fixes triggered_at and the deadline it was sent under."""
    now = T0 + 3 * SECOND
    result = apply(execution(), TriggerSent(timedelta(hours=2)), now)
    assert result.after.triggered_at == now
    assert result.after.deadline == now + timedelta(hours=2)
    assert result.after.status is Status.PENDING


def test_a_retried_trigger_keeps_the_first_time_and_deadline() -> None:
    """A trigger sent again (same eid) does not move the deadline."""
    first = apply(execution(), TriggerSent(timedelta(hours=2)), T0).after
    again = apply(first, TriggerSent(timedelta(hours=5)), T0 + timedelta(minutes=1))
    assert not again.changed
    assert again.after.triggered_at == T0
    assert again.after.deadline == T0 + timedelta(hours=2)


@pytest.mark.parametrize("reason", [Reason.TRIGGER_FAILED, Reason.REJECTED, Reason.PROTOCOL_ERROR])
def test_a_failed_trigger_ends_failed_with_its_reason(reason: Reason) -> None:
    """A trigger that could not start the execution ends it FAILED for that reason."""
    result = apply(execution(), TriggerFailed(reason, "503 three times"), T0 + SECOND)
    assert result.after.status is Status.FAILED
    assert result.after.reason is reason
    assert result.after.message == "503 three times"
    assert result.after.finished_at == T0 + SECOND


def test_failed_probes_count_up_until_the_limit() -> None:
    """Below the limit a failed probe only counts."""
    current = running()
    for count in range(1, 5):
        result = apply(current, ProbeFailed("unreachable", 5, "refused"), T0 + count * SECOND)
        current = result.after
        assert current.status is Status.RUNNING
        assert current.probe_failures == count
        assert result.changed


def test_failed_probes_at_the_limit_end_failed_unreachable() -> None:
    """The limit-th failed probe in a row ends the execution FAILED unreachable."""
    current = running(probe_failures=4)
    result = apply(current, ProbeFailed("unreachable", 5, "connection refused"), T0 + SECOND)
    assert result.finished
    assert result.after.status is Status.FAILED
    assert result.after.reason is Reason.UNREACHABLE
    assert result.after.probe_failures == 5
    assert result.after.message is not None
    assert "5 failed probes" in result.after.message
    assert "connection refused" in result.after.message


def test_failed_probes_end_protocol_error_when_the_last_one_was_a_protocol_error() -> None:
    """The reason follows the kind of the last failed probe."""
    current = running()
    for kind in ("unreachable", "unreachable", "protocol_error"):
        current = apply(current, ProbeFailed(kind, 3, "x"), T0 + SECOND).after  # type: ignore[arg-type]
    assert current.status is Status.FAILED
    assert current.reason is Reason.PROTOCOL_ERROR


def test_failed_probes_end_unreachable_when_only_earlier_ones_were_protocol_errors() -> None:
    """A protocol error earlier in the series does not decide the reason."""
    current = running()
    for kind in ("protocol_error", "protocol_error", "unreachable"):
        current = apply(current, ProbeFailed(kind, 3, "x"), T0 + SECOND).after  # type: ignore[arg-type]
    assert current.reason is Reason.UNREACHABLE


def test_a_good_report_between_failed_probes_restarts_the_count() -> None:
    """Failed probes must be in a row: a good poll in between resets the series."""
    current = running()
    current = apply(current, ProbeFailed("unreachable", 3, "x"), T0 + SECOND).after
    current = apply(current, ProbeFailed("unreachable", 3, "x"), T0 + 2 * SECOND).after
    current = apply(current, report("RUNNING", progress=50), T0 + 3 * SECOND).after
    current = apply(current, ProbeFailed("unreachable", 3, "x"), T0 + 4 * SECOND).after
    assert current.status is Status.RUNNING
    assert current.probe_failures == 1


def test_cancel_sent_is_recorded_without_ending_the_execution() -> None:
    """The cancel call is written before it leaves; the status waits for Stopped."""
    result = apply(running(), CancelSent(), T0 + SECOND)
    assert result.after.cancel_sent_at == T0 + SECOND
    assert result.after.status is Status.RUNNING


@pytest.mark.parametrize("status", [Status.TIMED_OUT, Status.CANCELLED])
@pytest.mark.parametrize("acknowledged", [True, False, None])
def test_stopped_ends_the_execution_and_records_the_acknowledgement(
    status: Status, acknowledged: bool | None
) -> None:
    """TIMED_OUT or CANCELLED, with whether the user service acknowledged the cancel call."""
    now = T0 + timedelta(hours=1)
    result = apply(running(), Stopped(status, acknowledged, "deadline passed"), now)  # type: ignore[arg-type]
    assert result.finished
    assert result.after.status is status
    assert result.after.reason is None
    assert result.after.cancel_acknowledged is acknowledged
    assert result.after.finished_at == now
    assert result.after.not_before == T0 + 5 * SECOND
    assert result.after.progress == 10.0


def test_a_pending_execution_can_be_cancelled() -> None:
    """A person may cancel before the trigger was answered."""
    result = apply(execution(), Stopped(Status.CANCELLED, True, "by alice"), T0 + SECOND)
    assert result.after.status is Status.CANCELLED


def test_a_stopped_execution_ignores_a_later_success() -> None:
    """After a cancel, later reports about the execution change nothing."""
    stopped = apply(running(), Stopped(Status.TIMED_OUT, False, "late"), T0 + SECOND).after
    result = apply(stopped, report("SUCCESS", channel=Channel.CALLBACK), T0 + 2 * SECOND)
    assert result.after.status is Status.TIMED_OUT
    assert not result.changed


def claimed(**changes: Any) -> Execution:
    """A fire time claimed ahead (SCHEDULED): not started, not active."""
    return execution(status=Status.SCHEDULED, **changes)


@pytest.mark.parametrize("reason", SKIPPED_REASONS)
def test_a_claimed_fire_time_not_yet_triggered_can_be_skipped(reason: Reason) -> None:
    """Before its trigger leaves, a SCHEDULED execution may end SKIPPED with why."""
    now = T0 + SECOND
    result = apply(claimed(), Skipped(reason, "an earlier run is still going"), now)
    assert result.finished
    assert result.after.status is Status.SKIPPED
    assert result.after.reason is reason
    assert result.after.finished_at == now


def test_the_trigger_leaving_starts_a_claimed_fire_time() -> None:
    """TriggerSent moves SCHEDULED to PENDING (active from now on) and fixes the deadline."""
    now = T0 + SECOND
    result = apply(claimed(), TriggerSent(timedelta(hours=2)), now)
    assert result.after.status is Status.PENDING and result.after.is_active
    assert result.after.triggered_at == now
    assert result.after.deadline == now + timedelta(hours=2)
    assert not claimed().is_active


@pytest.mark.parametrize(
    "event",
    [
        report("running", progress=10),
        report("success"),
        TriggerFailed(Reason.REJECTED, "refused"),
        ProbeFailed("unreachable", 1, "refused"),
        CancelSent(),
        Stopped(Status.TIMED_OUT, None, "deadline"),
    ],
)
def test_a_claimed_fire_time_ignores_what_can_only_follow_a_trigger(event: Event) -> None:
    """Nobody was told of a SCHEDULED execution yet: reports, probes and a deadline change
    nothing (a callback cannot overtake a trigger that never left)."""
    result = apply(claimed(), event, T0 + SECOND)
    assert not result.changed
    assert result.ignored == "it has not started yet"


def test_a_person_can_cancel_a_claimed_fire_time_without_a_cancel_call() -> None:
    """Stopped(CANCELLED) ends a SCHEDULED execution at once: it never started."""
    result = apply(claimed(), Stopped(Status.CANCELLED, None, "cancelled"), T0 + SECOND)
    assert result.after.status is Status.CANCELLED and result.finished


@pytest.mark.parametrize(
    "before", [execution(triggered_at=T0, deadline=T0 + timedelta(hours=1)), running()]
)
def test_an_execution_whose_trigger_left_is_never_skipped(before: Execution) -> None:
    """Once the trigger left (PENDING or RUNNING), Skipped changes nothing."""
    result = apply(before, Skipped(Reason.OVERLAP, "too late"), T0 + SECOND)
    assert not result.changed
    assert result.after == before


# --- statuses -------------------------------------------------------------------------------


def test_every_status_is_claimed_ahead_active_or_final() -> None:
    """Every status is SCHEDULED (claimed ahead), active (PENDING, RUNNING) or final, and
    only one of them; a node holds leases on the first two kinds."""
    assert set(FINAL) | set(ACTIVE) | {Status.SCHEDULED} == set(Status)
    assert not set(FINAL) & set(ACTIVE)
    assert {Status.PENDING, Status.RUNNING} == ACTIVE
    assert {Status.SCHEDULED, *ACTIVE} == HELD


def test_no_move_leaves_a_final_status_or_goes_back() -> None:
    """Final statuses never move; nothing moves back to SCHEDULED or PENDING; only a
    SCHEDULED execution is ever SKIPPED."""
    for status in FINAL:
        assert TRANSITIONS[status] == frozenset()
        assert all(not can_move(status, other) for other in Status if other != status)
    assert all(Status.SCHEDULED not in moves for moves in TRANSITIONS.values())
    assert [s for s, moves in TRANSITIONS.items() if Status.PENDING in moves] == [Status.SCHEDULED]
    assert [s for s, moves in TRANSITIONS.items() if Status.SKIPPED in moves] == [Status.SCHEDULED]
    assert not can_move(Status.RUNNING, Status.PENDING)
    assert not can_move(Status.RUNNING, Status.SKIPPED)
    assert all(can_move(status, status) for status in Status)


def test_a_second_cancel_sent_changes_nothing() -> None:
    """The cancel call leaves once: the first CancelSent is kept, a second one is ignored."""
    running = Execution(eid="e", task="t", scheduled_at=T0, created_at=T0, status=Status.RUNNING)
    first = apply(running, CancelSent(), T0).after
    second = apply(first, CancelSent(), T0 + timedelta(seconds=5))
    assert first.cancel_sent_at == T0
    assert not second.changed and second.after.cancel_sent_at == T0


def test_evolve_changes_exactly_the_fields_given_and_keeps_every_other() -> None:
    """``evolve`` (the hot paths' copy, generated code) makes a new Execution equal to
    ``dataclasses.replace`` with the same changes, in any order, leaving the original as it
    was."""
    original = running(message="working", progress=12.5, probe_failures=2)
    frozen_before = copy.copy(original)
    for changes in (
        {"version": 7},
        {"progress": 50.0, "message": None, "version": 3},
        {"version": 3, "message": None, "progress": 50.0},
        {},
    ):
        evolved = original.evolve(**changes)
        assert evolved is not original
        assert evolved == dataclasses.replace(original, **changes)
    assert original == frozen_before


def test_evolve_refuses_a_field_an_execution_does_not_have() -> None:
    """A change to a field that does not exist is a TypeError naming it (and is refused
    every time, not only the first)."""
    for _ in range(2):
        with pytest.raises(TypeError, match="'no_such_field'"):
            running().evolve(progress=1.0, no_such_field=1)
