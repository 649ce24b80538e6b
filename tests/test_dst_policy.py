"""A fixed-time cron job's ``dst`` policy (``gap: shift | skip | jump``, ``fold: first | last |
both``): the one rule, ``ecron.daylight.resolve``, from a table, and the fire times the
scheduler asks for (``next_fire_time``) around the 2027 changes of Europe/Berlin and
Australia/Sydney. Every expected time is written out with its offset."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from ecron.config import load_config
from ecron.cron import parse_cron
from ecron.daylight import DEFAULT_POLICY, Change, DstPolicy, Fold, Gap, changes, resolve
from ecron.schedules import parse_schedule
from tests.support.schedules import fire_times
from tests.test_config import one_task, problems_of, write_config

BERLIN, SYDNEY = "Europe/Berlin", "Australia/Sydney"


def at(text: str) -> datetime:
    """An exact instant written with its offset, like ``2027-03-28T03:30+02:00``."""
    when = datetime.fromisoformat(text)
    assert when.tzinfo is not None, text
    return when.astimezone(UTC)


def test_the_2027_changes_of_berlin_and_sydney_are_where_the_docs_say() -> None:
    """Berlin: 2027-03-28 02:00 CET jumps to 03:00 CEST, 2027-10-31 03:00 CEST falls back
    to 02:00 CET; Sydney: 2027-04-04 03:00 AEDT falls back to 02:00 AEST, 2027-10-03 02:00
    AEST jumps to 03:00 AEDT. ``changes`` gives the wall times each skips or repeats."""
    year = (at("2027-01-01T00:00Z"), at("2027-12-31T00:00Z"))
    assert list(changes(ZoneInfo(BERLIN), *year)) == [
        (datetime(2027, 3, 28, 2), datetime(2027, 3, 28, 3)),
        (datetime(2027, 10, 31, 2), datetime(2027, 10, 31, 3)),
    ]
    assert list(changes(ZoneInfo(SYDNEY), *year)) == [
        (datetime(2027, 4, 4, 2), datetime(2027, 4, 4, 3)),
        (datetime(2027, 10, 3, 2), datetime(2027, 10, 3, 3)),
    ]


SHIFT, SKIP, JUMP = (DstPolicy(gap=gap) for gap in (Gap.SHIFT, Gap.SKIP, Gap.JUMP))
FIRST, LAST, BOTH = (DstPolicy(fold=fold) for fold in (Fold.FIRST, Fold.LAST, Fold.BOTH))

#: zone, wall time (naive), policy, then the fires: (instant or None, change).
RESOLVE_ROWS = [
    (BERLIN, "2027-03-27T02:30", SKIP, [("2027-03-27T02:30+01:00", None)]),
    (BERLIN, "2027-03-28T02:30", SHIFT, [("2027-03-28T03:30+02:00", Change.SHIFTED)]),
    (BERLIN, "2027-03-28T02:30", SKIP, [(None, Change.SKIPPED)]),
    (BERLIN, "2027-03-28T02:30", JUMP, [("2027-03-28T03:00+02:00", Change.JUMPED)]),
    (BERLIN, "2027-03-28T02:00", JUMP, [("2027-03-28T03:00+02:00", Change.JUMPED)]),
    (BERLIN, "2027-03-28T03:00", JUMP, [("2027-03-28T03:00+02:00", None)]),
    (BERLIN, "2027-10-31T02:30", FIRST, [("2027-10-31T02:30+02:00", Change.REPEATED)]),
    (BERLIN, "2027-10-31T02:30", LAST, [("2027-10-31T02:30+01:00", Change.REPEATED)]),
    (
        BERLIN,
        "2027-10-31T02:30",
        BOTH,
        [("2027-10-31T02:30+02:00", Change.REPEATED), ("2027-10-31T02:30+01:00", Change.REPEATED)],
    ),
    (BERLIN, "2027-10-31T03:00", BOTH, [("2027-10-31T03:00+01:00", None)]),
    (SYDNEY, "2027-10-03T02:30", SHIFT, [("2027-10-03T03:30+11:00", Change.SHIFTED)]),
    (SYDNEY, "2027-10-03T02:30", SKIP, [(None, Change.SKIPPED)]),
    (SYDNEY, "2027-10-03T02:30", JUMP, [("2027-10-03T03:00+11:00", Change.JUMPED)]),
    (SYDNEY, "2027-04-04T02:30", FIRST, [("2027-04-04T02:30+11:00", Change.REPEATED)]),
    (SYDNEY, "2027-04-04T02:30", LAST, [("2027-04-04T02:30+10:00", Change.REPEATED)]),
    (
        SYDNEY,
        "2027-04-04T02:30",
        BOTH,
        [("2027-04-04T02:30+11:00", Change.REPEATED), ("2027-04-04T02:30+10:00", Change.REPEATED)],
    ),
]


@pytest.mark.parametrize(("zone", "wall", "policy", "expected"), RESOLVE_ROWS)
def test_resolve_maps_a_wall_time_to_its_fires_by_the_policy(
    zone: str, wall: str, policy: DstPolicy, expected: list[tuple[str | None, Change | None]]
) -> None:
    """On an ordinary day a wall time fires once, unchanged; in a gap it is shifted by the
    gap, skipped, or fired at the moment of the jump; in a fold it fires at its first
    occurrence, its last, or both."""
    fires = resolve(datetime.fromisoformat(wall), ZoneInfo(zone), policy)
    assert [(fire.at, fire.change) for fire in fires] == [
        (None if text is None else at(text), change) for text, change in expected
    ]
    assert all(fire.wall == datetime.fromisoformat(wall) for fire in fires)


#: zone, policy, looked for from, the next three fire times of ``30 2 * * *``.
FIRE_ROWS = [
    (BERLIN, SHIFT, "2027-03-27T03:00+01:00",
     ["2027-03-28T03:30+02:00", "2027-03-29T02:30+02:00", "2027-03-30T02:30+02:00"]),
    (BERLIN, SKIP, "2027-03-27T00:00+01:00",
     ["2027-03-27T02:30+01:00", "2027-03-29T02:30+02:00", "2027-03-30T02:30+02:00"]),
    (BERLIN, JUMP, "2027-03-27T03:00+01:00",
     ["2027-03-28T03:00+02:00", "2027-03-29T02:30+02:00", "2027-03-30T02:30+02:00"]),
    (BERLIN, FIRST, "2027-10-30T03:00+02:00",
     ["2027-10-31T02:30+02:00", "2027-11-01T02:30+01:00", "2027-11-02T02:30+01:00"]),
    (BERLIN, LAST, "2027-10-30T03:00+02:00",
     ["2027-10-31T02:30+01:00", "2027-11-01T02:30+01:00", "2027-11-02T02:30+01:00"]),
    (BERLIN, BOTH, "2027-10-30T03:00+02:00",
     ["2027-10-31T02:30+02:00", "2027-10-31T02:30+01:00", "2027-11-01T02:30+01:00"]),
    (SYDNEY, SHIFT, "2027-10-02T03:00+10:00",
     ["2027-10-03T03:30+11:00", "2027-10-04T02:30+11:00", "2027-10-05T02:30+11:00"]),
    (SYDNEY, SKIP, "2027-10-02T00:00+10:00",
     ["2027-10-02T02:30+10:00", "2027-10-04T02:30+11:00", "2027-10-05T02:30+11:00"]),
    (SYDNEY, JUMP, "2027-10-02T03:00+10:00",
     ["2027-10-03T03:00+11:00", "2027-10-04T02:30+11:00", "2027-10-05T02:30+11:00"]),
    (SYDNEY, FIRST, "2027-04-03T03:00+11:00",
     ["2027-04-04T02:30+11:00", "2027-04-05T02:30+10:00", "2027-04-06T02:30+10:00"]),
    (SYDNEY, LAST, "2027-04-03T03:00+11:00",
     ["2027-04-04T02:30+10:00", "2027-04-05T02:30+10:00", "2027-04-06T02:30+10:00"]),
    (SYDNEY, BOTH, "2027-04-03T03:00+11:00",
     ["2027-04-04T02:30+11:00", "2027-04-04T02:30+10:00", "2027-04-05T02:30+10:00"]),
]  # fmt: skip


@pytest.mark.parametrize(("zone", "policy", "start", "expected"), FIRE_ROWS)
def test_a_fixed_time_job_fires_across_the_2027_changes_by_its_policy(
    zone: str, policy: DstPolicy, start: str, expected: list[str]
) -> None:
    """``30 2 * * *``, each fire time advanced from the previous one as the scheduler does:
    the gap's 02:30 fires shifted (03:30), not at all, or at the jump (03:00); the fold's
    02:30 fires at the first pass, the last, or both; the other days at 02:30."""
    schedule = parse_schedule("30 2 * * *", zone, policy)
    assert fire_times(schedule, at(start), 3) == [at(text) for text in expected]


@pytest.mark.parametrize(
    ("start", "expected"),
    [
        ("2027-10-31T02:30+02:00", "2027-10-31T02:30+01:00"),  # the first pass has fired
        ("2027-10-31T02:40+02:00", "2027-10-31T02:30+01:00"),  # inside the first pass
        ("2027-10-31T02:10+01:00", "2027-10-31T02:30+01:00"),  # inside the second pass
        ("2027-10-31T02:30+01:00", "2027-11-01T02:30+01:00"),  # both have fired
    ],
)
def test_fold_both_looked_for_from_inside_the_fold_finds_the_second_pass(
    start: str, expected: str
) -> None:
    """Berlin, ``fold: both``: from anywhere in the repeated hour up to the second 02:30,
    the next fire time is the second 02:30; after it, the next day's."""
    schedule = parse_schedule("30 2 * * *", BERLIN, BOTH)
    assert fire_times(schedule, at(start) + timedelta(microseconds=1), 1) == [at(expected)]


