"""``ecron plan -c DIR`` and the one diff of a task set behind it (``task_set_change``):
what the CLI prints, what the sync writes and what the daemon logs are the same diff."""

from __future__ import annotations

import asyncio
import hashlib
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from click.testing import CliRunner, Result
from structlog.testing import capture_logs

from ecron.cli import cli, plan  # noqa: F401  (registers the command)
from ecron.config import load_config
from ecron.config.model import TaskSpec
from ecron.config.summary import validation_report
from ecron.planning import FirstFireTimes
from ecron.store.changes import FieldChange, StoredTask, spec_json, task_set_change
from ecron.store.engine import Engines
from ecron.store.migrate import upgrade
from ecron.store.sql import SqlStore
from ecron.store.tables import task_table
from tests.support.daemon import DaemonFactory, task
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


# -- the command -----------------------------------------------------------------------------


def write_config(directory: Path, database: str, tasks: list[dict[str, Any]]) -> Path:
    """A config directory on ``database`` with ``tasks`` in ``tasks/jobs.yaml``."""
    (directory / "tasks").mkdir(parents=True, exist_ok=True)
    (directory / "ecron.yaml").write_text(f"database: '{database}'\nlisten: 127.0.0.1:0\n")
    (directory / "tasks" / "jobs.yaml").write_text(json.dumps({"tasks": tasks}))
    return directory


def job(name: str, schedule: str = NEW_YEAR, **keys: Any) -> dict[str, Any]:
    return {"name": name, "schedule": schedule, "url": f"http://127.0.0.1:9/jobs/{name}", **keys}


def sync(directory: Path) -> None:
    """Make the database follow the config in ``directory``, as the daemon's start does."""

    async def run() -> None:
        config = load_config(directory)
        store = SqlStore.open(config.daemon.database)
        try:
            await upgrade(store.engines)
            await store.sync_tasks(config.tasks, FirstFireTimes(datetime.now(UTC)))
        finally:
            await store.close()

    asyncio.run(run())


def dump(url: str) -> list[dict[str, Any]]:
    """Every task row, and the schema's revision: what plan must leave as it was."""

    async def read() -> list[dict[str, Any]]:
        engines = Engines(url)
        try:
            async with engines.read() as conn:
                rows = (await conn.execute(sa.select(task_table).order_by("name"))).mappings()
                found = [dict(row) for row in rows]
                version = await conn.execute(sa.text("SELECT version_num FROM alembic_version"))
                return [*found, {"revision": version.scalar()}]
        finally:
            await engines.dispose()

    return asyncio.run(read())


def run_plan(directory: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, ["plan", "-c", str(directory), *args])


def test_plan_exits_0_when_the_database_already_follows_the_config(
    database_url: str, tmp_path: Path
) -> None:
    """Right after a sync of the same files, nothing would change: exit 0."""
    directory = write_config(tmp_path / "c", database_url, [job("a"), job("b", "manual")])
    sync(directory)
    result = run_plan(directory)
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == ["No change: 0 to add, 0 to change, 0 to retire"]
    assert json.loads(run_plan(directory, "--json").stdout) == {
        "add": [],
        "change": [],
        "retire": [],
    }


def test_plan_shows_added_changed_and_retired_tasks_and_touches_nothing(
    database_url: str, tmp_path: Path
) -> None:
    """Exit 2 with each task named: added, changed with the schedule's old and new value
    and the next fire time before and after, retired; the database is left as it was."""
    directory = write_config(
        tmp_path / "c", database_url, [job("keep"), job("move"), job("gone", "manual")]
    )
    sync(directory)
    write_config(directory, database_url, [job("keep"), job("move", MIDSUMMER), job("new")])
    before = dump(database_url)
    result = run_plan(directory)
    now = datetime.now(UTC)
    new_year = f"{now.year + 1}-01-01 00:00:00 UTC"  # the task's zone, to the second
    shown = f"{now.year + (now.month >= 7)}-07-01 00:00:00 UTC"
    assert result.exit_code == 2, result.output
    assert result.stdout.splitlines() == [
        "+ new",
        f"    next fire: {new_year}",
        "~ move",
        f'    schedule: "{NEW_YEAR}" → "{MIDSUMMER}"',
        f"    next fire: {new_year} → {shown}",
        "- gone",
        "1 to add, 1 to change, 1 to retire",
    ]
    assert dump(database_url) == before


