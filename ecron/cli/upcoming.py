"""``ecron tasks --next N [--from TIME]``: each task's next fire times that will run, as the
API's ``/tasks/{name}/upcoming`` lists them (calendars and blackouts applied), with a note
on each that daylight saving time changed."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from rich.console import Console

from ecron.cli.client import ApiClient
from ecron.cli.display import Times, Zones, parse_time, table
from ecron.cli.outside import markup
from ecron.wall import dst_note

COLUMNS = ("task", "#", "fire time", "daylight saving time")


def print_upcoming(
    client: ApiClient,
    tasks: list[dict[str, Any]],
    count: int,
    zones: Zones,
    start: str | None = None,
    *,
    wide: bool = False,
) -> None:
    """One row per fire time, in the CLI's table style: the task, its rank, when (in the
    task's zone, as ``zones`` says), and what daylight saving time did to it, as a sentence
    (``02:30 does not exist on 28 March: runs at 03:30 CEST``). A wall time the task's
    ``dst`` policy skips gets a row of its own, after the task's fire times. A paused task's
    are marked: they are the ones it would have if unpaused now. Tasks with none are left
    out. ``start``: list from then, not from now.

    Each fire time has its date and its zone's abbreviation or offset, with or without
    ``wide``: across a change of daylight saving time the zone tells two runs at the same
    wall time apart."""
    when = Times(zones, dated=True)
    query: dict[str, Any] = {"count": count}
    if start is not None:
        query["from"] = start
    rows: list[list[str]] = []
    for item in tasks:
        name = item["name"]
        answer = client.get(f"/api/v1/tasks/{quote(name, safe='')}/upcoming", **query)
        mark = " (if unpaused now)" if answer["paused"] else ""
        zone = zones.of(name)
        notes: dict[str | None, list[str]] = {}
        for change in answer.get("dst", []):
            note = dst_note(change["change"], change["wall"], parse_time(change["at"]), zone)
            notes.setdefault(change["at"], []).append(note)
        for rank, moment in enumerate(answer["items"], start=1):
            note = "; ".join(notes.get(moment, []))
            row = [markup(name) if rank == 1 else "", str(rank), when(moment, task=name) + mark]
            rows.append([*row, markup(note)])
        for note in notes.get(None, []):
            rows.append(["", "-", "(none that day)", markup(note)])
    console = Console()
    grid = table(COLUMNS, rows, wide=wide, width=console.width, whole=("#", "fire time"))
    console.print(grid, crop=False)
