"""Typed, validated settings: the daemon (``ecron.yaml``) and its tasks (``tasks/*.yaml``).

Key names are the public contract (DESIGN.md, "Configuration"): add keys
freely, rename none. Defaults are documented in ``docs/configuration.md``.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from functools import cached_property
from typing import Any, Literal, get_args

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationInfo,
    field_validator,
    model_validator,
)
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from ecron.calendars import FireTimes
from ecron.config.callers import (
    ApiCaller,
    check_callers,
    check_listen,
    check_optional_token,
    parse_callers,
)
from ecron.config.checks import check_positive, check_url, known_zone
from ecron.config.digests import spec_digest
from ecron.config.dst import DstSettings, dst_policy
from ecron.config.headers import Headers
from ecron.config.queue import QueueSettings
from ecron.config.rules import (
    Blackout,
    CalendarSpec,
    Expect,
    PoolSpec,
    check_blackouts,
    exclusions,
)
from ecron.config.secrets import without_password
from ecron.durations import Duration
from ecron.errors import ScheduleError
from ecron.schedules import Schedule, on_key, parse_schedule

TASK_NAME = re.compile(r"[a-z0-9][a-z0-9_.-]*")
#: Keys a step may set for itself; every other one it inherits from its task.
CALL_KEYS = (
    "url",
    "headers",
    "body",
    "poll_url",
    "batch_poll_url",
    "cancel_url",
    "request_timeout",
    "task_timeout",
    "poll_interval",
    "max_probe_failures",
    "mode",
    "heartbeat_timeout",
    "secret",
    "trigger_retry",
)


#: How reports reach ecron: polled (callbacks also accepted), or only pushed, by callback
#: or through the queue (PROTOCOL.md).
Mode = Literal["poll", "callback", "queue"]

_POSITIVE_CALL_DURATIONS = ("request_timeout", "task_timeout", "poll_interval", "heartbeat_timeout")


class _Strict(BaseModel):
    """Unknown keys are errors: a typo must not be silently ignored."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class TriggerRetry(_Strict):
    """How the trigger POST of one execution is retried (same execution id)."""

    attempts: int = Field(default=3, ge=1, le=100)
    backoff: Duration = timedelta(seconds=1)
    max_backoff: Duration = timedelta(seconds=30)


class RetryPolicy(_Strict):
    """New executions (``attempt + 1``) after a FAILED one."""

    max_attempts: int = Field(default=0, ge=0, le=100)
    backoff: Duration = timedelta(seconds=30)
    max_backoff: Duration = timedelta(minutes=10)


class Misfire(_Strict):
    """What happens to fire times found more than ``grace`` late."""

    policy: Literal["skip", "run_once", "run_all"] = "run_once"
    grace: Duration = timedelta(minutes=5)


class ResumePolicy(_Strict):
    """Automatic resume of interrupted executions (only for idempotent tasks)."""

    auto: bool = False
    max_attempts: int = Field(default=3, ge=0, le=100)
    within: Duration = timedelta(minutes=30)


#: The events an alert webhook can be sent for.
AlertEvent = Literal[
    "execution_failed",
    "execution_timed_out",
    "task_paused",
    "resume_chain_exhausted",
    "task_overdue",
    "fire_skipped",
    "execution_stalled",
]
ALERT_EVENTS: tuple[AlertEvent, ...] = get_args(AlertEvent)


class Webhook(_Strict):
    """One alert receiver: a JSON POST per event, signed when ``secret`` is set."""

    url: str
    events: list[AlertEvent] = Field(default_factory=lambda: list(ALERT_EVENTS))
    secret: str | None = None
    headers: Headers = Field(default_factory=dict)
    timeout: Duration = timedelta(seconds=10)

    _url = field_validator("url")(check_url)


class NotifySettings(_Strict):
    """Alerts: webhooks, and how a failed delivery is retried."""

    webhooks: list[Webhook] = Field(default_factory=list)
    retry: TriggerRetry = Field(
        default_factory=lambda: TriggerRetry(
            attempts=5, backoff=timedelta(seconds=1), max_backoff=timedelta(minutes=1)
        )
    )


