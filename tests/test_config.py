"""The config loader and ``ecron validate``: YAML and environment into settings, all errors at once."""

# ruff: noqa: E501  (the DESIGN.md examples below are copied exactly, long comments included)
from __future__ import annotations

import os
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from textwrap import dedent

import pytest
from click.testing import CliRunner
from pydantic import BaseModel

import ecron.cli.validate  # noqa: F401  (registers the command)
from ecron.cli import cli
from ecron.config import Config, DaemonSettings, StepSpec, TaskSpec, load_config
from ecron.config.loader import settings_model
from ecron.config.summary import validation_report
from ecron.durations import parse_duration
from ecron.errors import ConfigError

REPO = Path(__file__).resolve().parent.parent
NOW = datetime(2026, 3, 2, 8, 0, 10, tzinfo=UTC)  # a Monday

# The two YAML blocks of DESIGN.md, "Configuration", copied exactly.
DESIGN_DAEMON = """\
# DIR/ecron.yaml
database: sqlite+aiosqlite:///ecron.db     # relative paths are relative to DIR; or postgresql+asyncpg://user:pw@host/db
listen: 127.0.0.1:8080
public_url: http://127.0.0.1:8080          # base of the callback URLs handed to user services
api_token: ${ECRON_API_TOKEN}              # optional; when set, the API wants it as a bearer token
secret: ${ECRON_SECRET}                    # signs callback tokens; generated and stored in the database when absent
node_id: auto
lease_ttl: 15s
tick: 200ms                                # the longest the scheduler goes without looking for new work; known fire times are met exactly
patrol_interval: 60s
history_retention: 30d
log: {format: json, level: info}           # or format: console
"""

DESIGN_TASKS = """\
# DIR/tasks/anything.yaml: a list under `tasks`
tasks:
  - name: nightly-report                   # [a-z0-9][a-z0-9_.-]*, unique
    schedule: "0 3 * * *"                  # cron (5 fields, or 6 with seconds first); or {every: 10m} (optionally with start: TIME); {after: 10m}; {at: 2026-12-01T03:00:00Z} (a YAML timestamp or a string); or manual
    timezone: Asia/Shanghai                # default UTC
    url: https://reports.internal/jobs/nightly
    headers: {Authorization: "Bearer ${REPORTS_TOKEN}"}
    body: {kind: full}
    poll_url: "{url}/{execution_id}"       # default
    cancel_url: "{url}/{execution_id}"     # default
    request_timeout: 10s                   # one HTTP call
    task_timeout: 2h                       # the whole execution; then cancel + TIMED_OUT
    poll_interval: 5s
    max_probe_failures: 5
    mode: poll                             # poll (default; callbacks also accepted) | callback (never polled)
    heartbeat_timeout: 5m                  # mode callback: longest silence before FAILED unreachable
    secret: ${REPORTS_SIGNING_SECRET}      # optional: sign requests (X-Ecron-Signature)
    trigger_retry: {attempts: 3, backoff: 1s, max_backoff: 30s}
    retry: {max_attempts: 0, backoff: 30s, max_backoff: 10m}   # new executions after FAILED
    concurrency: forbid                    # allow | forbid | replace
    misfire: {policy: run_once, grace: 5m} # skip | run_once | run_all
    idempotent: true                       # false: never resumed automatically
    resume: {auto: false, max_attempts: 3, within: 30m}
    pause_after_failures: 0                # 0: never
    jitter: 0s
    enabled: true
  - name: etl
    schedule: "30 4 * * 1-5"
    idempotent: true
    resume: {auto: true}
    steps:                                 # instead of url; each step may set any per-call key above
      - {name: fetch, url: "https://etl.internal/fetch"}
      - {name: load,  url: "https://etl.internal/load", task_timeout: 30m}
"""

