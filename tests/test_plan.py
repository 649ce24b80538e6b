"""The one diff of a task set (``task_set_change``): what the sync writes and what the
daemon logs are the same diff."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from structlog.testing import capture_logs

from ecron.config.model import TaskSpec
from ecron.planning import FirstFireTimes
from ecron.store.changes import FieldChange, StoredTask, spec_json, task_set_change
from ecron.store.sql import SqlStore
from tests.conftest import DaemonFactory, task
from tests.support.rig import FakeClock

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
URL = "http://127.0.0.1:9/jobs/x"
#: Schedules whose first fire time stays put for months: the CLI reads the real clock.
NEW_YEAR, MIDSUMMER = "0 0 1 1 *", "0 0 1 7 *"


# -- the pure diff ---------------------------------------------------------------------------


def stored(spec: TaskSpec, next_fire_at: datetime | None = None, **keys: Any) -> StoredTask:
    """``spec``'s row as a sync wrote it."""
    values: dict[str, Any] = {"retired": False, "next_fire_at": next_fire_at}
    values.update(keys)
    return StoredTask(spec.name, spec_json(spec), spec.digest, **values)


def a_task(**keys: Any) -> TaskSpec:
    """Task ``a`` with ``keys``: a one-call task, or a multi-step one when given ``steps``."""
    if "steps" in keys:
        return TaskSpec.model_validate({"name": "a", "schedule": "manual", **keys})
    return task("a", URL, **keys)


def fields_changed(old: dict[str, Any], new: dict[str, Any]) -> list[FieldChange]:
    """The field changes from task ``a`` with keys ``old`` to ``a`` with keys ``new``."""
    before, after = a_task(**old), a_task(**new)
    change = task_set_change({"a": stored(before)}, {"a": after}, FirstFireTimes(T0))
    return list(change.changed.get("a", ()))


def steps(*urls: str, **keys: Any) -> list[dict[str, Any]]:
    return [{"name": f"s{n}", "url": url, **keys} for n, url in enumerate(urls, start=1)]


SECRET_A, SECRET_B = {"Authorization": "Bearer one"}, {"Authorization": "Bearer two"}


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ({}, {}, []),
        ({"schedule": NEW_YEAR}, {"schedule": MIDSUMMER}, [("schedule", NEW_YEAR, MIDSUMMER)]),
        ({}, {"retry": {"max_attempts": 4}}, [("retry.max_attempts", 0, 4)]),
        (
            {"poll_interval": "1s", "misfire": {"grace": "1m"}},
            {"poll_interval": "2s", "misfire": {"grace": "2m"}},
            [("poll_interval", "1s", "2s"), ("misfire.grace", "1m", "2m")],
        ),
        (
            {"schedule": {"every": "1m"}},
            {"schedule": "manual"},
            [("schedule", {"every": "1m"}, "manual")],
        ),
        # a header value changed: shown, its values hidden; the digest tells it
        ({"headers": SECRET_A}, {"headers": SECRET_B}, [("headers.Authorization", "***", "***")]),
        ({"headers": SECRET_A}, {"headers": SECRET_A}, []),
        ({}, {"headers": SECRET_A}, [("headers.Authorization", None, "***")]),
        ({"secret": "s1"}, {"secret": "s2"}, [("secret", "***", "***")]),
        # with another change too, and with several secrets (which one is not known)
        (
            {"headers": SECRET_A, "secret": "s1", "jitter": "1s"},
            {"headers": SECRET_A, "secret": "s2", "jitter": "2s"},
            [("jitter", "1s", "2s"), ("secrets", "***", "***")],
        ),
        (
            {"body": {"n": 1, "tags": ["a"]}},
            {"body": {"n": 1, "tags": ["a", "b"]}},
            [("body.tags[2]", None, "b")],
        ),
    ],
)
def test_the_diff_names_each_changed_field_by_its_dotted_path_never_a_secret(
    old: dict[str, Any], new: dict[str, Any], expected: list[tuple[str, Any, Any]]
) -> None:
    """Fields are compared as stored (header values and secrets as ``***``), leaf by leaf,
    named by dotted path with list positions from 1; a secret that changed is named with
    its values hidden, ``secrets`` when the task has several."""
    assert fields_changed(old, new) == [FieldChange(*item) for item in expected]


def test_the_diff_of_a_multi_step_task_names_the_step_by_its_number() -> None:
    """A step's field is ``steps[N].field`` (N from 1, as ``ecron validate`` numbers steps),
    a step added is one change of its own, and a step's header value is hidden."""
    one = {"steps": steps("http://h/1", "http://h/2")}
    moved = {"steps": steps("http://h/1", "http://h/3")}
    more = {"steps": steps("http://h/1", "http://h/2", "http://h/4")}
    keyed = {"steps": steps("http://h/1", headers={"K": "v1"})}
    rekeyed = {"steps": steps("http://h/1", headers={"K": "v2"})}
    assert fields_changed(one, moved) == [FieldChange("steps[2].url", "http://h/2", "http://h/3")]
    [added] = fields_changed(one, more)
    assert (added.field, added.old, added.new["url"]) == ("steps[3]", None, "http://h/4")
    assert fields_changed(keyed, rekeyed) == [FieldChange("steps[1].headers.K", "***", "***")]