class CallSettings(_Strict):
    """Everything one HTTP call under the protocol needs: a task's, or a step's merged with it."""

    url: str
    headers: Headers = Field(default_factory=dict)
    body: Any = None
    poll_url: str | None = None
    #: One GET ``?ids=a,b,c`` polls many executions (PROTOCOL.md, "Batch polls").
    batch_poll_url: str | None = None
    cancel_url: str | None = None
    request_timeout: Duration = timedelta(seconds=10)
    task_timeout: Duration = timedelta(hours=2)
    poll_interval: Duration = timedelta(seconds=5)
    max_probe_failures: int = Field(default=5, ge=1, le=1000)
    mode: Mode = "poll"
    heartbeat_timeout: Duration = timedelta(minutes=5)
    secret: str | None = None
    trigger_retry: TriggerRetry = Field(default_factory=TriggerRetry)

    _url = field_validator("url", "batch_poll_url")(check_url)
    _durations = field_validator(*_POSITIVE_CALL_DURATIONS)(check_positive)

    @property
    def pushed(self) -> bool:
        """True when reports are only pushed (``mode: callback`` or ``mode: queue``): never
        polled, and silent past ``heartbeat_timeout`` means unreachable."""
        return self.mode != "poll"


class StepSpec(_Strict):
    """One step of a multi-step task; unset call keys come from the task."""

    name: str
    url: str | None = None
    headers: Headers | None = None
    body: Any = None
    poll_url: str | None = None
    batch_poll_url: str | None = None
    cancel_url: str | None = None
    request_timeout: Duration | None = None
    task_timeout: Duration | None = None
    poll_interval: Duration | None = None
    max_probe_failures: int | None = Field(default=None, ge=1, le=1000)
    mode: Mode | None = None
    heartbeat_timeout: Duration | None = None
    secret: str | None = None
    trigger_retry: TriggerRetry | None = None

    _url = field_validator("url", "batch_poll_url")(check_url)
    _durations = field_validator(*_POSITIVE_CALL_DURATIONS)(check_positive)


