"""What loading a config changes in the task table, as one value: the tasks added, those
changed (field by field, old and new, as the database stores them), those retired, and
each one's next fire time before and after.

``task_set_change`` is the one home of that diff: the sync (``sync_tasks``) writes what it
says, the daemon logs it (``tasks_synced``), and ``ecron plan`` prints it without writing.
It is pure: no I/O and no clock (``firsts.now`` is the moment it is worked out for).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

from yarl import URL

from ecron.config.digests import spec_digest
from ecron.config.messages import join
from ecron.config.secrets import without_url_secrets

if TYPE_CHECKING:
    from ecron.config import TaskSpec

#: What the task row stores instead of a header value or a signing secret.
REDACTED = "***"
#: The keys whose change restarts a task's schedule at its first fire time from now.
SCHEDULING = ("schedule", "timezone", "enabled", "calendar", "blackout", "dst")
#: What a spec stored before a key existed means by its absence (no restart on upgrade,
#: and no change shown).
UNSET: dict[str, Any] = {"blackout": []}
#: The field named when a secret value changed but which one cannot be told.
SECRETS = "secrets"


class FirstFires(Protocol):
    """The fire-time math a sync needs, worked out outside the store
    (``planning.FirstFireTimes``): each task's first fire time from ``now``."""

    now: datetime

    def of(self, spec: TaskSpec) -> datetime | None:
        """The first fire time of ``spec`` at or after ``now``; None when it never fires."""
        ...


@dataclass(frozen=True, slots=True)
class StoredTask:
    """A task row as the diff reads it."""

    name: str
    #: The spec as stored (``spec_json``); None when it was not read, which only a row
    #: whose digest is the loaded spec's may leave out (it is not compared).
    spec: Mapping[str, Any] | None
    spec_hash: str
    retired: bool
    next_fire_at: datetime | None


@dataclass(frozen=True, slots=True)
class FieldChange:
    """One field of a task that changed: its dotted path (``retry.max_attempts``,
    ``steps[1].url``, list positions counting from 1), old and new values as JSON (a
    header value or secret as ``***``; None when absent)."""

    field: str
    old: Any
    new: Any


@dataclass(frozen=True, slots=True)
class TaskSetChange:
    """What loading a config changes in the task table."""

    #: Tasks that start to exist, by name; a retired task that comes back is added too
    #: (its schedule starts afresh), and named in ``revived`` as well.
    added: tuple[str, ...] = ()
    #: Tasks whose spec changed: the fields that changed, in spec order.
    changed: Mapping[str, tuple[FieldChange, ...]] = field(default_factory=dict)
    #: Tasks no longer in the config (their rows and history are kept).
    retired: tuple[str, ...] = ()
    revived: tuple[str, ...] = ()
    #: For every task above: its next fire time before and after.
    next_fire: Mapping[str, tuple[datetime | None, datetime | None]] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.added or self.changed or self.retired)

    def summary(self) -> str:
        """``2 to add, 1 to change, 1 to retire``."""
        counts = (len(self.added), len(self.changed), len(self.retired))
        return "{} to add, {} to change, {} to retire".format(*counts)

    def only(self, added: Iterable[str], retired: Iterable[str]) -> TaskSetChange:
        """The change with just these of its added and retired tasks (those a sync wrote:
        another node may have added or retired the others first)."""
        keep_added, keep_retired = set(added), set(retired)
        gone = (set(self.added) - keep_added) | (set(self.retired) - keep_retired)
        return replace(
            self,
            added=tuple(name for name in self.added if name in keep_added),
            retired=tuple(name for name in self.retired if name in keep_retired),
            revived=tuple(name for name in self.revived if name in keep_added),
            next_fire={k: v for k, v in self.next_fire.items() if k not in gone},
        )

    def as_json(self) -> dict[str, Any]:
        """The change as JSON (``ecron plan --json``, the ``tasks_synced`` log event)."""
        return {
            "add": list(self.added),
            "change": [
                {
                    "task": name,
                    "fields": [{"field": c.field, "old": c.old, "new": c.new} for c in changes],
                    "next_fire_before": rfc3339(self.next_fire[name][0]),
                    "next_fire_after": rfc3339(self.next_fire[name][1]),
                }
                for name, changes in self.changed.items()
            ],
            "retire": list(self.retired),
        }