def test_the_diff_adds_changes_and_retires_with_each_next_fire_time_before_and_after() -> None:
    """New and revived tasks are added at their first fire time from now; a changed schedule
    restarts from now, another change keeps the stored fire time; a task no longer loaded
    is retired (no next fire time); an unchanged one is not in the diff."""
    firsts = FirstFireTimes(T0)
    kept_at, was = T0 + timedelta(days=3), T0 + timedelta(days=9)
    same, moved = task("same", URL, schedule=NEW_YEAR), task("moved", URL, schedule=NEW_YEAR)
    tuned, gone = task("tuned", URL, schedule=NEW_YEAR), task("gone", URL, schedule=NEW_YEAR)
    back, off = task("back", URL, schedule=NEW_YEAR), task("off", URL, schedule=NEW_YEAR)
    rows = {
        "same": stored(same, was),
        "moved": stored(moved, was),
        "tuned": stored(tuned, kept_at),
        "gone": stored(gone, was),
        "back": stored(back, None, retired=True),
        "off": stored(off, was),
    }
    specs = {
        "same": same,
        "moved": task("moved", URL, schedule=MIDSUMMER),
        "tuned": task("tuned", URL, schedule=NEW_YEAR, jitter="5s"),
        "back": back,
        "off": task("off", URL, schedule=NEW_YEAR, enabled=False),
        "new": task("new", URL, schedule=MIDSUMMER),
    }
    change = task_set_change(rows, specs, firsts)
    new_year, midsummer = datetime(2027, 1, 1, tzinfo=UTC), datetime(2026, 7, 1, tzinfo=UTC)
    assert (change.added, change.retired, change.revived) == (("back", "new"), ("gone",), ("back",))
    assert list(change.changed) == ["moved", "off", "tuned"]
    assert change.changed["off"] == (FieldChange("enabled", True, False),)
    assert change.next_fire == {
        "back": (None, new_year),
        "new": (None, midsummer),
        "moved": (was, midsummer),
        "off": (was, None),
        "tuned": (kept_at, kept_at),
        "gone": (was, None),
    }
    assert change.summary() == "2 to add, 3 to change, 1 to retire"
    assert not task_set_change({"same": stored(same, was)}, {"same": same}, firsts)


async def test_the_sync_writes_and_returns_the_diff(store: SqlStore) -> None:
    """``sync_tasks`` returns in ``SyncResult.changes`` the diff ``task_set_change`` gives
    for the rows it read, and writes each task's next fire time as that diff says."""
    a, b = task("a", URL, schedule=NEW_YEAR), task("b", URL, schedule=NEW_YEAR)
    await store.sync_tasks({"a": a, "b": b}, FirstFireTimes(T0))
    specs = {"a": task("a", URL, schedule=MIDSUMMER), "c": task("c", URL, schedule=NEW_YEAR)}
    later = FirstFireTimes(T0 + timedelta(hours=1))
    planned = task_set_change(await store.stored_tasks(), specs, later)
    result = await store.sync_tasks(specs, later)
    assert result.changes == planned
    assert (result.added, result.updated, result.retired) == (["c"], ["a"], ["b"])
    rows = await store.stored_tasks()
    assert {name: rows[name].next_fire_at for name in planned.next_fire} == {
        name: after for name, (_, after) in planned.next_fire.items()
    }
    assert not (await store.sync_tasks(specs, later)).changes


# -- the daemon's log ------------------------------------------------------------------------


async def test_the_start_and_a_reload_log_the_diff_plan_shows(make_daemon: DaemonFactory) -> None:
    """``tasks_synced`` at start lists the tasks added; at a reload it carries the diff that
    ``task_set_change`` (what ``ecron plan`` prints) gives for that moment, field by field
    with old and new values and the next fire time before and after."""
    clock = FakeClock(T0)
    first = [task("move", URL, schedule=NEW_YEAR), task("gone", URL, headers=SECRET_A)]
    with capture_logs() as logs:
        async with make_daemon(first, clock=clock) as daemon:
            started = [e for e in logs if e["event"] == "tasks_synced"]
            tasks = {
                "move": task("move", URL, schedule=MIDSUMMER, headers=SECRET_A),
                "new": task("new", URL),
            }
            clock.advance(timedelta(minutes=1))
            planned = task_set_change(
                await daemon.store.stored_tasks(), tasks, FirstFireTimes(clock.now())
            )
            del logs[:]
            await daemon.reload(daemon.config.model_copy(update={"tasks": tasks}))
            reloaded = [e for e in logs if e["event"] == "tasks_synced"]
    assert [(e["add"], e["change"], e["retire"]) for e in started] == [(["gone", "move"], [], [])]
    [event] = reloaded
    assert {key: event[key] for key in ("add", "change", "retire")} == planned.as_json()
    assert event["change"][0]["fields"] == [
        {"field": "schedule", "old": NEW_YEAR, "new": MIDSUMMER},
        {"field": "headers.Authorization", "old": None, "new": "***"},
    ]
    assert (event["change"][0]["next_fire_before"], event["change"][0]["next_fire_after"]) == (
        "2027-01-01T00:00:00.000Z",
        "2026-07-01T00:00:00.000Z",
    )
    assert (event["add"], event["retire"]) == (["new"], ["gone"])
