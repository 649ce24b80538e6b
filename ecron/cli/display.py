"""How the CLI shows ids, times and statuses in a terminal: short ids like git's; times as
wall times in the zone they belong to (``ecron.wall``: a task's own, else the daemon's
``timezone``; UTC with ``--utc``), to the second, a table's times of today without their
date; how long a run took; tables that fit 80 columns without cutting an id or a time."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from rich import box
from rich.table import Table
from rich.text import Text

from ecron.cli.client import ApiClient, ApiError, segment
from ecron.cli.outside import markup
from ecron.ids import SHORT_ID, unique_prefix
from ecron.wall import UTC_NAME, duration, took, wall, wall_today

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
    text = f"[{_COLOURS.get(status, 'white')}]{markup(status)}[/]"
    return f"{text} ({markup(item['reason'])})" if item.get("reason") else text


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
    """``now``, ``42 s ago``, ``in 3 min``, ``5 h ago``: how far ``when`` is from ``now``
    (how long a progress has stood still); a day or more away, the date and time in UTC."""
    seconds = (when - now).total_seconds()
    span = int(abs(seconds))
    if span >= 86400:
        return wall(when, UTC_NAME)
    if span < 1:
        return "now"
    if span < 60:
        amount = f"{span} s"
    elif span < 3600:
        amount = f"{span // 60} min"
    else:
        amount = f"{span // 3600} h"
    return f"in {amount}" if seconds > 0 else f"{amount} ago"


class Zones:
    """The zone each time is shown in (DESIGN.md, "What people read"): a task's own
    ``timezone``, asked of the daemon once per task (``GET /api/v1/tasks/{name}``, unless
    ``known``); the daemon's ``timezone`` for a time without a task or of a task it no
    longer has (``GET /api/v1/about``; UTC from a daemon too old to say); UTC for every
    time with ``--utc`` (``utc``), nothing asked."""

    def __init__(
        self, client: ApiClient | None, utc: bool = False, known: Mapping[str, str] | None = None
    ) -> None:
        self.client = client
        self.utc = utc
        self._tasks = dict(known or {})
        self._daemon: str | None = None

    def of(self, task: str | None = None) -> str:
        """The zone of a time of ``task`` (None: a time without a task)."""
        if self.utc or self.client is None:
            return UTC_NAME
        if task is None:
            return self.daemon()
        if task not in self._tasks:
            try:
                self._tasks[task] = self.client.get(f"/api/v1/tasks/{segment(task)}")["timezone"]
            except ApiError as exc:
                if exc.status != 404:
                    raise
                self._tasks[task] = self.daemon()  # retired: its times in the daemon's zone
        return self._tasks[task]

    def daemon(self) -> str:
        """The daemon's ``timezone``."""
        if self._daemon is None:
            assert self.client is not None
            try:
                self._daemon = str(self.client.get("/api/v1/about")["timezone"])
            except ApiError as exc:
                if exc.status != 404:
                    raise
                self._daemon = UTC_NAME  # a daemon from before the setting
        return self._daemon


class Times:
    """Shows API times one way for a whole command, each in the zone ``zones`` gives it:
    with its date (``dated``: ``show``, ``--wide``), or short as a table shows them:
    today's (in that zone, at ``now``) without a date, this year's with ``Nov 28``."""

    def __init__(self, zones: Zones, dated: bool, now: datetime | None = None) -> None:
        self.zones = zones
        self.dated = dated
        self.now = now or datetime.now(UTC)

    def __call__(self, text: str | None, empty: str = "-", *, task: str | None = None) -> str:
        when = parse_time(text)
        if when is None:
            return empty
        zone = self.zones.of(task)
        return wall(when, zone) if self.dated else wall_today(when, zone, self.now)


def took_text(item: dict[str, Any]) -> str:
    """How long an ended run (or step) took from its first trigger call to its end, ``8.2
    s``; nothing for one that has not ended or was never triggered."""
    start = parse_time(item.get("triggered_at") or item.get("started_at"))
    seconds = duration(start, parse_time(item.get("finished_at")))
    return "" if seconds is None else took(seconds)


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
