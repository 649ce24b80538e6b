"""``growth``'s tables: one per measurement, a column per size (``bench/growth.py``), and
the warning printed for a figure from a node that did not keep what it held."""

from __future__ import annotations

import sys
from typing import Any

from bench.common import ratio, show


def warn_unheld(measurement: str, size: int, figures: dict[str, Any]) -> None:
    if figures["held"]:
        return
    print(
        f"WARNING: {measurement} at {size:,}: the node did not keep what it held in the window "
        f"(lapses {figures['lapses']}, taken over {figures['takeovers']}, leases lost "
        f"{figures['leases_lost']}, deadlocks retried {figures['deadlocks_retried']}): its "
        "figure is not a figure",
        flush=True,
    )


def size_table(title: str, sizes: list[int], rows: list[tuple[str, list[Any]]]) -> None:
    """A table with one column per size."""
    print(f"\n{title}")
    width = max(len(label) for label, _ in rows)
    print(f"  {'':<{width}}" + "".join(f"  {size:>14,}" for size in sizes))
    for label, values in rows:
        print(f"  {label:<{width}}" + "".join(f"  {show(value):>14}" for value in values))
    sys.stdout.flush()


def account_rows(mine: list[dict[str, Any]]) -> list[tuple[str, list[Any]]]:
    """The rows of what each daemon's log and metrics said over its window."""
    return [
        ("lease lapses (log)", [m["lapses"] for m in mine]),
        ("executions taken over (metrics)", [m["takeovers"] for m in mine]),
        ("leases lost (metrics)", [m["leases_lost"] for m in mine]),
        (
            "deadlocks retried (log) / detected (PostgreSQL)",
            [f"{m['deadlocks_retried']} / {show(m['deadlocks_detected'])}" for m in mine],
        ),
        ("kept everything it held (else not a figure)", [m["held"] for m in mine]),
    ]


def growth_rows(grown: dict[str, Any], theirs: str | None) -> list[tuple[str, list[Any]]]:
    smallest = f"{grown['sizes'][0]:,}"
    rows = [(f"  growth over {smallest} (flat: ≤ {grown['limit']:g})", grown["growth"])]
    if theirs is not None and "baseline" in grown:
        rows += [
            (f"{theirs}: CPU per unit, µs", grown["baseline"]),
            (f"  its growth over {smallest}", grown["baseline_growth"]),
        ]
    return rows


def report_poll(args: Any, mine: list[Any], theirs: list[Any], grown: dict[str, Any]) -> None:
    rows = [
        ("poll interval, s", [m["interval_s"] for m in mine]),
        ("ramp until all polled, s", [m["ramp_s"] for m in mine]),
        ("polls/s (wanted: the poll rate)", [m["polls_per_s"] for m in mine]),
        ("CPU per poll, µs", [m["cpu_us_per_poll"] for m in mine]),
        *growth_rows(grown, "plain aiohttp poller"),
        ("  its polls/s", [t["polls_per_s"] for t in theirs]),
        ("CPU, % of a core", [m["cpu_percent"] for m in mine]),
        ("KiB per execution", [m["kib_per_execution"] for m in mine]),
        ("largest gap / interval", [m["gap_max_over_interval"] for m in mine]),
        *account_rows(mine),
    ]
    title = (
        f"growth, poll: N in flight polled at {args.poll_rate:g}/s, {args.seconds:g}s window, "
        f"{args.database}; flat: {show(grown['flat'])}"
    )
    size_table(title, grown["sizes"], rows)


def report_fire(args: Any, mine: list[Any], theirs: list[Any], grown: dict[str, Any]) -> None:
    rows = [
        ("ready, s", [m["ready_s"] for m in mine]),
        ("fire times expected / missed", [f"{m['expected']} / {m['missed']}" for m in mine]),
        ("duplicates", [m["duplicates"] for m in mine]),
        ("lag p99, ms", [m["lag_ms_p99"] for m in mine]),
        ("triggers in the window", [m["fired_in_window"] for m in mine]),
        ("CPU per fire, µs", [m["cpu_us_per_fire"] for m in mine]),
        *growth_rows(grown, "APScheduler, the same tasks"),
        ("  its lag p99, ms", [t["lag_ms_p99"] for t in theirs]),
        ("CPU, % of a core", [m["cpu_percent"] for m in mine]),
        ("RSS, MiB", [m["rss_mib"] for m in mine]),
        *account_rows(mine),
    ]
    title = (
        f"growth, fire: N tasks at rest and {args.fire_tasks} {{every: 1s}}, "
        f"{args.seconds:g}s window, {args.database}; flat: {show(grown['flat'])}"
    )
    size_table(title, grown["sizes"], rows)


def report_run(args: Any, mine: list[Any], _none: list[Any], grown: dict[str, Any]) -> None:
    beside = grown["beside_cpu_us_per_fire"]
    rows = [
        (
            "runs held (setup) / runs/s",
            [f"{m['held_runs']} / {m['setup_runs_per_s']}" for m in mine],
        ),
        ("KiB per run held", [m["kib_per_run_held"] for m in mine]),
        ("runs in the window (202) / asked", [f"{m['runs_created']} / {m['asked']}" for m in mine]),
        ("runs/s (wanted: the run rate)", [m["runs_per_s"] for m in mine]),
        ("run request p50 / p99, ms", [f"{m['run_ms_p50']} / {m['run_ms_p99']}" for m in mine]),
        ("CPU per run, µs", [m["cpu_us_per_run"] for m in mine]),
        *growth_rows(grown, None),
        ("beside it: CPU per fire, µs", beside),
        (
            "  per run / per fire",
            [ratio(m["cpu_us_per_run"], f) for m, f in zip(mine, beside, strict=True)],
        ),
        ("CPU, % of a core", [m["cpu_percent"] for m in mine]),
        *account_rows(mine),
    ]
    title = (
        f"growth, run: N held, runs asked at {args.run_rate:g}/s, {args.seconds:g}s window, "
        f"{args.database}; flat: {show(grown['flat'])}"
    )
    size_table(title, grown["sizes"], rows)