DESIGN_ENV = {
    "ECRON_API_TOKEN": "api-token-0123456789",
    "ECRON_SECRET": "daemon-secret",
    "REPORTS_TOKEN": "reports-token",
    "REPORTS_SIGNING_SECRET": "signing-secret",
}


def write_config(root: Path, daemon: str | None = None, **task_files: str) -> Path:
    """Write ``ecron.yaml`` (when given) and ``tasks/<name>.yaml`` files under ``root``."""
    if daemon is not None:
        (root / "ecron.yaml").write_text(dedent(daemon))
    (root / "tasks").mkdir(exist_ok=True)
    for name, text in task_files.items():
        (root / "tasks" / f"{name}.yaml").write_text(dedent(text))
    return root


def one_task(body: str) -> str:
    """A tasks file holding one task whose keys are ``body`` (indented YAML lines)."""
    return "tasks:\n  - " + dedent(body).strip().replace("\n", "\n    ") + "\n"


@pytest.fixture
def clean_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    """No ``ECRON_*`` variable of the machine running the tests reaches the CLI under test."""
    for name in [name for name in os.environ if name.startswith("ECRON_")]:
        monkeypatch.delenv(name)


def problems_of(root: Path, environ: dict[str, str] | None = None) -> list[str]:
    """The problems ``load_config`` reports for ``root`` (it must fail)."""
    with pytest.raises(ConfigError) as caught:
        load_config(root, environ or {})
    return caught.value.problems


# --- whole configs -----------------------------------------------------------------------------


def test_the_design_example_config_validates_with_its_variables_set(tmp_path: Path) -> None:
    """The two example blocks of DESIGN.md load as they are once their variables are set."""
    write_config(tmp_path, DESIGN_DAEMON, anything=DESIGN_TASKS)

    config = load_config(tmp_path, DESIGN_ENV)

    assert isinstance(config, Config)
    assert config.daemon.api_token == "api-token-0123456789"
    assert config.daemon.secret == "daemon-secret"
    assert config.daemon.tick == timedelta(milliseconds=200)
    assert config.daemon.log.format == "json"
    assert list(config.tasks) == ["nightly-report", "etl"]
    nightly = config.tasks["nightly-report"]
    assert nightly.headers == {"Authorization": "Bearer reports-token"}
    assert nightly.secret == "signing-secret"
    assert nightly.timezone == "Asia/Shanghai"
    assert config.tasks["etl"].step_names == ("fetch", "load")


def test_node_id_auto_is_left_for_the_daemon_to_resolve(tmp_path: Path) -> None:
    """``node_id: auto`` stays the text ``auto``; the daemon makes the id."""
    write_config(tmp_path, DESIGN_DAEMON, anything=DESIGN_TASKS)

    assert load_config(tmp_path, DESIGN_ENV).daemon.node_id == "auto"


def test_a_directory_without_ecron_yaml_gets_every_default(tmp_path: Path) -> None:
    """A missing ``ecron.yaml`` means all daemon defaults (the database file still lands in DIR)."""
    write_config(tmp_path)

    config = load_config(tmp_path, {})

    defaults = DaemonSettings()
    assert config.daemon.model_dump(exclude={"database"}) == defaults.model_dump(
        exclude={"database"}
    )
    assert config.daemon.database == f"sqlite+aiosqlite:///{tmp_path.resolve() / 'ecron.db'}"
    assert config.tasks == {}


def test_a_directory_that_does_not_exist_is_reported(tmp_path: Path) -> None:
    """Naming a config directory that is not there is one problem naming it."""
    problems = problems_of(tmp_path / "nowhere")

    assert problems == [
        f"{tmp_path / 'nowhere'}: is not a directory (expected ecron.yaml and tasks/)."
    ]