def rfc3339(when: datetime | None) -> str | None:
    """``2026-03-02T03:00:00.000Z``, or None."""
    if when is None:
        return None
    return when.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def spec_json(spec: TaskSpec) -> dict[str, Any]:
    """The spec as stored: JSON, with header values and secrets redacted, and its own
    webhooks' URLs cut to their origin."""
    data = dict(spec.dumped)
    if data.get("steps"):
        data["steps"] = [dict(step) for step in data["steps"]]

    def redact(call: dict[str, Any]) -> None:
        if call.get("headers"):
            call["headers"] = dict.fromkeys(call["headers"], REDACTED)
        if call.get("secret"):
            call["secret"] = REDACTED

    redact(data)
    for step in data.get("steps") or []:
        redact(step)
    if data.get("notify"):
        notify = dict(data["notify"])
        notify["webhooks"] = [_hidden_hook(hook) for hook in notify.get("webhooks") or []]
        data["notify"] = notify
    return data


def _hidden_hook(hook: dict[str, Any]) -> dict[str, Any]:
    """A webhook as stored: its URL cut to the origin (a Slack-style path is the secret, a
    password or a query may be too), its secret and header values redacted."""
    hidden = dict(hook)
    hidden["url"] = f"{URL(hook['url']).origin()}/{REDACTED}"
    if hidden.get("secret"):
        hidden["secret"] = REDACTED
    if hidden.get("headers"):
        hidden["headers"] = dict.fromkeys(hidden["headers"], REDACTED)
    return hidden


def task_set_change(
    stored: Mapping[str, StoredTask], specs: Mapping[str, TaskSpec], firsts: FirstFires
) -> TaskSetChange:
    """What making the task table (``stored``, by name) follow ``specs`` at ``firsts.now``
    changes: added, changed field by field, retired, each with its next fire time before
    and after (``next_fire_after``). A row whose digest is the spec's and that is not
    retired is unchanged."""
    added: list[str] = []
    revived: list[str] = []
    changed: dict[str, tuple[FieldChange, ...]] = {}
    next_fire: dict[str, tuple[datetime | None, datetime | None]] = {}
    for name in sorted(specs):
        spec, row = specs[name], stored.get(name)
        if row is not None and same_spec(row.spec_hash, spec) and not row.retired:
            continue
        next_fire[name] = (
            (None if row is None else row.next_fire_at),
            next_fire_after(row, spec, firsts),
        )
        if row is None or row.retired:
            added.append(name)
            if row is not None:
                revived.append(name)
        else:
            changed[name] = tuple(spec_changes(row.spec or {}, spec, row.spec_hash))
    retired = sorted(name for name, row in stored.items() if name not in specs and not row.retired)
    for name in retired:
        next_fire[name] = (stored[name].next_fire_at, None)
    return TaskSetChange(tuple(added), changed, tuple(retired), tuple(revived), next_fire)


def same_spec(spec_hash: str, spec: TaskSpec) -> bool:
    """Whether a row of digest ``spec_hash`` holds ``spec``: its keyed digest, or the plain
    one of a row written before digests were keyed (the sync rewrites it, as no change)."""
    return spec_hash == spec.digest or spec_hash == spec.plain_digest


def next_fire_after(row: StoredTask | None, spec: TaskSpec, firsts: FirstFires) -> datetime | None:
    """The next fire time a sync gives task ``spec`` (stored as ``row``, None when new):
    none when disabled; the stored one when its schedule did not change (it goes on where
    it was); else its first fire time from ``firsts.now``."""
    if not spec.enabled:
        return None
    if row is not None and not row.retired and schedule_kept(row.spec or {}, spec):
        return row.next_fire_at
    return firsts.of(spec)


