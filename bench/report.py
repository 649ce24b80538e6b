"""Markdown tables from benchmark JSON lines, for docs/performance.md.

    .venv/bin/python -m bench.report bench/results/before-f071609-sqlite.jsonl [more.jsonl ...]

One table per benchmark, one row per run (size and database), ecron's figures beside the
baseline's. Lines that are not a benchmark's JSON line are skipped.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

Row = dict[str, Any]


def fmt(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "**no**"
    if isinstance(value, float):
        return f"{value:,.2f}" if abs(value) < 10 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, dict):
        return ", ".join(f"{key} {fmt(n)}" for key, n in sorted(value.items()))
    return str(value)


def triggers(line: Row) -> list[Any]:
    e, b, p = line["ecron"], line["baseline"], line["params"]
    return [
        p["database"],
        p["tasks"],
        f"{fmt(e['triggered'])} of {fmt(e['expected'])}",
        f"{fmt(b['triggered'])} of {fmt(b['expected'])}",
        f"{fmt(e['duplicates'])} / {fmt(b['duplicates'])}",
        f"{fmt(e['lag_ms_p50'])} / {fmt(e['lag_ms_p99'])} / {fmt(e['lag_ms_max'])}",
        f"{fmt(b['lag_ms_p50'])} / {fmt(b['lag_ms_p99'])} / {fmt(b['lag_ms_max'])}",
        f"{fmt(e['fired_per_s'])} (p50 lag {fmt(e['fired_lag_ms_p50'])} ms)",
        f"{fmt(e['cpu_percent'])} / {fmt(b['cpu_percent'])}",
        f"{fmt(e['rss_mib'])} / {fmt(b['rss_mib'])}",
        f"{fmt(e['rows_success'])} SUCCESS of {fmt(e['rows'])} ({fmt(e['rows_by_status'])})",
    ]


TRIGGERS = [
    "db",
    "tasks",
    "ecron triggered",
    "APScheduler triggered",
    "duplicates e / A",
    "ecron lag ms p50 / p99 / max",
    "APScheduler lag ms p50 / p99 / max",
    "ecron triggers sent/s",
    "CPU % e / A",
    "RSS MiB e / A",
    "ecron rows in window",
]


def burst(line: Row) -> list[Any]:
    e, b, p = line["ecron"], line["baseline"], line["params"]
    return [
        p["database"],
        p["tasks"],
        f"{fmt(e['triggered'])} / {fmt(b['triggered'])}",
        f"{fmt(e['duplicates'])} / {fmt(b['duplicates'])}",
        f"{fmt(e['first_s'])} / {fmt(b['first_s'])}",
        f"{fmt(e['last_s'])} / {fmt(b['last_s'])}",
        f"{fmt(e['cpu_s'])} / {fmt(b['cpu_s'])}",
        f"{fmt(e['peak_rss_mib'])} / {fmt(b['peak_rss_mib'])}",
        f"{fmt(e['ready_s'])} ({'before' if e['ready_before_fire'] else '**after**'})",
        fmt(e["rows_success"]),
    ]


BURST = [
    "db",
    "tasks",
    "triggered e / A",
    "duplicates e / A",
    "first s e / A",
    "last s e / A",
    "CPU s e / A",
    "peak RSS MiB e / A",
    "ecron ready s (vs fire time)",
    "ecron SUCCESS rows",
]


def polls(line: Row) -> list[Any]:
    e, b, p, r = line["ecron"], line["baseline"], line["params"], line["ratio"]
    return [
        p["database"],
        p["executions"],
        fmt(e["ramp_s"]),
        f"{fmt(e['polls_per_s'])} / {fmt(b['polls_per_s'])} (**{fmt(r['polls_per_s'])}×**)",
        f"{fmt(e['interval_mean_s'])} / {fmt(b['interval_mean_s'])}",
        f"{fmt(e['cpu_us_per_poll'])} / {fmt(b['cpu_us_per_poll'])} "
        f"(**{fmt(r['cpu_us_per_poll'])}×**)",
        f"{fmt(e['cpu_percent'])} / {fmt(b['cpu_percent'])}",
        f"{fmt(e['kib_per_execution'])} / {fmt(b['kib_per_execution'])}",
        f"{fmt(e['progress_advanced'])} / {fmt(e['progress_matches_recent'])}",
    ]


POLLS = [
    "db",
    "in flight",
    "ecron ramp s",
    "polls/s e / plain (ratio)",
    "mean interval s e / plain",
    "CPU µs per poll e / plain (ratio)",
    "CPU % e / plain",
    "KiB per execution e / plain",
    "progress advanced / = recent report",
]


def lifecycle(line: Row) -> list[Any]:
    e, p = line["ecron"], line["params"]
    kinds, ends = e["statements_by_kind"], e["transactions_by_kind"]
    return [
        p["database"],
        p["executions"],
        fmt(e["statements"]),
        fmt(e["statement_rows"]),
        fmt(e["transactions"]),
        " / ".join(fmt(kinds[k]) for k in ("SELECT", "INSERT", "UPDATE", "DELETE", "other")),
        f"{fmt(ends['commit'])} / {fmt(ends['rollback'])}",
        fmt(line["window_s"]),
        fmt(line["conflicts_409"]),
    ]


LIFECYCLE = [
    "db",
    "executions",
    "statements",
    "statement rows",
    "transactions",
    "SELECT / INSERT / UPDATE / DELETE / other",
    "commits / rollbacks",
    "window s",
    "409s retried",
]


def startup(line: Row) -> list[list[Any]]:
    rows = []
    for size in line["ecron"]:
        for state in ("fresh", "existing"):
            s = size[state]
            rows.append(
                [
                    line["params"]["database"],
                    f"ecron, {size['tasks']:,} tasks, {state}",
                    f"{fmt(s['min_s'])} / {fmt(s['median_s'])} / {fmt(s['max_s'])}",
                    fmt(s["rss_mib"]),
                ]
            )
    b = line["baseline"]
    rows.append(
        [
            line["params"]["database"],
            "bare aiohttp app",
            f"{fmt(b['min_s'])} / {fmt(b['median_s'])} / {fmt(b['max_s'])}",
            fmt(b["rss_mib"]),
        ]
    )
    return rows


STARTUP = ["db", "process", "seconds min / median / max", "RSS MiB"]


def runs(line: Row) -> list[Any]:
    idle, ceiling = line["ecron"]["idle"] or {}, line["ecron"]["ceiling"] or {}
    fires, r, p = line["baseline"] or {}, line["ratio"], line["params"]

    def get(run: Row, key: str) -> str:
        return fmt(run.get(key))

    return [
        p["database"],
        p["runs"],
        f"{get(idle, 'runs_per_s')} ({get(idle, 'runs_per_s_first')} → "
        f"{get(idle, 'runs_per_s_last')})",
        f"{get(idle, 'run_ms_p50')} / {get(idle, 'run_ms_p99')}",
        f"{get(idle, 'cpu_us_per_run')} / {get(fires, 'cpu_us_per_fire')}",
        f"{get(idle, 'runs_per_s')} / {get(fires, 'fired_per_s')}",
        f"**{fmt(r['cpu_per_run_over_cpu_per_fire'])}× / "
        f"{fmt(r['runs_per_s_over_fires_per_s'])}×**",
        f"{get(ceiling, 'runs_created')} / {get(ceiling, 'in_flight_end')}",
        f"{get(ceiling, 'run_ms_p99')} / {get(ceiling, 'read_ms_p99')}",
        f"{get(ceiling, 'polls_per_s_hold')} of {get(ceiling, 'poll_demand_per_s')}",
        f"{get(ceiling, 'gap_max_s')} / {get(ceiling, 'unpolled_over_3_intervals')}",
    ]


RUNS = [
    "db",
    "runs",
    "idle runs/s (first → last)",
    "idle run ms p50 / p99",
    "CPU µs per run / per fire",
    "runs/s / fires/s",
    "ratios CPU / rate",
    "ceiling: created / in flight",
    "ceiling: run / read ms p99",
    "ceiling: polls/s of due",
    "ceiling: largest gap s / > 3 intervals",
]

BENCHES: dict[str, tuple[list[str], Callable[[Row], Any], bool]] = {
    "triggers": (TRIGGERS, triggers, False),
    "burst": (BURST, burst, False),
    "polls": (POLLS, polls, False),
    "lifecycle": (LIFECYCLE, lifecycle, False),
    "startup": (STARTUP, startup, True),
    "runs": (RUNS, runs, False),
}


def markdown(lines: list[Row]) -> str:
    out = []
    for name, (heads, row_of, many) in BENCHES.items():
        runs = [line for line in lines if line.get("bench") == name]
        if not runs:
            continue
        out += [f"#### {name}", "", "| " + " | ".join(heads) + " |"]
        out.append("|" + "---|" * len(heads))
        for line in runs:
            for row in row_of(line) if many else [row_of(line)]:
                out.append("| " + " | ".join(str(cell) for cell in row) + " |")
        out.append("")
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument(
        "--latest", action="store_true", help="only the last run of each benchmark and size"
    )
    args = parser.parse_args()
    lines = []
    for path in args.files:
        for text in path.read_text().splitlines():
            if text.startswith('{"bench": '):
                lines.append(json.loads(text))
    if args.latest:
        last = {json.dumps([line["bench"], line["params"]], sort_keys=True): line for line in lines}
        lines = list(last.values())
    print(markdown(lines))


if __name__ == "__main__":
    main()