def test_the_repository_example_config_validates_without_any_environment() -> None:
    """``config/`` in the repository is accepted with no environment variables set."""
    code, lines = validation_report(REPO / "config", NOW, environ={})

    assert code == 0, lines
    config = load_config(REPO / "config", {})
    demo = config.tasks["demo-report"]
    assert demo.url == "http://127.0.0.1:8081/jobs/report"
    assert demo.fire_schedule.text == "every 30s"
    assert config.daemon.listen == "127.0.0.1:8080"
    assert config.daemon.public_url == "http://127.0.0.1:8080"
    assert config.daemon.database == f"sqlite+aiosqlite:///{REPO / 'config' / 'ecron.db'}"
    assert any(not task.enabled and task.timezone != "UTC" for task in config.tasks.values())


# --- every problem at once ---------------------------------------------------------------------

REPORTS = """\
tasks:
  - name: nightly
    schedule: "61 * * * *"
    url: https://reports.internal/jobs/nightly
  - name: hourly
    schedule: "0 * * * *"
    url: https://reports.internal/jobs/hourly
    trigger_retry: {attempts: 3, backoff: 10}
"""

PIPELINES = """\
tasks:
  - name: etl
    schedule: "30 4 * * 1-5"
    steps:
      - {name: fetch, url: "https://etl.internal/fetch"}
      - {name: load, url: "ftp://etl.internal/load"}
"""

EXPECTED_PROBLEMS = [
    "tasks/pipelines.yaml: task 'etl': field 'steps[2].url': "
    "'ftp://etl.internal/load' is not an http(s) URL.",
    "tasks/reports.yaml: task 'nightly': field 'schedule': '61 * * * *' is not a valid cron "
    "expression (cron field 'minute': 61 is higher than the maximum value (59)).",
    "tasks/reports.yaml: task 'hourly': field 'trigger_retry.backoff': 10 is not a duration: "
    "write it with a unit, like 30s or 10m.",
]


def test_three_mistakes_in_two_files_are_three_problems_naming_file_task_and_field(
    tmp_path: Path,
) -> None:
    """Loading does not stop at the first problem: each one names its file, task and field."""
    write_config(tmp_path, reports=REPORTS, pipelines=PIPELINES)

    assert problems_of(tmp_path) == EXPECTED_PROBLEMS


@pytest.mark.usefixtures("clean_environ")
def test_validate_exits_1_and_prints_every_problem_to_stderr(tmp_path: Path) -> None:
    """``ecron validate -c DIR`` on a broken config prints one line per problem and exits 1."""
    write_config(tmp_path, reports=REPORTS, pipelines=PIPELINES)

    result = CliRunner().invoke(cli, ["validate", "-c", str(tmp_path)])

    assert result.exit_code == 1
    assert result.stderr.splitlines() == EXPECTED_PROBLEMS
    assert result.stdout == ""


def test_validate_prints_one_line_per_task_with_its_next_fire_time(tmp_path: Path) -> None:
    """On success each task gets a line: name, schedule, next fire time (a wall time of the
    task's zone, to the second, with the zone) or ``-``."""
    write_config(
        tmp_path,
        tasks="""\
        tasks:
          - {name: often, schedule: {every: 30s}, url: "http://svc/jobs/a"}
          - {name: weekdays, schedule: "0 9 * * 1-5", timezone: Europe/Paris, url: "http://svc/b"}
          - {name: by-hand, schedule: manual, url: "http://svc/c"}
          - {name: chained, schedule: {after: 10m}, url: "http://svc/d"}
          - {name: dormant, schedule: "0 3 * * *", url: "http://svc/e", enabled: false}
        """,
    )

    code, lines = validation_report(tmp_path, NOW, environ={})

    assert code == 0
    assert [re.split(r"\s{2,}", line) for line in lines] == [
        ["often", "every 30s", "next: 2026-03-02 08:00:30 UTC"],
        ["weekdays", "cron 0 9 * * 1-5 (Europe/Paris)", "next: 2026-03-03 09:00:00 CET"],
        ["by-hand", "manual", "next: -"],
        ["chained", "after 10m", "next: -"],
        ["dormant", "cron 0 3 * * * (UTC)", "next: -", "(disabled)"],
    ]