def test_two_wall_times_in_a_gap_under_jump_fire_once_at_the_jump() -> None:
    """Sydney, ``15,45 2 * * *`` with ``gap: jump``: 02:15 and 02:45 do not happen on
    2027-10-03, and the task fires once at 03:00 (a fire time is one moment); both are
    listed as jumped there."""
    schedule = parse_schedule("15,45 2 * * *", SYDNEY, JUMP)
    assert fire_times(schedule, at("2027-10-02T03:00+10:00"), 2) == [
        at("2027-10-03T03:00+11:00"),
        at("2027-10-04T02:15+11:00"),
    ]
    assert schedule.cron is not None
    noted = schedule.cron.dst_changes(at("2027-10-02T00:00Z"), at("2027-10-04T00:00Z"))
    assert [(fire.at, fire.wall.time().isoformat(), fire.change) for fire in noted] == [
        (at("2027-10-03T03:00+11:00"), "02:15:00", Change.JUMPED),
        (at("2027-10-03T03:00+11:00"), "02:45:00", Change.JUMPED),
    ]


@pytest.mark.parametrize("expression", ["*/30 * * * *", "0 * * * *", "*/20 2 * * *"])
@pytest.mark.parametrize("zone", [BERLIN, SYDNEY])
def test_a_job_by_the_clock_ignores_the_policy(expression: str, zone: str) -> None:
    """A job with a wildcard in its second, minute or hour runs by the clock whatever its
    ``dst``: the same fire times across both changes as with the default, and no notes."""
    for start in (
        "2027-03-27T12:00Z",
        "2027-04-03T12:00Z",
        "2027-10-02T12:00Z",
        "2027-10-30T12:00Z",
    ):
        plain = parse_schedule(expression, zone)
        skipping = parse_schedule(expression, zone, DstPolicy(Gap.SKIP, Fold.BOTH))
        assert fire_times(skipping, at(start), 60) == fire_times(plain, at(start), 60)
        assert skipping.cron is not None
        assert skipping.cron.dst_changes(at(start), at(start) + timedelta(days=2)) == []