def schedule_kept(stored: Mapping[str, Any], spec: TaskSpec) -> bool:
    """Whether the stored spec (as stored: JSON) schedules as ``spec`` does."""
    return all(stored.get(key, UNSET.get(key)) == spec.dumped.get(key) for key in SCHEDULING)


def spec_changes(stored: Mapping[str, Any], spec: TaskSpec, digest: str) -> list[FieldChange]:
    """The fields of ``spec`` that differ from the stored spec (whose digest is ``digest``),
    both as stored: redacted. A secret value (a header's, a ``secret``) that changed is told
    by the digest: the stored spec with ``spec``'s secrets put back has ``digest`` only if
    they are the same; it is named when it is the spec's one secret, else ``secrets``."""
    found = field_changes({**UNSET, **stored}, spec_json(spec))
    hidden = list(_hidden(stored))
    if hidden != list(_hidden(spec_json(spec))):  # a header added or removed: shown above
        return found
    unredacted = copy.deepcopy(dict(stored))
    for keys in hidden:
        _put(unredacted, keys, _get(spec.dumped, keys))
    if digest in (spec.digest_of(unredacted), spec_digest(unredacted)):  # keyed, or older
        return found
    name = _path(hidden[0]) if len(hidden) == 1 else SECRETS
    return [*found, FieldChange(name, REDACTED, REDACTED)]


def field_changes(old: Any, new: Any, path: str = "") -> list[FieldChange]:
    """Where JSON value ``new`` differs from ``old``, leaf by leaf: mappings by key, lists
    (steps, blackouts) position by position; anything else (a value absent on one side
    among them) is one change at its path."""
    if isinstance(old, dict) and isinstance(new, dict):
        keys = [*old, *(key for key in new if key not in old)]
        return [
            c for key in keys for c in field_changes(old.get(key), new.get(key), join(path, key))
        ]
    if isinstance(old, list) and isinstance(new, list) and old and new:
        length = max(len(old), len(new))
        pairs = ((_at(old, n), _at(new, n)) for n in range(length))
        return [c for n, (a, b) in enumerate(pairs) for c in field_changes(a, b, join(path, n))]
    return [] if old == new else [FieldChange(path, shown(old), shown(new))]


def shown(value: Any) -> Any:
    """A JSON value as a change shows it (``ecron plan``, the ``tasks_synced`` line, the
    audit log): each URL's password and secret query values (``?api_key=``) written
    ``***``, wherever they are in it."""
    if isinstance(value, str):
        return without_url_secrets(value)
    if isinstance(value, dict):
        return {key: shown(item) for key, item in value.items()}
    if isinstance(value, list):
        return [shown(item) for item in value]
    return value


def _hidden(data: Mapping[str, Any]) -> Iterator[tuple[str | int, ...]]:
    """Where a stored spec holds redacted values: header values and secrets, the task's
    and its steps', as paths of keys."""
    steps = data.get("steps") or []
    calls = [((), data), *((("steps", n), step) for n, step in enumerate(steps))]
    for prefix, call in calls:
        for key in call.get("headers") or {}:
            yield (*prefix, "headers", key)
        if call.get("secret") == REDACTED:
            yield (*prefix, "secret")


def _get(data: Any, keys: tuple[str | int, ...]) -> Any:
    for key in keys:
        data = data[key]
    return data


def _put(data: Any, keys: tuple[str | int, ...], value: Any) -> None:
    _get(data, keys[:-1])[keys[-1]] = value


def _path(keys: tuple[str | int, ...]) -> str:
    path = ""
    for key in keys:
        path = join(path, key)
    return path


def _at(items: list[Any], index: int) -> Any:
    return items[index] if index < len(items) else None
