"""Config edge cases, each named: a task name used twice in one file, unknown keys in steps
and webhooks (with a "did you mean"), negative, zero and too long durations, a
``poll_interval`` longer than ``task_timeout``, a cron expression that never fires, and a
time zone that does not exist. Every refusal is one problem naming the file, the task and
the field. (tests/test_config.py holds the rest: a name used twice across files, misspelt
keys at the top and in mappings, durations without a unit.)"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from ecron.config import load_config
from ecron.config.summary import validation_report
from ecron.core import Status
from tests.protocol_support import ended, run_once
from tests.support.daemon import DaemonFactory, task
from tests.support.service import UserService
from tests.test_config import NOW, one_task, problems_of, write_config


@pytest.fixture
def database_url(tmp_path: Path) -> str:
    """The one test here that runs a daemon needs no PostgreSQL: SQLite."""
    return f"sqlite+aiosqlite:///{tmp_path / 'ecron.db'}"


def test_a_task_name_used_twice_in_one_file_is_reported_on_the_second(tmp_path: Path) -> None:
    """Two tasks of one file with the same name: one problem, on the second, naming the
    file of the first (the same file)."""
    write_config(
        tmp_path,
        a="""\
        tasks:
          - {name: nightly, schedule: manual, url: "http://s/a"}
          - {name: other, schedule: manual, url: "http://s/b"}
          - {name: nightly, schedule: manual, url: "http://s/c"}
        """,
    )

    assert problems_of(tmp_path) == [
        "tasks/a.yaml: task 'nightly': field 'name': the name 'nightly' is already used by a "
        "task in tasks/a.yaml; task names must be unique across all files."
    ]


def test_unknown_keys_in_a_step_and_a_webhook_are_named_with_a_suggestion(tmp_path: Path) -> None:
    """A misspelt key deep inside (a step, a webhook of ecron.yaml) is named by its whole
    path and gets the closest known key; a key like no known one gets no suggestion."""
    write_config(
        tmp_path,
        "notify:\n  webhooks:\n    - {url: 'http://hooks/a', evnets: [execution_failed]}\n",
        a=one_task("""\
            name: etl
            schedule: manual
            zzz: 1
            steps:
              - {name: fetch, url: "http://s/f", poll_intervall: 1s}
        """),
    )

    assert problems_of(tmp_path) == [
        "ecron.yaml: field 'notify.webhooks[1].evnets': is not a known key; did you mean 'events'?",
        "tasks/a.yaml: task 'etl': field 'steps[1].poll_intervall': is not a known key; did you "
        "mean 'poll_interval'?",
        "tasks/a.yaml: task 'etl': field 'zzz': is not a known key.",
    ]


@pytest.mark.parametrize(
    ("key", "value", "field", "problem"),
    [
        ("task_timeout", "-5s", "task_timeout", "'-5s' is not a duration"),
        ("poll_interval", "-1m", "poll_interval", "'-1m' is not a duration"),
        ("request_timeout", "0s", "request_timeout", "'0s' must be longer than zero"),
        ("trigger_retry", "{backoff: -1s}", "trigger_retry.backoff", "'-1s' is not a duration"),
        ("schedule", "{every: -10m}", "schedule.every", "'-10m' is not a duration"),
        ("task_timeout", "999999999d", "task_timeout", "'999999999d' is too long a duration"),
        ("schedule", "{every: 36501d}", "schedule.every", "'36501d' is too long a duration"),
    ],
)
def test_a_negative_zero_or_too_long_duration_is_one_problem_naming_the_field(
    tmp_path: Path, key: str, value: str, field: str, problem: str
) -> None:
    """Durations have no sign, the ones that must be are longer than zero, and none is
    longer than 100 years (36500d), which would run the times it is added to off the
    calendar; each refusal names the file, the task and the field."""
    schedule = "" if key == "schedule" else "schedule: manual, "
    write_config(tmp_path, a=one_task(f"{{name: t, {schedule}url: 'http://s', {key}: {value}}}"))

    (found,) = problems_of(tmp_path)

    assert found.startswith(f"tasks/a.yaml: task 't': field '{field}': {problem}"), found


@pytest.mark.parametrize(
    ("key", "value"), [("lease_ttl", "-1s"), ("tick", "0s"), ("history_retention", "40000d")]
)
def test_a_daemon_duration_that_is_negative_zero_or_too_long_is_refused(
    tmp_path: Path, key: str, value: str
) -> None:
    """ecron.yaml's durations follow the same rules, each problem naming the setting."""
    write_config(tmp_path, f"{key}: {value}\n")

    (found,) = problems_of(tmp_path)

    assert found.startswith(f"ecron.yaml: field '{key}': '{value}' "), found


def test_a_cron_expression_that_never_fires_is_a_problem_of_its_schedule(tmp_path: Path) -> None:
    """``0 0 31 2 *`` (31 February) never fires: a config error on the task's schedule, not
    a task that silently never runs."""
    write_config(tmp_path, a=one_task("{name: t, schedule: '0 0 31 2 *', url: 'http://s'}"))

    assert problems_of(tmp_path) == [
        "tasks/a.yaml: task 't': field 'schedule': '0 0 31 2 *' never fires (no such date, "
        "like 30 February)."
    ]