@pytest.mark.parametrize("expression", ["30 2 * * *", "15,45 1-3 * * *", "0 0 2 * * 0"])
@pytest.mark.parametrize("zone", [BERLIN, SYDNEY])
def test_resolve_under_the_default_policy_agrees_with_the_fast_search(
    expression: str, zone: str
) -> None:
    """The default policy (shift, first) has a fast search of its own; the search by
    ``resolve`` gives the same next fire time from every ten minutes of the four days
    around each 2027 change."""
    rule = parse_cron(expression, ZoneInfo(zone))
    assert rule.dst == DEFAULT_POLICY
    for day in ("2027-03-26", "2027-04-02", "2027-10-01", "2027-10-29"):
        start = at(f"{day}T00:00Z")
        for step in range(4 * 24 * 6):
            after = start + step * timedelta(minutes=10)
            assert rule._by_policy(after) == rule.first_after(after), after


def test_a_task_file_sets_the_policy_and_a_wrong_value_names_file_task_and_field(
    tmp_path: Path,
) -> None:
    """``dst: {gap: skip, fold: both}`` in a tasks file is the task's policy (its schedule
    says so, and its fire times follow it); ``dst`` on ``every`` is accepted and changes
    nothing; an unknown value or key is a problem naming the file, the task and the field."""
    write_config(
        tmp_path,
        a=one_task(
            "{name: n, schedule: '30 2 * * *', timezone: Europe/Berlin, url: 'http://s', "
            "dst: {gap: skip, fold: both}}"
        ),
        b=one_task("{name: e, schedule: {every: 1h}, url: 'http://s', dst: {gap: jump}}"),
    )
    config = load_config(tmp_path, {})
    nightly = config.tasks["n"].fire_schedule
    assert nightly.text == "cron 30 2 * * * (Europe/Berlin; dst: gap skip, fold both)"
    assert fire_times(nightly, at("2027-03-27T03:00+01:00"), 1) == [at("2027-03-29T02:30+02:00")]
    hourly = config.tasks["e"].fire_schedule
    start = at("2027-03-28T00:30+01:00")
    assert hourly.text == "every 1h"
    assert fire_times(hourly, start, 3) == fire_times(parse_schedule({"every": "1h"}), start, 3)
    bad = tmp_path / "bad"
    bad.mkdir()
    write_config(
        bad,
        a=one_task("{name: t, schedule: '30 2 * * *', url: 'http://s', dst: {gap: later}}"),
        b=one_task("{name: u, schedule: '30 2 * * *', url: 'http://s', dst: {folds: both}}"),
    )
    problems = problems_of(bad)
    assert len(problems) == 2, problems
    assert problems[0].startswith("tasks/a.yaml: task 't': field 'dst"), problems
    assert "gap" in problems[0] and "'shift', 'skip' or 'jump'" in problems[0], problems
    assert problems[1].startswith("tasks/b.yaml: task 'u': field 'dst"), problems
    assert "folds" in problems[1], problems
