"""Bad input, fuzzed with hypothesis on a fixed budget: the report parser (and the reading of
raw answer bodies), durations, schedules, and the config loader (random YAML documents, and
random values for every field of a task and of the daemon).

Each either takes the input or refuses it with ecron's own error and a clear message:
``InvalidReport``, ``ValueError`` from a duration, ``ScheduleError``, or a ``ConfigError``
whose every problem names its file, its task and its field. Nothing else may escape, and
what is taken can be used: a loaded config is shown by ``ecron validate`` (its next fire
times) and its durations can be added to any time of this century.

The budget: ``derandomize=True`` (the same examples on every run, in CI too) and a fixed
``max_examples`` per test; the whole module runs in a few seconds. The live API's inputs
(callbacks, query parameters) are fuzzed in tests/test_fuzz_api.py.
"""

from __future__ import annotations

import json
import re
import string
import types
import typing
from datetime import UTC, datetime, timedelta
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

import hypothesis.strategies as st
import yaml
from hypothesis import HealthCheck, given, settings
from pydantic import BaseModel

from ecron.config import DaemonSettings, TaskSpec, load_config
from ecron.config.summary import task_lines
from ecron.core import InvalidReport, RemoteStatus, parse_report
from ecron.core.model import MESSAGE_LIMIT, RESULT_DEPTH, RESULT_LIMIT
from ecron.durations import format_duration, parse_duration
from ecron.errors import ConfigError, ScheduleError
from ecron.executor.http import OutcomeKind, classify
from ecron.schedules import ScheduleKind, next_fire_time, parse_schedule


def fuzz(examples: int) -> Any:
    """The fixed budget of one fuzz test."""
    return settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


#: Any JSON value, small.
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
statuses = st.sampled_from(
    ["RUNNING", "success", " Failed ", "UNKNOWN", "unknown", "DONE", "", "running\x00"]
)
#: Objects that look like reports, some of them nearly.
report_like = st.fixed_dictionaries(
    {},
    optional={
        "status": statuses | json_values,
        "progress": st.floats(allow_nan=True) | st.integers() | json_values,
        "message": st.text(min_size=990, max_size=1010) | st.text(max_size=10) | json_values,
        "result": json_values,
        "interrupted": json_values,
    },
)


def attempt(function: Any, *args: Any, errors: type[Exception]) -> tuple[Any, Exception | None]:
    """(what ``function(*args)`` returns, None), or (None, the error of type ``errors`` it
    raised); any other error escapes, failing the test."""
    try:
        return function(*args), None
    except errors as exc:
        return None, exc


