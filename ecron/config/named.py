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
    """A task's ``calendar`` naming a calendar becomes that calendar (with its name)."""
    name = data.get("calendar")
    if not isinstance(name, str):
        return
    if name not in calendars:
        defined = ", ".join(sorted(calendars)) or "none"
        bad.append(
            (
                "calendar",
                f"no calendar named {name!r} is defined (defined: {defined}); define it under "
                "'calendars' in ecron.yaml or a tasks file, or write the calendar here.",
            )
        )
        del data["calendar"]
    elif (spec := calendars[name][0]) is None:
        del data["calendar"]  # its definition is wrong: said where it is defined
    else:
        data["calendar"] = spec.model_dump(mode="json")


def resolve_pool(data: dict[str, Any], pools: Pools, bad: Problems) -> None:
    """A task's ``pool`` naming a pool becomes that pool (with its name and limits)."""
    name = data.get("pool")
    if name is None:
        return
    if not isinstance(name, str):
        bad.append(("pool", f"must be the name of a pool defined under 'pools', not {kind(name)}."))
        del data["pool"]
        return
    if name not in pools:
        defined = ", ".join(sorted(pools)) or "none"
        bad.append(
            (
                "pool",
                f"no pool named {name!r} is defined (defined: {defined}); define it under "
                "'pools' in ecron.yaml or a tasks file.",
            )
        )
        del data["pool"]
    elif (spec := pools[name][0]) is None:
        del data["pool"]  # its definition is wrong: said where it is defined
    else:
        data["pool"] = spec.model_dump(mode="json")