class TaskSpec(_Strict):
    """One task as declared in ``tasks/*.yaml``."""

    name: str
    timezone: str = "UTC"
    schedule: str | dict[str, Any]
    url: str | None = None
    headers: Headers = Field(default_factory=dict)
    body: Any = None
    poll_url: str | None = None
    batch_poll_url: str | None = None
    cancel_url: str | None = None
    request_timeout: Duration = timedelta(seconds=10)
    task_timeout: Duration = timedelta(hours=2)
    poll_interval: Duration = timedelta(seconds=5)
    max_probe_failures: int = Field(default=5, ge=1, le=1000)
    mode: Mode = "poll"
    heartbeat_timeout: Duration = timedelta(minutes=5)
    secret: str | None = None
    trigger_retry: TriggerRetry = Field(default_factory=TriggerRetry)
    retry: RetryPolicy = Field(default_factory=RetryPolicy)
    concurrency: Literal["allow", "forbid", "replace"] = "forbid"
    misfire: Misfire = Field(default_factory=Misfire)
    idempotent: bool = False
    resume: ResumePolicy = Field(default_factory=ResumePolicy)
    pause_after_failures: int = Field(default=0, ge=0)
    jitter: Duration = timedelta(0)
    enabled: bool = True
    steps: list[StepSpec] | None = None
    #: Alerts for this task, sent besides the daemon's.
    notify: NotifySettings | None = None
    #: The days fire times may fall on: inline, or (resolved by the loader) a named one.
    calendar: CalendarSpec | str | None = None
    #: The pool whose limits it shares with the other tasks that call the same service
    #: (``pool: NAME`` in the file, resolved by the loader to the pool named so).
    pool: PoolSpec | None = None
    #: Windows in which no fire time runs.
    blackout: list[Blackout] = Field(default_factory=list)
    #: ``{success_within: 26h}``: alert ``task_overdue`` when no SUCCESS for that long;
    #: ``{progress_within: 30m}``: alert ``execution_stalled`` when a RUNNING execution's
    #: progress has not moved for that long.
    expect: Expect | None = None
    #: A fixed-time cron job across daylight saving time changes (``gap``, ``fold``); None
    #: (not written) is the default policy, as is its absence from a spec stored before the
    #: key existed (so an upgrade restarts no schedule: ``store.changes.SCHEDULING``).
    dst: DstSettings | None = None

    _url = field_validator("url", "batch_poll_url")(check_url)
    _durations = field_validator(*_POSITIVE_CALL_DURATIONS)(check_positive)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not TASK_NAME.fullmatch(value) or len(value) > 200:
            raise ValueError(
                f"{value!r} is not a task name: use lower-case letters, digits, '_', '.', '-', "
                "starting with a letter or digit"
            )
        return value

    _zone = field_validator("timezone")(known_zone)

    @field_validator("calendar")
    @classmethod
    def _calendar(cls, value: CalendarSpec | str | None) -> CalendarSpec | None:
        if isinstance(value, str):
            raise ValueError(
                f"no calendar named {value!r} is defined: define it under 'calendars' "
                "(in ecron.yaml or a tasks file), or write the calendar here"
            )
        return value

    @field_validator("schedule", mode="before")
    @classmethod
    def _schedule(cls, value: Any, info: ValidationInfo) -> str | dict[str, Any]:
        # "before": a value of the wrong type gets parse_schedule's one clear message
        if isinstance(value, dict):
            value = on_key(value)
        try:
            parse_schedule(value, info.data.get("timezone", "UTC"))
        except ScheduleError as exc:
            raise ValueError(str(exc)) from None
        if isinstance(value, dict):  # keep YAML timestamps as text in the stored spec
            return {
                key: v.isoformat() if isinstance(v, datetime) else v for key, v in value.items()
            }
        return str(value)  # parse_schedule accepts only a str or a dict

    @model_validator(mode="after")
    def _check(self) -> TaskSpec:
        if (self.url is None) == (self.steps is None):
            raise ValueError("url/steps: a task has exactly one of 'url' and 'steps'")
        if self.steps is not None:
            if not self.steps:
                raise ValueError("steps: a multi-step task needs at least one step")
            for number, _ in enumerate(self.steps, start=1):
                self.call(number)  # every step must resolve to a complete call
        check_blackouts(self.blackout, self.timezone)
        # A one-call task's settings are its own fields, validated already: they are put
        # together when first asked for.
        return self

    @cached_property
    def dumped(self) -> dict[str, Any]:
        """The whole spec as JSON values (secrets included): do not change it."""
        return self.model_dump(mode="json")

    #: The key of ``digest`` (``keyed``); none until the daemon knows its secret.
    _digest_key: bytes = PrivateAttr(default=b"")

    def keyed(self, key: bytes) -> TaskSpec:
        """This spec, its ``digest`` keyed with ``key`` (``digest_key``) from now on."""
        self._digest_key = key
        self.__dict__.pop("digest", None)
        return self

    @cached_property
    def digest(self) -> str:
        """The whole spec's digest (secrets included, keyed): its task row keeps it, to see a
        change."""
        return spec_digest(self.dumped, self._digest_key)

    def digest_of(self, dumped: dict[str, Any]) -> str:
        """The digest of another spec as JSON values, with this one's key."""
        return spec_digest(dumped, self._digest_key)

    @cached_property
    def plain_digest(self) -> str:
        """The digest a task row kept before digests were keyed (a plain SHA-256): a row
        that has it holds this spec, and a sync rewrites it keyed."""
        return spec_digest(self.dumped)

    @cached_property
    def fire_schedule(self) -> Schedule:
        """The parsed ``schedule``."""
        return parse_schedule(self.schedule, self.timezone, dst_policy(self.dst))

    @cached_property
    def fire_times(self) -> FireTimes:
        """The fire times that run: the schedule's, with the calendar and blackouts applied."""
        calendar = self.calendar if isinstance(self.calendar, CalendarSpec) else None
        return FireTimes(self.fire_schedule, exclusions(calendar, self.blackout, self.timezone))

    @cached_property
    def step_names(self) -> tuple[str, ...]:
        """Names of the steps, in order; empty for a one-call task."""
        return tuple(step.name for step in self.steps or [])

    @cached_property
    def call_settings(self) -> dict[int | None, CallSettings]:
        """Every call's settings (the task's, or each step's), worked out once: the
        executor asks on every poll."""
        numbers: list[int | None] = list(range(1, len(self.steps) + 1)) if self.steps else [None]
        return {number: self._call(number) for number in numbers}

    def call(self, step: int | None) -> CallSettings:
        """The call settings of the task (``step`` None) or of its 1-based ``step``."""
        settings = self.call_settings
        return settings[step] if step in settings else self._call(step)

    def _call(self, step: int | None) -> CallSettings:
        inherited = {key: getattr(self, key) for key in CALL_KEYS}
        if step is not None:
            assert self.steps is not None
            own = self.steps[step - 1]
            # A key the step leaves unset (or sets to nothing) comes from the task.
            inherited.update(
                {key: getattr(own, key) for key in CALL_KEYS if getattr(own, key) is not None}
            )
        if inherited["url"] is None:
            raise ValueError(f"steps: step {step} has no url and the task sets none")
        # Every value was validated already, as a field of the task or of the step (by the
        # same validators): built without validating again, a task costs half as much.
        return CallSettings.model_construct(**inherited)


class LogSettings(_Strict):
    """Log output: ``json`` lines (default when not on a terminal) or ``console``."""

    format: Literal["json", "console"] | None = None
    level: Literal["debug", "info", "warning", "error"] = "info"