def _depth(value: Any) -> int:
    """How deep lists and dicts nest in ``value`` (0 for a scalar), without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, list | dict):
            deepest = max(deepest, depth)
            stack.extend(
                (child, depth + 1) for child in (item.values() if isinstance(item, dict) else item)
            )
    return deepest


def _deep(depth: int) -> Any:
    value: Any = []
    for _ in range(depth - 1):
        value = [value]
    return value


@fuzz(150)
@given(
    body=report_like
    | json_values
    | st.integers(1, 1500).map(_deep)
    | st.integers(RESULT_DEPTH - 5, 1100).map(lambda n: {"status": "SUCCESS", "result": _deep(n)})
)
def test_parse_report_takes_a_report_or_refuses_it_with_invalid_report(body: Any) -> None:
    """Any decoded JSON is a report or an InvalidReport with a message; a report's fields
    are within the protocol's bounds (progress 0..100, message of at most 1,000 characters
    without NUL, a result of at most 64 KiB of JSON and 100 levels)."""
    report, refused = attempt(parse_report, body, errors=InvalidReport)
    if refused is not None:
        assert str(refused)
        return
    assert isinstance(report.status, RemoteStatus)
    assert report.progress is None or 0.0 <= report.progress <= 100.0
    assert report.message is None or (
        len(report.message) <= MESSAGE_LIMIT and "\x00" not in report.message
    )
    if report.result is not None and not report.result_truncated:
        encoded = json.dumps(report.result, ensure_ascii=False)
        assert len(encoded.encode()) <= RESULT_LIMIT
        assert _depth(report.result) <= RESULT_DEPTH
    assert isinstance(report.interrupted, bool)
    assert all(isinstance(warning, str) and warning for warning in report.warnings)


raw_bodies = st.one_of(
    st.binary(max_size=200),
    report_like.map(lambda value: json.dumps(value).encode()),
    st.tuples(report_like, st.binary(min_size=1, max_size=4)).map(
        lambda pair: json.dumps(pair[0]).encode()[:-1] + pair[1] + b"}"
    ),
    st.integers(1, 200_000).map(lambda n: b"[" * n + b"]" * n),
    st.integers(RESULT_DEPTH - 2, 1100).map(
        lambda n: b'{"status": "SUCCESS", "result": ' + b"[" * n + b"]" * n + b"}"
    ),
)


@fuzz(150)
@given(status=st.integers(100, 599), body=raw_bodies, too_big=st.booleans())
def test_any_answer_body_is_read_as_one_outcome_of_the_table(
    status: int, body: bytes, too_big: bool
) -> None:
    """Whatever bytes an answer holds, classify() names one outcome and never raises; a 2xx
    is a report, UNKNOWN, or not a report (with a detail saying why)."""
    outcome = classify(status, body, too_big)
    if 200 <= status < 300:
        assert outcome.kind in (OutcomeKind.REPORT, OutcomeKind.UNKNOWN, OutcomeKind.BAD_REPORT)
        assert (outcome.report is None) == (outcome.kind is OutcomeKind.BAD_REPORT)
        if outcome.kind is OutcomeKind.BAD_REPORT:
            assert outcome.detail
    else:
        assert outcome.report is None and outcome.kind is not OutcomeKind.REPORT


#: Durations at the edges: negative, zero, the longest ecron takes and beyond.
EDGE_DURATIONS = ["-5s", "0s", "0", "1ms", "0.5ms", "36500d", "36501d", "999999999d", "1e3s"]
#: Values shaped like durations, and anything else.
duration_like = st.one_of(
    st.sampled_from(EDGE_DURATIONS),
    st.text(alphabet="0123456789.msdh -+e_", max_size=24),
    st.text(max_size=12),
    st.integers(),
    st.floats(allow_nan=True),
    st.booleans(),
    st.none(),
    json_values,
)


@fuzz(200)
@given(value=duration_like)
def test_a_duration_is_read_or_refused_with_a_message_naming_it(value: Any) -> None:
    """Any value is a duration of zero or more, written back the same to the millisecond,
    or a ValueError that names the value and says how to write one."""
    duration, refused = attempt(parse_duration, value, errors=ValueError)
    if refused is not None:
        assert repr(value)[:20] in str(refused) and "duration" in str(refused)
        return
    assert duration >= timedelta(0)
    again = parse_duration(format_duration(duration))
    assert abs(again - duration) <= timedelta(milliseconds=1)


CRON_TOKENS = [
    *["0", "1", "7", "12", "29", "30", "31", "59", "60", "61", "99999999999999999999", "-1"],
    *["*", "*/0", "*/1", "*/15", "1-5", "5-1", "0-59/7", "1,2,3", "?", "L", "W", "1W", "5#3"],
    *["MON", "sun-sat", "jan", "JAN-DEC", "feb", "oct-jan", "mon-fri/2", "L-2"],
    *["@daily", "@hourly", "@yearly", "@reboot", "@every", "@weekly"],
]
ZONES = ["UTC", "Europe/Paris", "Asia/Shanghai", "America/New_York", "Australia/Lord_Howe"]
cron_like = st.one_of(
    st.lists(st.sampled_from(CRON_TOKENS), min_size=1, max_size=7).map(" ".join),
    st.text(alphabet=string.digits + " */-,?LW#", max_size=24),
    st.text(max_size=16),
)
EDGE_TIMES = [
    *["0001-01-01T00:00:00+01:00", "0001-01-01T00:00:00", "9999-12-31T23:59:59-01:00"],
    *["9999-12-31T23:30:00Z", "9999-12-31T23:59:59.9996Z", "9999-01-01T00:00:00"],
]
times = st.one_of(
    st.sampled_from([*EDGE_TIMES, "now", ""]),
    st.datetimes(timezones=st.none() | st.timezones()).map(datetime.isoformat),
    st.datetimes(timezones=st.none() | st.just(UTC)),
)
mapping_like = st.one_of(
    st.fixed_dictionaries({"every": duration_like}, optional={"start": times}),
    st.fixed_dictionaries({"at": times}),
    st.fixed_dictionaries({"after": duration_like}),
    st.dictionaries(
        st.sampled_from(["every", "after", "at", "start", "jitter"]) | st.text(max_size=5),
        duration_like | times,
        max_size=3,
    ),
)
NOW = datetime(2026, 6, 1, 12, 0, 0, 123000, tzinfo=UTC)


@fuzz(200)
@given(
    value=st.one_of(cron_like, mapping_like, json_values),
    timezone=st.sampled_from(ZONES) | st.text(max_size=20),
)
def test_a_schedule_is_read_or_refused_with_a_schedule_error_and_its_fire_times_compute(
    value: Any, timezone: str
) -> None:
    """Any schedule value and zone give a Schedule or a ScheduleError with a message; a
    Schedule's next fire times can be asked for (a time, or None when there is none), each
    one later than the one before."""
    schedule, refused = attempt(parse_schedule, value, timezone, errors=ScheduleError)
    if refused is not None:
        assert str(refused)
        return
    assert schedule.text
    previous = next_fire_time(schedule, None, NOW)
    if schedule.kind in (ScheduleKind.CRON, ScheduleKind.EVERY):
        assert previous is not None and previous >= NOW - timedelta(milliseconds=1)
    for _ in range(3):
        if previous is None or schedule.kind is ScheduleKind.AFTER:
            break
        following = next_fire_time(schedule, previous, NOW)
        assert following is None or following > previous
        previous = following


# --- the config loader -------------------------------------------------------------------------


KNOWN_FILES = ("ecron.yaml: ", "tasks/a.yaml: ")


def _load(root: Path, daemon: str | None, tasks: str | None) -> tuple[Any, list[str]]:
    """(the config, []) or (None, its problems), from these two files' texts."""
    for name, text in (("ecron.yaml", daemon), ("tasks/a.yaml", tasks)):
        path = root / name
        path.parent.mkdir(exist_ok=True)
        if text is None:
            path.unlink(missing_ok=True)
        else:
            path.write_text(text, encoding="utf-8")
    try:
        return load_config(root, {}), []
    except ConfigError as exc:
        return None, exc.problems