@pytest.mark.usefixtures("clean_environ")
def test_validate_fits_80_columns_each_next_fire_time_in_its_tasks_zone_or_in_utc(
    tmp_path: Path,
) -> None:
    """In 80 columns: README's 02:30 Asia/Shanghai task shows its next fire time at 02:30
    CST, to the second, on its line (``--utc``: 18:30 UTC); beside a long name and a long
    schedule, every task takes two lines instead of running past the edge."""
    write_config(
        tmp_path,
        a=one_task(
            "{name: nightly-report, schedule: '30 2 * * *', timezone: Asia/Shanghai, "
            "url: 'http://s/a'}"
        ),
    )
    runner = CliRunner()
    local = runner.invoke(cli, ["validate", "-c", str(tmp_path)], env={"COLUMNS": "80"})
    utc = runner.invoke(cli, ["validate", "-c", str(tmp_path), "--utc"], env={"COLUMNS": "80"})
    assert local.exit_code == utc.exit_code == 0, local.output
    assert re.fullmatch(
        r"nightly-report  cron 30 2 \* \* \* \(Asia/Shanghai\)  next: \d{4}-\d\d-\d\d "
        r"02:30:00 CST\n",
        local.stdout,
    ), local.stdout
    assert re.search(r"next: \d{4}-\d\d-\d\d 18:30:00 UTC\n$", utc.stdout), utc.stdout
    write_config(
        tmp_path,
        b=one_task(
            "{name: page-the-on-call-engineer, schedule: {after_task: nightly-report, "
            "on: [FAILED, TIMED_OUT]}, url: 'http://s/b'}"
        ),
    )
    both = runner.invoke(cli, ["validate", "-c", str(tmp_path)], env={"COLUMNS": "80"})
    lines = both.stdout.splitlines()
    assert both.exit_code == 0 and all(len(line) <= 80 for line in lines), both.stdout
    assert lines[0].split() == [
        "nightly-report",
        "cron",
        "30",
        "2",
        "*",
        "*",
        "*",
        "(Asia/Shanghai)",
    ]
    assert re.fullmatch(r"    next: \d{4}-\d\d-\d\d 02:30:00 CST", lines[1]), lines
    assert lines[3] == "    next: -", lines


@pytest.mark.usefixtures("clean_environ")
def test_validate_command_prints_the_task_lines_and_exits_0(tmp_path: Path) -> None:
    """The command prints the success lines on stdout and exits 0."""
    write_config(tmp_path, a=one_task("{name: often, schedule: {every: 30s}, url: 'http://s/a'}"))

    result = CliRunner().invoke(cli, ["validate", "--config", str(tmp_path)])

    assert result.exit_code == 0, result.output
    assert len(result.stdout.splitlines()) == 1
    assert result.stdout.startswith("often  every 30s  next: ")


# --- interpolation -----------------------------------------------------------------------------


def test_a_missing_variable_is_a_problem_naming_file_task_field_and_variable(
    tmp_path: Path,
) -> None:
    """``${VAR}`` with VAR unset is reported with where it was used; other fields still checked."""
    write_config(
        tmp_path,
        reports=one_task("""\
            name: nightly
            schedule: manual
            url: https://reports.internal/jobs
            headers: {Authorization: "Bearer ${REPORTS_TOKEN}"}
            mode: sometimes
        """),
    )

    assert problems_of(tmp_path) == [
        "tasks/reports.yaml: task 'nightly': field 'headers.Authorization': environment variable "
        "'REPORTS_TOKEN' is not set (write ${REPORTS_TOKEN:-default} to give it a default).",
        "tasks/reports.yaml: task 'nightly': field 'mode': 'sometimes' is not allowed: "
        "use 'poll', 'callback' or 'queue'.",
    ]


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, "http://fallback:8081/jobs"),
        ({"SERVICE": ""}, "http://fallback:8081/jobs"),
        ({"SERVICE": "http://real:9000"}, "http://real:9000/jobs"),
    ],
)
def test_a_default_is_used_when_the_variable_is_unset_or_empty(
    tmp_path: Path, environ: dict[str, str], expected: str
) -> None:
    """``${VAR:-default}`` gives the default when VAR is unset or empty, else VAR's value."""
    write_config(
        tmp_path,
        a=one_task("{name: t, schedule: manual, url: '${SERVICE:-http://fallback:8081}/jobs'}"),
    )

    assert load_config(tmp_path, environ).tasks["t"].url == expected


