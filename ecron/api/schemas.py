"""The shapes of what the API answers and reads, as pydantic models: the OpenAPI document
(``openapi.py``) takes its schemas from them, and the tests check real answers against
those schemas. The handlers build their answers themselves (``ecron.snapshots``); every
model here forbids fields it does not name, so an answer that grows a field fails the
tests until the field is described here too."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, RootModel, WithJsonSchema

from ecron.core import Reason, Status, TriggerKind

#: A moment as every answer writes it: RFC 3339 in UTC, three decimals of a second, ``Z``.
Time = Annotated[
    datetime,
    WithJsonSchema(
        {
            "type": "string",
            "format": "date-time",
            "pattern": r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$",
            "examples": ["2026-11-29T13:07:00.123Z"],
        }
    ),
]
#: 0 to 100.
Progress = Annotated[float, Field(ge=0, le=100)]


class Answer(BaseModel):
    """A JSON object with exactly these fields."""

    model_config = ConfigDict(extra="forbid")


class ErrorAnswer(Answer):
    """Every error under /api/v1. Branch on the status code: ``error`` is written for
    people and may change between versions."""

    error: str = Field(description="what went wrong, in words")
    detail: Any = Field(
        description="more about it: null, a text, a number, a list, or any JSON value"
    )


class StepSnapshot(Answer):
    """One step of a multi-step execution."""

    number: int = Field(ge=1, description="1 for the first step")
    name: str
    status: Status = Field(description="PENDING until the step ends, then as an execution's")
    reason: Reason | None
    progress: Progress
    message: str | None
    remote_id: str = Field(description="the id its user service was given: <execution id>.<n>")
    started_at: Time | None
    finished_at: Time | None


class ExecutionSnapshot(Answer):
    """Everything about one execution (docs/api.md, "The execution snapshot")."""

    id: str = Field(description="the execution id, a UUIDv7 text")
    task: str
    status: Status
    reason: Reason | None = Field(description="why it ended FAILED or SKIPPED, else null")
    progress: Progress
    message: str | None
    result: Any = Field(description="the result of the SUCCESS report, any JSON, or null")
    result_truncated: bool
    trigger_kind: TriggerKind
    attempt: int = Field(ge=1)
    scheduled_at: Time = Field(description="the fire time (for a manual run, when asked)")
    created_at: Time
    triggered_at: Time | None
    last_report_at: Time | None
    progress_at: Time | None = Field(
        description="when a report last changed its progress; null while none has"
    )
    stalled: bool = Field(
        description="true while RUNNING with its progress unmoved for its task's "
        "expect.progress_within (since progress_at, else triggered_at); else false"
    )
    finished_at: Time | None
    deadline: Time | None
    resume_of: str | None = Field(description="the id of the execution this one resumes")
    resume_attempt: int = Field(ge=0)
    resumed_by: str | None = Field(description="the id of the execution that resumed this one")
    cancel_acknowledged: bool | None = Field(
        description="null: no cancel call was sent; else whether the user service took it"
    )
    probe_failures: int = Field(ge=0)
    owner: str | None = Field(description="the node that holds, or last held, it")
    eta: Time | None = Field(
        description="estimated end while RUNNING (from the progress rate so far or, before "
        "any progress, from the task's recent successful durations); else null",
    )
    upstream: str | None = Field(
        description="for a chained task, the upstream execution that set it off; else null"
    )
    downstream: list[str] = Field(
        description="the executions of chained tasks that this one's end set off, oldest "
        "first; [] when none"
    )
    steps: list[StepSnapshot] = Field(description="the steps, in order; [] for a one-call task")


class TaskSnapshot(Answer):
    """A task's definition, as the database holds it (no URLs, headers, bodies or secrets),
    and where it stands."""

    name: str
    schedule: str | dict[str, Any] = Field(description="the schedule as written in the task file")
    schedule_text: str = Field(description="the schedule in words")
    timezone: str
    enabled: bool
    paused: bool
    paused_reason: str | None
    retired: bool
    next_fire_at: Time | None
    consecutive_failures: int = Field(ge=0)
    concurrency: Literal["allow", "forbid", "replace"]
    mode: Literal["poll", "callback", "queue"]
    idempotent: bool
    steps: list[str] = Field(description="the names of the steps; [] for a one-call task")
    last_execution: ExecutionSnapshot | None


class TaskList(Answer):
    """Every task that is not retired, by name (not paginated)."""

    items: list[TaskSnapshot]


class Pool(Answer):
    """A pool that tasks share: its limits, and where it stands on every node."""

    name: str
    max_running: int | None = Field(description="at most this many PENDING or RUNNING at once")
    max_per_second: float | None = Field(description="at most this many triggers a second")
    running: int = Field(ge=0, description="executions of its tasks PENDING or RUNNING")
    waiting: int = Field(ge=0, description="runs waiting for its room, its pace or Retry-After")
    paused_until: Time | None = Field(
        description="no trigger of the pool before this (a service's Retry-After)"
    )
    tasks: list[str] = Field(description="the tasks in the pool, by name")


class PoolList(Answer):
    """Every pool the config defines, by name."""

    items: list[Pool]


class DstChange(Answer):
    """A fire time that daylight saving time changed, by the task's `dst` policy."""

    at: Time | None = Field(
        description="when it fires (one of `items`); null when the policy skips it that day"
    )
    wall: str = Field(
        description="the local wall time of the schedule it stands for, without offset",
        examples=["2027-03-28T02:30:00"],
    )
    change: Literal["shifted", "jumped", "repeated", "skipped"] = Field(
        description="its wall time was skipped by the clock, and it fires shifted by the gap "
        "(`shifted`), at the moment of the jump (`jumped`), or not that day (`skipped`); or "
        "its wall time happens twice and it fires at the occurrence the policy says "
        "(`repeated`: one entry per fire)"
    )


