"""The config of calendars, blackouts, chains and ``expect`` (DESIGN.md, "Configuration"):
what loads, and ``ecron validate`` naming the file, task and field of every error."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from textwrap import dedent

import pytest

from ecron.calendars import Exclusion
from ecron.config import load_config
from ecron.config.rules import CalendarSpec
from ecron.config.summary import validation_report
from ecron.errors import ConfigError
from ecron.schedules import ScheduleKind

NOW = datetime(2026, 12, 23, 12, 0, tzinfo=UTC)  # a Wednesday

# The calendar and chain parts of DESIGN.md, "Configuration", as written there.
DESIGN_CALENDARS = """\
# DIR/tasks/anything.yaml (or ecron.yaml): named calendars, shared by tasks
calendars:
  business-days:
    weekdays: [mon, tue, wed, thu, fri]
    exclude: [2026-12-25, 2027-01-01]      # dates, in the time zone of the task using it
"""
DESIGN_TASKS = """\
tasks:
  - name: nightly-report                   # [a-z0-9][a-z0-9_.-]*, unique
    schedule: "0 3 * * *"
    timezone: Asia/Shanghai                # default UTC
    url: https://reports.internal/jobs/nightly
    calendar: business-days                # a name from `calendars`, or an inline calendar
    blackout:                              # windows in which no fire time runs
      - {from: 2026-12-24T00:00:00Z, to: 2026-12-27T00:00:00Z}
    expect: {success_within: 26h}          # alert task_overdue when no SUCCESS for that long
  - name: publish
    schedule: {after_task: nightly-report} # or {after_task: [a, b], on: [SUCCESS, FAILED]}
    url: https://reports.internal/jobs/publish