def test_dollar_dollar_brace_is_a_literal_dollar_brace(tmp_path: Path) -> None:
    """``$${`` writes a literal ``${`` that is not looked up."""
    write_config(
        tmp_path,
        a=one_task("""\
            name: t
            schedule: manual
            url: http://svc/jobs
            body: {template: "$${NOT_A_VARIABLE} and ${NAME}"}
        """),
    )

    body = load_config(tmp_path, {"NAME": "x"}).tasks["t"].body
    assert body == {"template": "${NOT_A_VARIABLE} and x"}


def test_interpolation_happens_after_parsing_so_values_cannot_break_the_yaml(
    tmp_path: Path,
) -> None:
    """A variable holding YAML syntax (``: #``) ends up verbatim in the string, in lists too."""
    write_config(
        tmp_path,
        a=one_task("""\
            name: t
            schedule: manual
            url: http://svc/jobs
            body: {args: ["${TRICKY}", 3], nested: {deep: ["${TRICKY}"]}}
        """),
    )

    body = load_config(tmp_path, {"TRICKY": "a: b # c"}).tasks["t"].body
    assert body == {"args": ["a: b # c", 3], "nested": {"deep": ["a: b # c"]}}


def test_an_optional_key_left_empty_by_a_default_counts_as_unset(tmp_path: Path) -> None:
    """``secret: ${SECRET:-}`` with SECRET unset means no secret (a step then inherits its task's)."""
    write_config(
        tmp_path,
        "",
        a=one_task("{name: t, schedule: manual, url: 'http://s/a', secret: '${SECRET:-}'}"),
        b=one_task("""\
            name: u
            schedule: manual
            secret: task-secret
            steps: [{name: one, url: "http://s/b", secret: "${STEP_SECRET:-}"}]
        """),
    )

    config = load_config(tmp_path, {})

    assert config.tasks["t"].secret is None
    assert config.tasks["u"].call(1).secret == "task-secret"


# --- environment overrides ---------------------------------------------------------------------


def test_environment_variables_win_over_ecron_yaml(tmp_path: Path) -> None:
    """``ECRON_<KEY>`` (and ``ECRON_LOG_<KEY>``, ``ECRON_DATABASE_URL``) beat the file."""
    write_config(
        tmp_path,
        """\
        database: sqlite+aiosqlite:///ecron.db
        listen: 127.0.0.1:8080
        tick: 200ms
        log: {format: json, level: info}
        """,
    )
    environ = {
        "ECRON_DATABASE_URL": "postgresql+asyncpg://ecron:pw@db/ecron",
        "ECRON_LISTEN": "0.0.0.0:9000",
        "ECRON_API_TOKEN": "t0k-0123456789abcdef",  # another machine may reach it: a token is needed
        "ECRON_TICK": "1s",
        "ECRON_LOG_LEVEL": "debug",
        "ECRON_POLL_WORKERS": "8",
    }

    daemon = load_config(tmp_path, environ).daemon

    assert daemon.database == "postgresql+asyncpg://ecron:pw@db/ecron"
    assert daemon.listen == "0.0.0.0:9000"
    assert daemon.tick == timedelta(seconds=1)
    assert daemon.log.level == "debug"
    assert daemon.log.format == "json"
    assert daemon.poll_workers == 8