class Upcoming(Answer):
    """The next fire times of a task that will run, its calendar and blackouts applied."""

    task: str
    paused: bool = Field(
        description="while true, none of them runs: they are the ones it would have if unpaused now"
    )
    from_: Time = Field(
        alias="from", description="where the list starts: the `from` asked for, or now"
    )
    items: list[Time] = Field(
        description="oldest first; [] for a manual, chained or disabled task, or a schedule "
        "with no fire time left; one for an `after` schedule (the next depend on ends)"
    )
    dst: list[DstChange] = Field(
        description="the fire times of `items` that daylight saving time changed, and the "
        "wall times it skipped up to the last of them, oldest first; only fixed-time cron "
        "jobs (second, minute and hour fixed) have any"
    )


class BackfillAnswer(Answer):
    """What a backfill found in its period, and what it created (docs/api.md, backfill)."""

    task: str
    from_: Time = Field(alias="from", description="the start of the period (included)")
    to: Time = Field(description="the end of the period (left out)")
    fire_times: list[Time] = Field(
        description="every fire time of the period that its schedule, time zone, calendar "
        "and blackouts give, oldest first, those that already have an execution included"
    )
    count: int = Field(ge=0, le=10_000, description="how many fire times: the length of fire_times")
    already_run: int = Field(
        ge=0,
        description="how many of them already had an execution (run, skipped or backfilled "
        "before): none of those runs again",
    )
    executions: list[str] = Field(
        description="the ids of the executions created, oldest fire time first; [] on a dry run"
    )


class ExecutionPage(Answer):
    """One page of the history, newest first."""

    items: list[ExecutionSnapshot]
    next: str | None = Field(description="pass it as `before` for the next page; null: last page")


class StepList(Answer):
    """The steps of one execution."""

    items: list[StepSnapshot]


class ExecutionConflict(Answer):
    """A 409 that carries the execution as it now stands."""

    error: str
    detail: ExecutionSnapshot


class Candidate(Answer):
    """One execution an ambiguous id prefix could name."""

    id: str
    task: str
    status: Status
    created_at: Time | None


class AmbiguousId(Answer):
    """A 409: the id given is the start of several execution ids (at most 10 listed)."""

    error: str
    detail: list[Candidate]


class ShortId(Answer):
    """An execution id and the shortest prefix of it that names it alone."""

    id: str
    prefix: str = Field(description="8 characters at least, never ending on a dash")


class ShortIdList(Answer):
    """The ids asked about that are executions', in the order asked."""

    items: list[ShortId]


class RaceConflict(Answer):
    """A 409 about what happened while the request was under way: the execution ended, or
    another stop of it was already under way (no snapshot: it was changing)."""

    error: str
    detail: None


class CancelConflict(RootModel[ExecutionConflict | AmbiguousId | RaceConflict]):
    """A 409 of a cancel: it has already ended (``detail`` is its snapshot), the id given
    is the start of several execution ids (``detail`` lists them), or it ended, or another
    stop of it was under way, while the cancel was asked (``detail`` is null)."""


class Alive(Answer):
    """The process serves HTTP."""

    status: Literal["ok"]
    node: str


class Load(Answer):
    """How loaded the node is; it never makes the node unready."""

    saturated: bool = Field(
        description="true while due polls wait over a second for a worker: the node is past "
        "its polling ceiling, polls stretch evenly across executions, the API still answers"
    )
    poll_delay_seconds: float = Field(description="how long the oldest due poll has waited")
    polls_waiting: int = Field(description="due poll jobs waiting for a worker")
    poll_pace: int = Field(
        description="how many polls may be out at once (fewer while people ask the API of a "
        "busy node, so that it keeps answering)"
    )