def _usable(config: Any) -> None:
    """What the daemon and ``ecron validate`` do with a loaded config at once: show each
    task's next fire time, and add each duration to a time of this century."""
    assert task_lines(config, NOW)
    for spec in config.tasks.values():
        for number in range(1, len(spec.steps) + 1) if spec.steps else [None]:
            call = spec.call(number)
            for duration in (call.request_timeout, call.task_timeout, call.poll_interval):
                assert NOW + duration > NOW
        assert NOW + spec.jitter >= NOW and NOW + spec.retry.max_backoff > NOW
    daemon = config.daemon
    assert NOW - daemon.history_retention < NOW < NOW + daemon.lease_ttl


yaml_documents = st.one_of(
    st.text(max_size=200),
    json_values.map(lambda value: yaml.safe_dump(value)),
    st.dictionaries(st.sampled_from(["tasks", "x-a", "other"]), json_values, max_size=2).map(
        yaml.safe_dump
    ),
    st.lists(
        st.dictionaries(st.sampled_from(["name", "schedule", "url", "steps"]), json_values),
        max_size=3,
    ).map(lambda tasks: yaml.safe_dump({"tasks": tasks})),
)


@fuzz(60)
@given(daemon=st.none() | yaml_documents, tasks=yaml_documents)
def test_any_yaml_documents_load_or_every_problem_names_its_file(
    daemon: str | None, tasks: str
) -> None:
    """Random YAML (or not YAML at all) in ecron.yaml and a tasks file: a usable config, or
    a ConfigError whose every problem is one sentence starting with its file's name."""
    with TemporaryDirectory() as directory:
        config, problems = _load(Path(directory), daemon, tasks)
    if config is not None:
        _usable(config)
    for problem in problems:
        assert problem.startswith(KNOWN_FILES), problem
        assert problem.endswith((".", "?")), problem