"""


def write(root: Path, daemon: str | None = None, **files: str) -> Path:
    """``ecron.yaml`` (when given) and ``tasks/<name>.yaml`` under ``root``."""
    if daemon is not None:
        (root / "ecron.yaml").write_text(dedent(daemon))
    (root / "tasks").mkdir(exist_ok=True)
    for name, text in files.items():
        (root / "tasks" / f"{name}.yaml").write_text(dedent(text))
    return root


def problems_of(root: Path) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        load_config(root, {}, NOW)
    return caught.value.problems


def test_the_design_examples_of_calendars_blackouts_expect_and_chains_load(
    tmp_path: Path,
) -> None:
    """The named calendar is resolved into the task (with its name), the blackout is a UTC
    window, ``expect`` a duration, and ``publish`` runs after ``nightly-report`` on SUCCESS."""
    write(tmp_path, calendars=DESIGN_CALENDARS, tasks=DESIGN_TASKS)

    config = load_config(tmp_path, {}, NOW)

    nightly = config.tasks["nightly-report"]
    assert nightly.calendar == CalendarSpec(
        name="business-days",
        weekdays=["mon", "tue", "wed", "thu", "fri"],
        exclude=[date(2026, 12, 25), date(2027, 1, 1)],
    )
    assert config.calendars["business-days"] == nightly.calendar
    assert nightly.blackout[0].window("Asia/Shanghai") == (
        datetime(2026, 12, 24, tzinfo=UTC),
        datetime(2026, 12, 27, tzinfo=UTC),
    )
    assert nightly.expect is not None and nightly.expect.success_within == timedelta(hours=26)
    publish = config.tasks["publish"].fire_schedule
    assert publish.kind is ScheduleKind.CHAIN
    assert (publish.upstreams, publish.on) == (("nightly-report",), frozenset({"SUCCESS"}))
    assert publish.text == "after task nightly-report"


def test_a_calendar_is_named_in_ecron_yaml_or_in_a_file_holding_only_calendars(
    tmp_path: Path,
) -> None:
    """``calendars`` may sit in ecron.yaml and in a task file without tasks; weekdays are
    read in any case; an inline calendar needs no name; a blackout may be written in dates."""
    write(
        tmp_path,
        "calendars:\n  weekends: {weekdays: [Sat, SUN]}\n",
        cal="calendars:\n  quiet: {exclude: [2026-12-24]}\n",
        jobs="""\
        tasks:
          - {name: a, schedule: "0 3 * * *", url: "http://h/a", calendar: weekends}
          - {name: b, schedule: "0 3 * * *", url: "http://h/b", calendar: quiet}
          - {name: c, schedule: "0 3 * * *", url: "http://h/c", calendar: {weekdays: [mon]}}
          - name: d
            schedule: "0 3 * * *"
            timezone: Asia/Tokyo
            url: "http://h/d"
            blackout: [{from: 2026-12-24, to: 2026-12-26}]
        """,
    )

    tasks = load_config(tmp_path, {}, NOW).tasks

    assert tasks["a"].calendar == CalendarSpec(name="weekends", weekdays=["sat", "sun"])
    assert tasks["b"].fire_times.excluded(datetime(2026, 12, 24, 3, tzinfo=UTC)) == (
        Exclusion.CALENDAR
    )
    assert tasks["c"].fire_times.next(None, NOW) == datetime(2026, 12, 28, 3, tzinfo=UTC)
    assert tasks["d"].blackout[0].window("Asia/Tokyo") == (  # dates: Tokyo's midnights
        datetime(2026, 12, 23, 15, tzinfo=UTC),
        datetime(2026, 12, 25, 15, tzinfo=UTC),
    )


def test_every_calendar_blackout_and_chain_error_names_its_file_task_and_field(
    tmp_path: Path,
) -> None:
    """An undefined calendar, a calendar excluding every day, a window ending before it
    starts, a calendar or blackout that leaves no fire time, a chain to a task that does not
    exist, a chain that loops, a status ``on`` does not know, a calendar defined twice: one
    line each."""
    write(
        tmp_path,
        cal="""\
        calendars:
          business-days: {weekdays: [mon, tue, wed, thu, fri]}
          never: {weekdays: []}
        """,
        jobs="""\
        calendars:
          business-days: {weekdays: [mon]}
        tasks:
          - {name: u, schedule: "0 3 * * *", url: "http://h/u", calendar: holidays}
          - name: w
            schedule: "0 3 * * *"
            url: "http://h/w"
            blackout: [{from: 2026-03-02T00:00:00Z, to: 2026-03-01T00:00:00Z}]
          - {name: sunday, schedule: "0 3 * * 0", url: "http://h/s", calendar: business-days}
          - name: once
            schedule: {at: 2027-01-05T10:00:00Z}
            url: "http://h/o"
            blackout: [{from: 2027-01-05T00:00:00Z, to: 2027-01-06T00:00:00Z}]
          - {name: orphan, schedule: {after_task: ghost}, url: "http://h/g"}
          - {name: a, schedule: {after_task: b}, url: "http://h/a"}
          - {name: b, schedule: {after_task: [c, a]}, url: "http://h/b"}
          - {name: c, schedule: "0 3 * * *", url: "http://h/c"}
          - {name: loud, schedule: {after_task: c, on: [DONE]}, url: "http://h/l"}
        """,
    )

    code, lines = validation_report(tmp_path, NOW, {})

    assert code == 1
    assert lines == [
        "tasks/cal.yaml: calendar 'never': field 'weekdays': the calendar excludes every "
        "day: list at least one weekday.",
        "tasks/jobs.yaml: calendar 'business-days': the name 'business-days' is already used "
        "by a calendar in tasks/cal.yaml; calendar names must be unique across all files.",
        "tasks/jobs.yaml: task 'u': field 'calendar': no calendar named 'holidays' is defined "
        "(defined: business-days, never); define it under 'calendars' in ecron.yaml or a "
        "tasks file, or write the calendar here.",
        "tasks/jobs.yaml: task 'w': field 'blackout[1].to': '2026-03-01T00:00:00+00:00' is "
        "not after from ('2026-03-02T00:00:00+00:00'): a window ends after it starts.",
        "tasks/jobs.yaml: task 'loud': field 'schedule.on': 'DONE' is not a status: use "
        "SUCCESS, FAILED, TIMED_OUT, CANCELLED.",
        "tasks/jobs.yaml: task 'orphan': field 'schedule.after_task': no task named 'ghost' "
        "is defined.",
        "tasks/jobs.yaml: task 'a': field 'schedule.after_task': the chain loops (a after b "
        "after a): a task cannot run after itself, even through others.",
        "tasks/jobs.yaml: task 'sunday': field 'calendar': it leaves out every fire time of "
        "the schedule (cron 0 3 * * 0 (UTC)): the task would never run.",
        "tasks/jobs.yaml: task 'once': field 'blackout': the windows cover every fire time "
        "left of the schedule (at 2027-01-05T10:00:00.000Z): the task would never run.",
    ]


def test_validate_shows_the_next_fire_time_that_will_really_run(tmp_path: Path) -> None:
    """A calendar leaving out Thursday and Christmas, and a blackout over Saturday: from
    Wednesday noon, the daily 03:00 task next runs on Sunday; a chain has none of its own."""
    write(
        tmp_path,
        jobs="""\
        tasks:
          - name: daily
            schedule: "0 3 * * *"
            url: "http://h/d"
            calendar: {weekdays: [mon, tue, wed, fri, sat, sun], exclude: [2026-12-25]}
            blackout: [{from: 2026-12-26T00:00:00Z, to: 2026-12-27T00:00:00Z}]
          - {name: after, schedule: {after_task: daily, on: [success, failed]}, url: "http://h/a"}
        """,
    )

    code, lines = validation_report(tmp_path, NOW, {})

    assert code == 0
    assert lines == [
        "daily  cron 0 3 * * * (UTC)                 next: 2026-12-27 03:00:00 UTC",
        "after  after task daily on SUCCESS, FAILED  next: -",
    ]


def test_the_examples_of_the_calendars_guide_load_and_validate_as_it_says(tmp_path: Path) -> None:
    """Every YAML example of docs/calendars.md loads together (its task examples under
    distinct names), and ``ecron validate`` on 22 December 2026 prints the lines the guide
    shows."""
    guide = (Path(__file__).resolve().parent.parent / "docs" / "calendars.md").read_text()
    blocks = re.findall(r"```yaml\n(.*?)```", guide, re.DOTALL)
    calendars, reports, chains, expect, stalled, daemon = blocks
    write(
        tmp_path,
        daemon,
        a_calendars=calendars,
        b_reports=reports,
        c_chains=chains,
        d_expect=expect.replace("nightly-report", "nightly-report-expected"),
        e_stalled=stalled.replace("nightly-report", "nightly-report-stalled"),
    )

    code, lines = validation_report(tmp_path, datetime(2026, 12, 22, 12, tzinfo=UTC), {})

    assert code == 0, lines
    shown = re.search(r"\$ ecron validate -c config.*?\n(.*?)```", guide, re.DOTALL)
    assert shown is not None
    # more tasks than the guide's: too wide for one line each, so two lines each (80 columns)
    printed = dict(zip(lines[::2], lines[1::2], strict=True))
    assert all(len(line) <= 80 for line in lines), lines
    for line in dedent(shown.group(1)).strip().splitlines():
        name, next_time = line.split()[0], line.rsplit("next: ", 1)[1]
        [next_line] = [after for head, after in printed.items() if head.startswith(name + " ")]
        assert next_line == f"    next: {next_time}", (line, lines)
