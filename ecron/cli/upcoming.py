"""``ecron tasks --next N``: each task's next fire times that will run, as the API's
``/tasks/{name}/upcoming`` lists them (calendars and blackouts applied)."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from rich.console import Console
from rich.table import Table

from ecron.cli.client import ApiClient


def print_upcoming(client: ApiClient, tasks: list[dict[str, Any]], count: int) -> None:
    """One row per fire time: the task, its rank, when (RFC 3339 UTC). A paused task's are
    marked: they are the ones it would have if unpaused now. Tasks with none are left out."""
    table = Table("task", "#", "fire time")
    for item in tasks:
        name = item["name"]
        answer = client.get(f"/api/v1/tasks/{quote(name, safe='')}/upcoming", count=count)
        mark = "  (if unpaused now)" if answer["paused"] else ""
        for rank, when in enumerate(answer["items"], start=1):
            table.add_row(name if rank == 1 else "", str(rank), when + mark)
    Console().print(table)