class DaemonSettings(_Strict):
    """The daemon itself (``ecron.yaml``; every key also as ``ECRON_<KEY>``)."""

    database: str = "sqlite+aiosqlite:///ecron.db"
    listen: str = "127.0.0.1:8080"
    public_url: str | None = None
    api_token: str | None = None
    #: Named callers with roles (``ECRON_API_TOKENS``: the same list as YAML or JSON).
    api_tokens: list[ApiCaller] = Field(default_factory=list)
    api_tokens_file: str | None = None  #: more ``api_tokens``, from a file (a mounted secret)
    allow_unauthenticated: bool = False  #: True: no token, yet reachable from other machines
    secret: str | None = None
    node_id: str = "auto"
    lease_ttl: Duration = timedelta(seconds=15)
    tick: Duration = timedelta(milliseconds=200)
    patrol_interval: Duration = timedelta(seconds=60)
    history_retention: Duration = timedelta(days=30)
    #: Where times without a task are shown to people (the audit log, pools, the front
    #: page's timeline): an IANA zone; a task's own times are shown in its ``timezone``.
    timezone: str = "UTC"
    log: LogSettings = Field(default_factory=LogSettings)
    #: How many calls (triggers and polls) may be in flight at once (the worker pool).
    poll_workers: int = Field(default=100, ge=1, le=10_000)
    #: How far ahead fire times are claimed, so triggers leave on time.
    prefetch: Duration = timedelta(seconds=2)
    #: An API connection with no whole request for this long (idle, or half sent) is closed.
    api_idle_timeout: Duration = timedelta(seconds=75)
    #: Missing or wrong API tokens one remote address may send within a minute; past them,
    #: it is answered 429 until that minute ends.
    bad_tokens_per_minute: int = Field(default=30, ge=1, le=1_000_000)
    #: New runs one backfill may create, and unfinished backfilled runs one task may have.
    backfill_max_runs: int = Field(default=1000, ge=1, le=1_000_000)
    #: Alerts (webhooks); set in ecron.yaml only, not from the environment.
    notify: NotifySettings = Field(default_factory=NotifySettings)
    #: The Redis Streams report channel; none when unset.
    queue: QueueSettings | None = None
    _idle = field_validator("api_idle_timeout")(check_positive)

    _timezone = field_validator("timezone")(known_zone)

    @field_validator("listen")
    @classmethod
    def _listen(cls, value: str) -> str:
        host, _, port = value.rpartition(":")
        if not host or not port.isdigit() or not 0 <= int(port) <= 65535:
            raise ValueError(f"{value!r} is not HOST:PORT")
        return value

    @field_validator("database")
    @classmethod
    def _database(cls, value: str) -> str:
        shown = without_password(value)  # a problem with the URL never quotes its password
        if not value.startswith(("sqlite+aiosqlite://", "postgresql+asyncpg://")):
            raise ValueError(
                f"{shown!r}: use sqlite+aiosqlite:///FILE or postgresql+asyncpg://USER:PW@HOST/DB"
            )
        try:
            port = make_url(value).port
        except (ArgumentError, ValueError) as exc:  # "host:x/db": the port is not a number
            raise ValueError(f"{shown!r} is not a database URL ({exc})") from None
        if port is not None and not 0 < port <= 65535:
            raise ValueError(f"{shown!r} is not a database URL (port {port} is not 1 to 65535)")
        return value

    _api_token = field_validator("api_token")(check_optional_token)
    _api_tokens = field_validator("api_tokens", mode="before")(parse_callers)

    @model_validator(mode="after")
    def _callers(self) -> DaemonSettings:
        check_listen(self.listen, self.callers, self.allow_unauthenticated)
        return self

    @cached_property
    def callers(self) -> list[ApiCaller]:
        """Every caller of the API, ``api_token`` as ``admin``; empty: no token asked."""
        return check_callers(self.api_token, self.api_tokens)

    @field_validator("lease_ttl", "tick", "patrol_interval", "history_retention")
    @classmethod
    def _positive(cls, value: timedelta) -> timedelta:
        if value <= timedelta(0):
            raise ValueError("must be longer than zero")
        return value

    @property
    def host_port(self) -> tuple[str, int]:
        """``listen`` split into host and port."""
        host, _, port = self.listen.rpartition(":")
        return host.strip("[]"), int(port)


class Config(BaseModel):
    """A whole config directory: the daemon settings and the tasks, in file order."""

    model_config = ConfigDict(frozen=True)

    directory: str
    daemon: DaemonSettings
    tasks: dict[str, TaskSpec]
    #: The named calendars (``calendars`` in ecron.yaml and the task files).
    calendars: dict[str, CalendarSpec] = Field(default_factory=dict)
    #: The named pools (``pools`` in ecron.yaml and the task files).
    pools: dict[str, PoolSpec] = Field(default_factory=dict)