def test_ecron_database_url_wins_over_ecron_database(tmp_path: Path) -> None:
    """Both names set ``database``; ``ECRON_DATABASE_URL`` is the one that counts."""
    write_config(tmp_path)
    environ = {
        "ECRON_DATABASE": "sqlite+aiosqlite:///other.db",
        "ECRON_DATABASE_URL": "postgresql+asyncpg://u:p@h/d",
    }

    assert load_config(tmp_path, environ).daemon.database == "postgresql+asyncpg://u:p@h/d"
    del environ["ECRON_DATABASE_URL"]
    expected = f"sqlite+aiosqlite:///{tmp_path.resolve() / 'other.db'}"
    assert load_config(tmp_path, environ).daemon.database == expected


def test_an_overridden_key_needs_no_variable_in_the_file(tmp_path: Path) -> None:
    """When ``ECRON_API_TOKEN`` is set, the file's ``${...}`` for that key is not looked at."""
    write_config(tmp_path, "api_token: ${SOMETHING_UNSET}\n")

    token = "t-0123456789abcdef"
    assert load_config(tmp_path, {"ECRON_API_TOKEN": token}).daemon.api_token == token


def test_an_invalid_environment_value_is_a_problem_naming_the_variable(tmp_path: Path) -> None:
    """Environment values are validated like YAML values, and problems name the variable."""
    write_config(tmp_path, "tick: 200ms\n")
    environ = {"ECRON_TICK": "10", "ECRON_LOG_LEVEL": "loud", "ECRON_LISTEN": "nowhere"}

    assert problems_of(tmp_path, environ) == [
        "environment variable ECRON_LISTEN: field 'listen': 'nowhere' is not HOST:PORT.",
        "environment variable ECRON_TICK: field 'tick': '10' is not a duration: write a number "
        "and a unit (ms, s, m, h, d), like 30s or 1h30m.",
        "environment variable ECRON_LOG_LEVEL: field 'log.level': 'loud' is not allowed: "
        "use 'debug', 'info', 'warning' or 'error'.",
    ]


# --- database path -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("database", "expected"),
    [
        ("sqlite+aiosqlite:///ecron.db", "sqlite+aiosqlite:///{root}/ecron.db"),
        ("sqlite+aiosqlite:///data/ecron.db?timeout=5", "sqlite+aiosqlite:///{root}/data/ecron.db?timeout=5"),
        ("sqlite+aiosqlite:////var/lib/ecron.db", "sqlite+aiosqlite:////var/lib/ecron.db"),
        ("'sqlite+aiosqlite:///:memory:'", "sqlite+aiosqlite:///:memory:"),
        ("postgresql+asyncpg://u:p@h/db", "postgresql+asyncpg://u:p@h/db"),
    ],
)  # fmt: skip
def test_a_relative_sqlite_path_is_relative_to_the_config_directory(
    tmp_path: Path, database: str, expected: str
) -> None:
    """Relative SQLite files become absolute under DIR; absolute, in-memory and others stay."""
    write_config(tmp_path, f"database: {database}\n")

    daemon = load_config(tmp_path, {}).daemon

    assert daemon.database == expected.format(root=tmp_path.resolve())


# --- durations ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("500ms", timedelta(milliseconds=500)),
        ("30s", timedelta(seconds=30)),
        ("10m", timedelta(minutes=10)),
        ("2h", timedelta(hours=2)),
        ("1d", timedelta(days=1)),
        ("1h30m", timedelta(hours=1, minutes=30)),
    ],
)
def test_durations_are_read_with_their_unit(tmp_path: Path, text: str, expected: timedelta) -> None:
    """``500ms``, ``30s``, ``10m``, ``2h``, ``1d`` and combinations like ``1h30m`` are durations."""
    assert parse_duration(text) == expected
    write_config(
        tmp_path,
        a=one_task(f"{{name: t, schedule: manual, url: 'http://s', task_timeout: {text}}}"),
    )

    assert load_config(tmp_path, {}).tasks["t"].task_timeout == expected


