"""How the CLI shows ids, times and statuses in a terminal: short ids like git's, times
relative to now (``3 s ago``, ``in 2 min``) or, with ``--wide``, absolute in the local
time zone; tables that fit 80 columns without cutting an id or a time."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from rich import box
from rich.table import Table
from rich.text import Text

from ecron.ids import SHORT_ID, unique_prefix

#: Statuses that never change again (the API's strings).
FINAL = frozenset({"SUCCESS", "FAILED", "TIMED_OUT", "CANCELLED", "SKIPPED"})
_COLOURS = {
    "SCHEDULED": "blue",
    "PENDING": "yellow",
    "RUNNING": "cyan",
    "SUCCESS": "green",
    "FAILED": "red",
    "TIMED_OUT": "red",
    "CANCELLED": "magenta",
    "SKIPPED": "dim",
}


def status_text(item: dict[str, Any]) -> str:
    """``STATUS`` or ``STATUS (reason)``, coloured for rich."""
    status = str(item["status"])
    text = f"[{_COLOURS.get(status, 'white')}]{status}[/]"
    return f"{text} ({item['reason']})" if item.get("reason") else text


def short_length(ids: Iterable[str]) -> int:
    """The shortest length (``SHORT_ID`` at least) at which the ids shown together all
    differ, like git's abbreviated object names; never one that ends on a dash."""
    ordered = sorted(set(ids))
    around = zip(ordered, [None, *ordered], [*ordered[1:], None], strict=False)
    lengths = (len(unique_prefix(eid, before, after)) for eid, before, after in around)
    return max(lengths, default=SHORT_ID)


def parse_time(text: str | None) -> datetime | None:
    """An API time (RFC 3339), or None."""
    return None if text is None else datetime.fromisoformat(text)


def relative(when: datetime, now: datetime) -> str:
    """``now``, ``42 s ago``, ``in 3 min``, ``5 h ago``; a day or more away, the local date
    and time (``Nov 27 13:07``, with the year when it is not this one)."""
    seconds = (when - now).total_seconds()
    span = int(abs(seconds))
    if span >= 86400:
        local = when.astimezone()
        same_year = local.year == now.astimezone().year
        return local.strftime("%b %d %H:%M" if same_year else "%Y-%m-%d %H:%M")
    if span < 1:
        return "now"
    if span < 60:
        amount = f"{span} s"
    elif span < 3600:
        amount = f"{span // 60} min"
    else:
        amount = f"{span // 3600} h"
    return f"in {amount}" if seconds > 0 else f"{amount} ago"


def absolute(when: datetime) -> str:
    """The local date and time to the millisecond, with its UTC offset."""
    return when.astimezone().isoformat(sep=" ", timespec="milliseconds")


class Times:
    """Shows API times one way for a whole command: relative to one ``now``, or absolute."""

    def __init__(self, wide: bool, now: datetime | None = None) -> None:
        self.wide = wide
        self.now = now or datetime.now(UTC)

    def __call__(self, text: str | None, empty: str = "-") -> str:
        when = parse_time(text)
        if when is None:
            return empty
        return absolute(when) if self.wide else relative(when, self.now)


def table(
    columns: Sequence[str],
    rows: Sequence[Sequence[str]],
    *,
    wide: bool,
    width: int,
    whole: Iterable[str] = (),
) -> Table:
    """A table of ``rows`` (rich markup) with the CLI's look, a rule under the header and
    two spaces between columns, made to fit ``width`` columns of terminal. The first
    column (ids) and the ``whole`` ones (times) are never wrapped or cut; without
    ``wide`` a ``message`` column takes the room left, cut with an ellipsis; what still
    does not fit wraps (task names, statuses). With ``wide`` nothing is cut or wrapped:
    the table is as wide as its content, past ``width`` if need be."""
    keep = {columns[0], *whole}
    fit = list(cell_widths(columns, rows).values())
    flexible = "message" if "message" in columns and not wide else None
    room = width - 2 * (len(columns) - 1)
    room -= sum(size for name, size in zip(columns, fit, strict=True) if name != flexible)
    grid = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1, 0, 0))
    for name, size in zip(columns, fit, strict=True):
        if name == flexible:
            grid.add_column(name, no_wrap=True, overflow="ellipsis", max_width=max(room, 7))
        elif name in keep:
            grid.add_column(name, no_wrap=True, min_width=size)
        else:
            grid.add_column(name)
    for row in rows:
        grid.add_row(*row)
    natural = sum(fit) + 2 * (len(columns) - 1)
    if (wide or keep >= set(columns)) and natural > width:  # nothing cut: past the edge
        grid.width = natural  # (print uncropped)
    return grid


def cell_widths(columns: Sequence[str], rows: Sequence[Sequence[str]]) -> dict[str, int]:
    """Each column's width with nothing wrapped: its longest cell or its name."""
    return {
        name: max([len(name), *(Text.from_markup(row[n]).cell_len for row in rows)])
        for n, name in enumerate(columns)
    }


def columns_to_fit(
    columns: Sequence[str], rows: Sequence[Sequence[str]], width: int, order: Sequence[str]
) -> list[str]:
    """The columns shown in ``width`` with nothing wrapped or cut: those of ``order`` left
    out, one after another in that order, until the rest fits (the others are always
    kept, past ``width`` if need be)."""
    sizes = cell_widths(columns, rows)
    kept = list(columns)
    for name in order:
        if sum(sizes[n] for n in kept) + 2 * (len(kept) - 1) <= width:
            break
        kept.remove(name)
    return kept


def progress_text(item: dict[str, Any]) -> str:
    """``42%`` while an execution (or step) has not ended, nothing once it has; with
    ``stalled 12 min`` after it while the execution is stalled (``stalled_text``)."""
    if item["status"] in FINAL or item["status"] == "SCHEDULED":
        return ""
    stalled = stalled_text(item)
    return f"{item['progress']:.0f}% {stalled}" if stalled else f"{item['progress']:.0f}%"


def stalled_text(item: dict[str, Any], now: datetime | None = None) -> str:
    """``stalled 42 min`` (for how long its progress has not moved, by this computer's
    clock) while the snapshot says the execution is stalled; nothing otherwise."""
    if not item.get("stalled"):
        return ""
    since = parse_time(item.get("progress_at") or item.get("triggered_at"))
    ago = "" if since is None else relative(since, now or datetime.now(UTC))
    if ago.endswith(" ago"):
        return f"[yellow]stalled {ago.removesuffix(' ago')}[/]"
    if ago in ("", "now") or ago.startswith("in "):  # this clock is behind the daemon's
        return "[yellow]stalled[/]"
    return f"[yellow]stalled since {ago}[/]"  # a day or more: the date
