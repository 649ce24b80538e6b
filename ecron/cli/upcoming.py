"""``ecron tasks --next N [--from TIME]``: each task's next fire times that will run, as the
API's ``/tasks/{name}/upcoming`` lists them (calendars and blackouts applied), with a note
on each that daylight saving time changed."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from rich.console import Console
from rich.markup import escape

from ecron.cli.client import ApiClient
from ecron.cli.display import Times, table

COLUMNS = ("task", "#", "fire time", "daylight saving time")


def print_upcoming(
    client: ApiClient,
    tasks: list[dict[str, Any]],
    count: int,
    start: str | None = None,
    *,
    wide: bool = False,
) -> None:
    """One row per fire time, in the CLI's table style: the task, its rank, when, and what
    daylight saving time did to it (``shifted``, ``jumped``, ``repeated``, with the wall time
    it stands for). A wall time the task's ``dst`` policy skips gets a row of its own, after
    the task's fire times. A paused task's are marked: they are the ones it would have if
    unpaused now. Tasks with none are left out. ``start``: list from then, not from now.

    Fire times are local absolute times (with their UTC offset) even without ``wide``: a
    preview across a change of daylight saving time needs the offset, not ``in 3 h``."""
    when = Times(True)  # absolute, with or without --wide
    query: dict[str, Any] = {"count": count}
    if start is not None:
        query["from"] = start
    rows: list[list[str]] = []
    for item in tasks:
        name = item["name"]
        answer = client.get(f"/api/v1/tasks/{quote(name, safe='')}/upcoming", **query)
        mark = " (if unpaused now)" if answer["paused"] else ""
        notes: dict[str | None, list[str]] = {}
        for change in answer.get("dst", []):
            notes.setdefault(change["at"], []).append(f"{change['change']} {change['wall']}")
        for rank, moment in enumerate(answer["items"], start=1):
            note = ", ".join(notes.get(moment, []))
            rows.append([escape(name) if rank == 1 else "", str(rank), when(moment) + mark, note])
        for note in notes.get(None, []):
            rows.append(["", "-", "(none that day)", note])
    console = Console()
    grid = table(COLUMNS, rows, wide=wide, width=console.width, whole=("#", "fire time"))
    console.print(grid, crop=False)
