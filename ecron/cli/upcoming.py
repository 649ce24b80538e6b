"""``ecron tasks --next N [--from TIME]``: each task's next fire times that will run, as the
API's ``/tasks/{name}/upcoming`` lists them (calendars and blackouts applied), with a note
on each that daylight saving time changed."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from rich.console import Console
from rich.table import Table

from ecron.cli.client import ApiClient


def print_upcoming(
    client: ApiClient, tasks: list[dict[str, Any]], count: int, start: str | None = None
) -> None:
    """One row per fire time: the task, its rank, when (RFC 3339 UTC), and what daylight
    saving time did to it (``shifted``, ``jumped``, ``repeated``, with the wall time it
    stands for). A wall time the task's ``dst`` policy skips gets a row of its own, after
    the task's fire times. A paused task's are marked: they are the ones it would have if
    unpaused now. Tasks with none are left out. ``start``: list from then, not from now."""
    table = Table("task", "#", "fire time", "daylight saving time")
    query: dict[str, Any] = {"count": count}
    if start is not None:
        query["from"] = start
    for item in tasks:
        name = item["name"]
        answer = client.get(f"/api/v1/tasks/{quote(name, safe='')}/upcoming", **query)
        mark = "  (if unpaused now)" if answer["paused"] else ""
        changes = answer.get("dst", [])
        notes: dict[str | None, list[str]] = {}
        for change in changes:
            notes.setdefault(change["at"], []).append(f"{change['change']} {change['wall']}")
        for rank, when in enumerate(answer["items"], start=1):
            note = ", ".join(notes.get(when, []))
            table.add_row(name if rank == 1 else "", str(rank), when + mark, note)
        for note in notes.get(None, []):
            table.add_row("", "-", "(none that day)", note)
    Console().print(table)