#: Odd texts for any text field: URLs without a host, variables unset or malformed, ...
ODD_TEXTS = ["", "http://", "ftp://x", "${UNSET}", "${", "$${x}", "a\x00b", "Mars/Olympus_Mons"]


def values_for(annotation: Any, name: str) -> st.SearchStrategy[Any]:
    """Random values for a config field of this type (by its annotation), near its edges,
    or anything at all."""
    anything = json_values | st.sampled_from(ODD_TEXTS)
    if name == "schedule":
        return cron_like | mapping_like | st.just("0 0 31 2 *") | anything
    if name == "timezone":
        return st.sampled_from(ZONES) | st.text(max_size=20) | anything
    args = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return st.one_of(*(values_for(arg, name) for arg in args)) | st.none()
    if origin is typing.Literal:
        return st.sampled_from(args) | st.text(max_size=8) | anything
    if origin is list and args:
        return st.lists(values_for(args[0], name), max_size=2) | anything
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        fields = {key: values_for(f.annotation, key) for key, f in annotation.model_fields.items()}
        return st.fixed_dictionaries({}, optional=fields) | anything
    if annotation is timedelta:  # the edges often: they are where durations break things
        return st.sampled_from(EDGE_DURATIONS) | duration_like
    if annotation is int:
        return st.integers(-5, 5) | st.sampled_from([10**6, 10**30, -(10**30)]) | anything
    return anything


def model_fields(model: type[BaseModel]) -> st.SearchStrategy[tuple[str, Any]]:
    """(a field of ``model``, a random value for it)."""
    return st.sampled_from(sorted(model.model_fields)).flatmap(
        lambda key: st.tuples(st.just(key), values_for(model.model_fields[key].annotation, key))
    )


@fuzz(200)
@given(field_value=model_fields(TaskSpec))
def test_a_random_value_for_any_task_field_loads_or_is_a_problem_naming_file_task_and_field(
    field_value: tuple[str, Any],
) -> None:
    """One field of an otherwise good task set to a random value: a usable config, or
    problems that each name tasks/a.yaml, the task (by name, or by position when the name
    is the bad field) and that field."""
    field, value = field_value
    item = {"name": "t", "schedule": "manual", "url": "http://s/jobs", field: value}
    if field == "steps":
        item.pop("url")
    with TemporaryDirectory() as directory:
        config, problems = _load(Path(directory), None, yaml.safe_dump({"tasks": [item]}))
    if config is not None:
        _usable(config)
    # a bad name names the task by its position, or by the bad name when it is a text
    task = r"(tasks\[1\]|task '.*')" if field == "name" else "task 't'"
    for problem in problems:
        assert re.match(rf"tasks/a\.yaml: {task}: field '({field}|url/steps)", problem), problem
        assert problem.endswith((".", "?")), problem


@fuzz(100)
@given(field_value=model_fields(DaemonSettings))
def test_a_random_value_for_any_daemon_setting_loads_or_is_a_problem_naming_the_field(
    field_value: tuple[str, Any],
) -> None:
    """One setting of ecron.yaml set to a random value: a usable config, or problems that
    each name ecron.yaml and that setting."""
    field, value = field_value
    with TemporaryDirectory() as directory:
        config, problems = _load(Path(directory), yaml.safe_dump({field: value}), None)
    if config is not None:
        _usable(config)
    for problem in problems:
        assert problem.startswith(f"ecron.yaml: field '{field}"), problem
        assert problem.endswith((".", "?")), problem