class Ready(Load):
    """The database answers and the scheduler loop went round recently."""

    status: Literal["ready"]
    node: str


class Unready(Load):
    """One text per failed check."""

    status: Literal["unready"]
    problems: list[str]


class PauseRequest(BaseModel):
    """The optional body of pause."""

    reason: str | None = Field(
        default=None,
        description="shown as paused_reason (cut to 1,000 characters); when missing or "
        'empty, "paused through the API"',
    )


#: A time a request gives: RFC 3339 with its offset (``Z``, or ``+02:00``).
RequestTime = Annotated[
    str,
    WithJsonSchema({"type": "string", "format": "date-time", "examples": ["2026-11-01T00:00:00Z"]}),
]


class BackfillRequest(BaseModel):
    """The body of backfill: the period ``[from, to)``, and whether only to list it."""

    model_config = ConfigDict(extra="forbid")

    from_: RequestTime = Field(
        alias="from", description="the start of the period, included; with its UTC offset"
    )
    to: RequestTime = Field(
        description="the end of the period, left out; with its UTC offset; not in the future"
    )
    dry_run: bool = Field(
        default=False, description="true: only list the fire times (200); nothing is created"
    )


class ReportRequest(BaseModel):
    """A report (PROTOCOL.md, "Reports"): what the user service says about the execution."""

    status: Literal["RUNNING", "SUCCESS", "FAILED"] = Field(
        description="matched without regard to case; UNKNOWN is refused here"
    )
    progress: float | None = Field(
        default=None,
        description="0..100; outside it, clamped; not a number, ignored (the report counts)",
    )
    message: str | None = Field(default=None, description="stored cut to 1,000 characters")
    result: Any = Field(default=None, description="any JSON, stored with a SUCCESS")
    interrupted: bool | None = Field(
        default=None, description="true with FAILED: the work stopped for an outside cause"
    )


class AuditEntry(Answer):
    """Who did what: one request that changed something or was refused, or one change of
    the task set at load or reload (actor `config`)."""

    id: int = Field(description="the entry's number; newer entries have larger ones")
    at: Time
    actor: str = Field(
        description="the caller's name; `anonymous` (no token configured), `unknown` (a "
        "missing or unknown token) or `config`"
    )
    action: str = Field(
        description="`run`, `backfill`, `cancel`, `resume`, `pause`, `unpause`, `read` (a "
        "refused read); for `config`: `add`, `change`, `retire`"
    )
    target: str = Field(description="the task or execution acted on, or the path refused")
    task: str | None = Field(description="the task concerned, where known")
    status: int | None = Field(
        description="the HTTP status answered (`429`: an address past its bad tokens); null "
        "for `config`"
    )
    remote: str | None = Field(description="the caller's address")
    count: int = Field(
        description="how many requests the entry stands for: refusals of one address, actor "
        "and status within a minute are counted into few entries; 1 for any other"
    )
    detail: Any = Field(
        description="for a `config` change: `{fields: [{field, old, new}]}`; a backfill: "
        "`{from, to, dry_run}`; a refusal: `{count}`, and for those counted after the first "
        "`{count, from, to, targets}` (up to 5 targets refused); else null"
    )


class AuditPage(Answer):
    """One page of the audit log, newest first."""

    items: list[AuditEntry]
    next: str | None = Field(description="pass it as `before` for the next page; null: last page")


class CallerAnswer(Answer):
    """Who the token presented names, and what its role allows."""

    name: str = Field(description="the caller's name; `anonymous` when no token is configured")
    role: Literal["viewer", "operator", "admin"]
    token_required: bool = Field(description="whether this daemon asks for a token")


class AboutAnswer(Answer):
    """The daemon: its version, this node, and where people see times without a task."""

    version: str = Field(description="ecron's version")
    node: str = Field(description="the id of the node that answered")
    timezone: str = Field(
        description="the daemon's `timezone`: the IANA zone in which the CLI and the "
        "dashboard show times that belong to no task (a task's own are shown in its zone)"
    )


#: Every model the document names, in the order it lists them.
MODELS: tuple[type[BaseModel], ...] = (
    ErrorAnswer,
    ExecutionConflict,
    Candidate,
    AmbiguousId,
    ShortId,
    ShortIdList,
    RaceConflict,
    CancelConflict,
    StepSnapshot,
    ExecutionSnapshot,
    TaskSnapshot,
    TaskList,
    Pool,
    PoolList,
    DstChange,
    Upcoming,
    BackfillAnswer,
    ExecutionPage,
    StepList,
    AuditEntry,
    AuditPage,
    CallerAnswer,
    AboutAnswer,
    Alive,
    Ready,
    Unready,
    PauseRequest,
    BackfillRequest,
    ReportRequest,
)
