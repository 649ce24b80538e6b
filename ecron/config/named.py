"""What the config files define by name for tasks to use (calendars and pools), and how a
task's reference to one becomes the definition it names."""

from __future__ import annotations

import dataclasses
from typing import Any

from ecron.config.messages import Problems, kind
from ecron.config.rules import CalendarSpec, PoolSpec

#: Named calendars: name -> (the calendar, or None where its definition is wrong; its file).
Calendars = dict[str, tuple[CalendarSpec | None, str]]
#: Named pools, likewise.
Pools = dict[str, tuple[PoolSpec | None, str]]


@dataclasses.dataclass
class Named:
    """What the files define by name for the tasks to use: calendars and pools."""

    calendars: Calendars = dataclasses.field(default_factory=dict)
    pools: Pools = dataclasses.field(default_factory=dict)


def resolve_calendar(data: dict[str, Any], calendars: Calendars, bad: Problems) -> None:
    """A task's ``calendar`` naming a calendar becomes that calendar (with its name); one
    written in place stays as it is."""
    if isinstance(data.get("calendar"), str):
        _resolve(data, "calendar", calendars, bad, ", or write the calendar here")


def resolve_pool(data: dict[str, Any], pools: Pools, bad: Problems) -> None:
    """A task's ``pool`` naming a pool becomes that pool (with its name and limits)."""
    name = data.get("pool")
    if name is None:
        return
    if not isinstance(name, str):
        bad.append(("pool", f"must be the name of a pool defined under 'pools', not {kind(name)}."))
        del data["pool"]
        return
    _resolve(data, "pool", pools, bad, "")


def _resolve(
    data: dict[str, Any], key: str, found: dict[str, Any], bad: Problems, other: str
) -> None:
    """``data[key]``, a name, becomes the definition it names in ``found`` (``other``: what
    else the task may do, for the message); an unknown name, or one whose definition is
    wrong (said where it is defined), is left out."""
    name = data.pop(key)
    if name not in found:
        defined = ", ".join(sorted(found)) or "none"
        bad.append(
            (
                key,
                f"no {key} named {name!r} is defined (defined: {defined}); define it under "
                f"'{key}s' in ecron.yaml or a tasks file{other}.",
            )
        )
    elif (spec := found[name][0]) is not None:
        data[key] = spec.model_dump(mode="json")