@pytest.mark.parametrize("text", ["10", "5 minutes"])
def test_a_duration_without_a_known_unit_is_refused(tmp_path: Path, text: str) -> None:
    """A bare number or a spelled-out unit is not a duration, and the field is named."""
    write_config(
        tmp_path,
        a=one_task(f"{{name: t, schedule: manual, url: 'http://s', task_timeout: '{text}'}}"),
    )

    (problem,) = problems_of(tmp_path)

    assert problem.startswith(
        f"tasks/a.yaml: task 't': field 'task_timeout': '{text}' is not a duration"
    )


# --- shape of the files ------------------------------------------------------------------------


def test_a_misspelt_key_is_reported_with_a_suggestion(tmp_path: Path) -> None:
    """Unknown keys are errors (a typo must not be silently ignored), at any depth."""
    write_config(
        tmp_path,
        "tick: 200ms\nlease_tll: 15s\n",
        a=one_task("""\
            name: t
            shedule: manual
            url: http://s
            trigger_retry: {backof: 1s}
        """),
    )

    assert problems_of(tmp_path) == [
        "ecron.yaml: field 'lease_tll': is not a known key; did you mean 'lease_ttl'?",
        "tasks/a.yaml: task 't': field 'schedule': is required but not set.",
        "tasks/a.yaml: task 't': field 'trigger_retry.backof': is not a known key; "
        "did you mean 'backoff'?",
        "tasks/a.yaml: task 't': field 'shedule': is not a known key; did you mean 'schedule'?",
    ]


def test_a_task_name_used_twice_is_reported_naming_both_files(tmp_path: Path) -> None:
    """Task names are unique across all files; the second use names the first file."""
    write_config(
        tmp_path,
        a=one_task("{name: nightly, schedule: manual, url: 'http://s/a'}"),
        b=one_task("{name: nightly, schedule: manual, url: 'http://s/b'}"),
    )

    assert problems_of(tmp_path) == [
        "tasks/b.yaml: task 'nightly': field 'name': the name 'nightly' is already used by a task "
        "in tasks/a.yaml; task names must be unique across all files."
    ]


def test_a_yaml_syntax_error_names_the_file_and_line(tmp_path: Path) -> None:
    """A file that is not YAML is one problem with its line; other files are still checked."""
    write_config(
        tmp_path,
        a="tasks:\n  - name: t\n    schedule: [manual\n    url: http://s\n",
        b=one_task("{name: u, schedule: manual, url: 'ftp://s'}"),
    )

    problems = problems_of(tmp_path)

    assert len(problems) == 2
    assert re.fullmatch(
        r"tasks/a\.yaml: line \d+, column \d+: the YAML cannot be read: .+\.", problems[0]
    )
    assert problems[1] == "tasks/b.yaml: task 'u': field 'url': 'ftp://s' is not an http(s) URL."


def test_a_key_written_twice_in_one_mapping_is_reported(tmp_path: Path) -> None:
    """YAML would silently keep the last of two equal keys; ecron reports it with its line."""
    write_config(tmp_path, a="tasks:\n  - name: t\n    url: http://a\n    url: http://b\n")

    assert problems_of(tmp_path) == [
        "tasks/a.yaml: line 4, column 5: the YAML cannot be read: "
        "the key 'url' appears twice in one mapping."
    ]


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("- name: t\n", "it is a list"),
        ("task: []\n", "it has no 'tasks' key"),
        ("tasks: {name: t}\n", "'tasks' is a mapping"),
        ("", "it is empty"),
    ],
)
def test_a_tasks_file_must_be_a_mapping_with_a_tasks_list(
    tmp_path: Path, text: str, problem: str
) -> None:
    """Anything but a mapping with a list under ``tasks`` is reported, saying what it is."""
    write_config(tmp_path, a=text)

    assert problems_of(tmp_path) == [
        f"tasks/a.yaml: must be a mapping with a list of tasks under 'tasks', but {problem}."
    ]


