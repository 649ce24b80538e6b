"""Following executions live in the terminal, with rich progress bars."""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn

from ecron.cli.client import ApiClient

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


def progress_bar(console: Console) -> Progress:
    """The bar the CLI draws for one execution."""
    return Progress(
        TextColumn("{task.fields[label]}"),
        BarColumn(),
        TaskProgressColumn(),
        TextColumn("{task.fields[status]}"),
        TimeElapsedColumn(),
        TextColumn("{task.fields[message]}", style="dim"),
        console=console,
        transient=False,
    )


def follow(client: ApiClient, eid: str, console: Console, interval: float = 0.5) -> dict[str, Any]:
    """Draw ``eid``'s progress until it ends; the final snapshot."""
    with progress_bar(console) as bar:
        item = client.get(f"/api/v1/executions/{eid}")
        row = bar.add_task("", total=100, label=item["task"], status="", message="")
        while True:
            bar.update(
                row,
                completed=item["progress"],
                status=status_text(item),
                message=(item.get("message") or "")[:60],
            )
            if item["status"] in FINAL:
                return dict(item)
            time.sleep(interval)
            item = client.get(f"/api/v1/executions/{eid}")