@pytest.mark.parametrize("zone", ["Mars/Olympus_Mons", "Europe/Pariss", "UTC+2"])
def test_a_time_zone_that_does_not_exist_is_a_problem_of_its_field(
    tmp_path: Path, zone: str
) -> None:
    """An unknown zone is one problem on ``timezone`` (the schedule is not blamed for it)."""
    write_config(
        tmp_path,
        a=one_task(f"{{name: t, schedule: '0 3 * * *', timezone: {zone}, url: 'http://s'}}"),
    )

    assert problems_of(tmp_path) == [
        f"tasks/a.yaml: task 't': field 'timezone': '{zone}' is not a known time zone (use an "
        "IANA name like Europe/Paris)."
    ]


def test_validate_notes_a_poll_interval_longer_than_the_task_timeout(tmp_path: Path) -> None:
    """poll_interval 1h with task_timeout 30m is taken (a service may report by callback),
    but ``ecron validate`` notes, after the task lines, that it is never polled before its
    deadline; a task in callback mode, never polled, gets no note."""
    write_config(
        tmp_path,
        "public_url: http://ecron.internal:8080\n",
        a="""\
        tasks:
          - {name: slow, schedule: manual, url: "http://s/a", poll_interval: 1h, task_timeout: 30m}
          - {name: pushed, schedule: manual, url: "http://s/b", mode: callback, poll_interval: 1h,
             task_timeout: 30m}
          - {name: etl, schedule: manual, task_timeout: 2h,
             steps: [{name: a, url: "http://s/c"}, {name: b, url: "http://s/d", task_timeout: 2s}]}
        """,
    )

    code, lines = validation_report(tmp_path, NOW, environ={})

    assert code == 0 and len(lines) == 5
    assert lines[3:] == [
        "note: task 'slow': poll_interval 1h is longer than task_timeout 30m: it is never "
        "polled before its deadline, so it ends TIMED_OUT unless its trigger's answer or a "
        "callback ends it first.",
        "note: task 'etl' step 2 (b): poll_interval 5s is longer than task_timeout 2s: it is "
        "never polled before its deadline, so it ends TIMED_OUT unless its trigger's answer "
        "or a callback ends it first.",
    ]
    assert load_config(tmp_path, {}).tasks["slow"].poll_interval == timedelta(hours=1)


def test_validate_notes_a_batch_poll_url_on_a_call_that_is_never_polled(tmp_path: Path) -> None:
    """batch_poll_url on a task in mode callback (or a step in mode queue) is taken but
    never used: ``ecron validate`` notes it; in mode poll it gets no note."""
    write_config(
        tmp_path,
        "public_url: http://ecron.internal:8080\nqueue: {url: redis://redis:6379/0}\n",
        a="""\
        tasks:
          - {name: pushed, schedule: manual, url: "http://s/a", mode: callback,
             batch_poll_url: "http://s/batch"}
          - {name: polled, schedule: manual, url: "http://s/b", batch_poll_url: "http://s/batch"}
          - {name: etl, schedule: manual, batch_poll_url: "http://s/batch",
             steps: [{name: a, url: "http://s/c"}, {name: b, url: "http://s/d", mode: queue}]}
        """,
    )

    code, lines = validation_report(tmp_path, NOW, environ={})

    assert code == 0 and len(lines) == 5
    assert lines[3:] == [
        "note: task 'pushed': batch_poll_url is never used: a call in mode callback is never "
        "polled.",
        "note: task 'etl' step 2 (b): batch_poll_url is never used: a call in mode queue is "
        "never polled.",
    ]


@pytest.mark.parametrize(
    ("daemon", "notes"),
    [
        ("", ["pushed", "queued"]),
        ("public_url: http://ecron.internal:8080\n", ["queued"]),
        ("queue: {url: redis://redis:6379/0}\n", []),
    ],
)
def test_validate_notes_a_pushed_only_call_the_daemon_gives_no_way_to_push(
    tmp_path: Path, daemon: str, notes: list[str]
) -> None:
    """mode queue without a ``queue``, and mode callback with neither a ``public_url`` nor a
    ``queue`` (a queue carries the callback token too), are taken but noted: the service is
    given nothing to report to."""
    write_config(
        tmp_path,
        daemon or "{}\n",
        a="""\
        tasks:
          - {name: pushed, schedule: manual, url: "http://s/a", mode: callback}
          - {name: queued, schedule: manual, url: "http://s/b", mode: queue}
          - {name: polled, schedule: manual, url: "http://s/c"}
        """,
    )

    code, lines = validation_report(tmp_path, NOW, environ={})

    expected = {
        "pushed": "note: task 'pushed': mode callback, but ecron.yaml sets no public_url (or "
        "ECRON_PUBLIC_URL): its service is given no URL to report to, and it ends FAILED "
        "unreachable after heartbeat_timeout unless it reports another way.",
        "queued": "note: task 'queued': mode queue, but ecron.yaml sets no queue.url (or "
        "ECRON_QUEUE_URL): its service is given no stream to report to, and it ends FAILED "
        "unreachable after heartbeat_timeout unless it reports another way.",
    }
    assert code == 0
    assert lines[3:] == [expected[name] for name in notes]


async def test_a_poll_interval_longer_than_the_task_timeout_still_times_out_at_the_deadline(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """poll_interval 1h, task_timeout 300ms: the execution is looked at at its deadline, not
    an hour later: one cancel, TIMED_OUT, and no poll was ever sent."""
    user_service.duration = 3600
    spec = task("slow", f"{user_service.url}/jobs/x", poll_interval="1h", task_timeout="300ms")
    async with make_daemon([spec]) as daemon:
        eid = await run_once(daemon, "slow")
        execution = await ended(daemon, eid, timeout=5)
    assert (execution.status, execution.reason) == (Status.TIMED_OUT, None)
    assert user_service.methods_for(eid) == ["POST", "DELETE"]