def test_plan_json_has_the_same_diff(database_url: str, tmp_path: Path) -> None:
    """``--json``: ``add``, ``change`` (per task its fields with old and new values, its next
    fire time before and after) and ``retire``; exit 2."""
    directory = write_config(tmp_path / "c", database_url, [job("move"), job("gone")])
    sync(directory)
    write_config(directory, database_url, [job("move", MIDSUMMER, retry={"max_attempts": 3})])
    result = run_plan(directory, "--json")
    assert result.exit_code == 2, result.output
    plan_json = json.loads(result.stdout)
    [change] = plan_json.pop("change")
    assert plan_json == {"add": [], "retire": ["gone"]}
    assert change["task"] == "move"
    assert change["fields"] == [
        {"field": "schedule", "old": NEW_YEAR, "new": MIDSUMMER},
        {"field": "retry.max_attempts", "old": 0, "new": 3},
    ]
    before, after = change["next_fire_before"], change["next_fire_after"]
    assert before.endswith("-01-01T00:00:00.000Z") and after.endswith("-07-01T00:00:00.000Z")


def test_plan_on_a_missing_sqlite_file_adds_every_task_and_creates_no_file(
    tmp_path: Path,
) -> None:
    """No database yet: every task would be added (exit 2, with a note), and the file is
    still not there afterwards."""
    path = tmp_path / "none.db"
    directory = write_config(tmp_path / "c", f"sqlite+aiosqlite:///{path}", [job("a"), job("b")])
    result = run_plan(directory)
    assert result.exit_code == 2, result.output
    assert "no ecron tasks in the database yet" in result.stdout
    assert [line for line in result.stdout.splitlines() if line.startswith("+")] == ["+ a", "+ b"]
    assert json.loads(run_plan(directory, "--json").stdout)["add"] == ["a", "b"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c"]


def test_plan_refuses_a_schema_of_another_revision_and_leaves_the_file_as_it_was(
    tmp_path: Path,
) -> None:
    """A database at an older schema revision: exit 1 saying to upgrade it first, and its
    file's bytes are the same afterwards (plan never migrates)."""
    path = tmp_path / "old.db"
    directory = write_config(tmp_path / "c", f"sqlite+aiosqlite:///{path}", [job("a")])
    sync(directory)

    async def stamp_older() -> None:
        engines = Engines(f"sqlite+aiosqlite:///{path}")
        async with engines.write() as conn:
            await conn.execute(sa.text("UPDATE alembic_version SET version_num = '0009'"))
        await engines.dispose()

    asyncio.run(stamp_older())
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    result = run_plan(directory)
    assert result.exit_code == 1
    assert "schema is at revision 0009" in result.stderr and "ecron db upgrade" in result.stderr
    assert hashlib.sha256(path.read_bytes()).hexdigest() == digest


def test_plan_of_a_bad_config_exits_1_naming_file_task_and_field(tmp_path: Path) -> None:
    """A config with an error: exit 1 with the lines ``ecron validate`` prints (file, task,
    field), nothing on stdout, and no database opened."""
    path = tmp_path / "never.db"
    directory = write_config(
        tmp_path / "c", f"sqlite+aiosqlite:///{path}", [job("a", "61 * * * *")]
    )
    result = run_plan(directory)
    assert result.exit_code == 1 and result.stdout == ""
    assert result.stderr.splitlines() == validation_report(directory, datetime.now(UTC))[1]
    assert "jobs.yaml" in result.stderr and "'a'" in result.stderr and "schedule" in result.stderr
    assert not path.exists()


def test_a_usage_error_of_plan_exits_1_not_2_which_means_changes(tmp_path: Path) -> None:
    """``ecron plan --nope`` is an error (1): 2 would read as "something would change"."""
    result = run_plan(tmp_path, "--nope")
    assert result.exit_code == 1 and "No such option" in result.stderr


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