def test_a_task_without_a_name_is_named_by_its_position(tmp_path: Path) -> None:
    """A task that has no name is called ``tasks[N]``, counting from 1."""
    write_config(
        tmp_path,
        a="tasks:\n  - {name: ok, schedule: manual, url: 'http://s'}\n  - {schedule: manual, url: 'http://s'}\n",
    )

    assert problems_of(tmp_path) == [
        "tasks/a.yaml: tasks[2]: field 'name': is required but not set."
    ]


def test_a_task_with_both_url_and_steps_is_reported_on_those_fields(tmp_path: Path) -> None:
    """Model-level checks name the fields they are about (``url/steps``)."""
    write_config(
        tmp_path,
        a=one_task(
            "{name: t, schedule: manual, url: 'http://s', steps: [{name: a, url: 'http://s'}]}"
        ),
    )

    assert problems_of(tmp_path) == [
        "tasks/a.yaml: task 't': field 'url/steps': a task has exactly one of 'url' and 'steps'."
    ]


# --- steps -------------------------------------------------------------------------------------


def test_steps_inherit_every_call_key_they_do_not_set(tmp_path: Path) -> None:
    """A step's call settings are the task's, overridden by what the step sets itself."""
    write_config(
        tmp_path,
        a=one_task("""\
            name: etl
            schedule: manual
            headers: {Authorization: Bearer t}
            poll_interval: 30s
            mode: callback
            trigger_retry: {attempts: 5}
            steps:
              - {name: fetch, url: "https://etl.internal/fetch"}
              - {name: load, url: "https://etl.internal/load", poll_interval: 1m, headers: {}}
        """),
    )

    task = load_config(tmp_path, {}).tasks["etl"]
    fetch, load = task.call(1), task.call(2)

    assert isinstance(task, TaskSpec)
    assert all(isinstance(step, StepSpec) for step in task.steps or [])
    assert (fetch.url, fetch.headers, fetch.poll_interval) == (
        "https://etl.internal/fetch",
        {"Authorization": "Bearer t"},
        timedelta(seconds=30),
    )
    assert (load.url, load.headers, load.poll_interval) == (
        "https://etl.internal/load",
        {},
        timedelta(minutes=1),
    )
    assert fetch.mode == load.mode == "callback"
    assert fetch.trigger_retry.attempts == load.trigger_retry.attempts == 5
    assert load.task_timeout == task.task_timeout == timedelta(hours=2)


# --- documentation -----------------------------------------------------------------------------


def documented_keys(model: type[BaseModel]) -> set[str]:
    """The keys of ``model`` as the guide writes them: ``key``, or ``key.sub`` for nested
    settings (of the daemon also optional ones, as the environment names them)."""
    keys = set()
    for name, field in model.model_fields.items():
        inner = field.annotation
        if model is DaemonSettings:
            inner = settings_model(inner)
        if isinstance(inner, type) and issubclass(inner, BaseModel):
            keys |= {f"{name}.{sub}" for sub in inner.model_fields}
        else:
            keys.add(name)
    return keys


def test_the_configuration_guide_names_every_key_and_environment_variable() -> None:
    """docs/configuration.md documents each daemon, task and step key, and each ``ECRON_`` name."""
    guide = (REPO / "docs" / "configuration.md").read_text()
    keys = documented_keys(DaemonSettings) | documented_keys(TaskSpec) | set(StepSpec.model_fields)
    variables = {
        "ECRON_" + key.replace(".", "_").upper() for key in documented_keys(DaemonSettings)
    }
    variables |= {"ECRON_DATABASE_URL"}

    assert {key for key in keys if f"`{key}`" not in guide} == set()
    assert {name for name in variables if name not in guide} == set()
