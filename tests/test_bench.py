"""The benchmarks under ``bench/`` at a tiny size, so that they cannot rot: each runs as its
documented command on SQLite, prints one JSON line with ecron's figures beside its baseline's,
and the basic facts hold. No wall-clock time and no speed ratio is asserted here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow


def run_bench(name: str, *options: str) -> dict[str, Any]:
    """``python -m bench.<name> OPTIONS`` from the repository root; its JSON line, parsed.
    The daemon runs on this interpreter (``--ecron-python``), not on the bench venv, which
    would be made with ``pip install -e .`` on first use: a test stays fast and offline."""
    command = [sys.executable, "-m", f"bench.{name}", "--database", "sqlite"]
    done = subprocess.run(
        [*command, "--ecron-python", sys.executable, *options],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=110,
    )
    assert done.returncode == 0, f"bench.{name} failed:\n{done.stdout}\n{done.stderr}"
    lines = [line for line in done.stdout.splitlines() if line.startswith('{"bench": ')]
    assert len(lines) == 1, f"expected one JSON line:\n{done.stdout}"
    figures: dict[str, Any] = json.loads(lines[0])
    assert figures["bench"] == name
    assert "ecron" in figures and "baseline" in figures
    daemon = figures["daemon"]
    assert daemon["python"] == sys.executable and daemon["installed"] == "--ecron-python"
    assert daemon["loop"] in ("uvloop", "asyncio") and daemon["daemons_started"] > 0, daemon
    return figures


def test_the_bench_venv_is_made_again_when_pyproject_changes(tmp_path: Path) -> None:
    """The bench venv counts as stale without its interpreter or its stamp, or when
    pyproject.toml is newer than the stamp; fresh otherwise (nothing is installed here)."""
    from bench.common import STAMP, venv_python, venv_stale

    venv, pyproject = tmp_path / "venv", tmp_path / "pyproject.toml"
    pyproject.write_text("[project]\n")
    assert venv_stale(venv, pyproject)
    venv_python(venv).parent.mkdir(parents=True)
    venv_python(venv).write_text("")
    assert venv_stale(venv, pyproject)
    (venv / STAMP).write_text("{}")
    os.utime(pyproject, (1_000, 1_000))
    assert not venv_stale(venv, pyproject)
    os.utime(pyproject, None)
    os.utime(venv / STAMP, (1_000, 1_000))
    assert venv_stale(venv, pyproject)


def test_triggers_fires_every_expected_time_once_and_persists_each_execution() -> None:
    """20 tasks every second for 2 s: each of the 40 fire times in the window is triggered
    once, by ecron and by APScheduler, and ecron has a SUCCESS row for each of them."""
    figures = run_bench(
        "triggers", "--tasks", "20", "--duration", "2", "--warmup", "1", "--drain", "1.5"
    )
    for side in ("ecron", "baseline"):
        run = figures[side]
        assert run["expected"] == 40
        assert run["triggered"] == run["expected"], run
        assert run["duplicates"] == 0, run
        assert run["lag_ms_p99"] is not None
        assert run["cpu_percent"] >= 0 and run["rss_mib"] > 0
    assert figures["ecron"]["every_execution_persisted"], figures["ecron"]


def test_burst_triggers_every_task_of_the_fire_time_once() -> None:
    """50 tasks on one cron fire time: all 50 are triggered once by ecron (ready before the
    fire time) and by APScheduler, and ecron persisted each execution."""
    figures = run_bench(
        "burst", "--tasks", "50", "--lead", "8", "--baseline-lead", "2", "--timeout", "30"
    )
    for side in ("ecron", "baseline"):
        run = figures[side]
        assert run["all_triggered"], run
        assert run["duplicates"] == 0, run
        assert run["first_s"] is not None and run["last_s"] is not None
        assert run["peak_rss_mib"] > 0
    assert figures["ecron"]["ready_before_fire"], figures["ecron"]
    assert figures["ecron"]["every_execution_persisted"], figures["ecron"]


def test_polls_polls_every_execution_and_persists_progress() -> None:
    """50 executions made through the API (run requests, as a user makes them) polled
    every second: each run request made one execution, both pollers make polls, ecron
    stores the progress the service reported, and the ratios to the plain poller are
    printed. In the batch run the same 50 are polled through the batch endpoint: every
    execution polled, its progress stored, with fewer HTTP requests than executions polled."""
    figures = run_bench("polls", "--executions", "50", "--duration", "2", "--settle", "0.5")
    assert figures["params"]["seed"] == "api"
    for side in ("ecron", "baseline", "ecron_batch"):
        run = figures[side]
        assert run["polled_at_start"] == 50, run
        assert run["polls"] > 0, run
        assert run["cpu_us_per_poll"] is not None and run["kib_per_execution"] is not None
    for side in ("ecron", "ecron_batch"):
        run = figures[side]
        assert run["seeding"] == "api", run
        assert run["seed_runs_created"] == run["seed_runs_distinct_ids"] == 50, run
        assert run["seed_other_answers"] == {}, run
        assert run["progress_persisted"], run
    assert figures["ecron"]["requests_per_s"] == figures["ecron"]["polls_per_s"]
    batched = figures["ecron_batch"]
    assert 0 < batched["requests_per_s"] < batched["polls_per_s"], batched
    assert set(figures["ratio"]) == {"polls_per_s", "cpu_us_per_poll", "kib_per_execution"}
    assert set(figures["batch_ratio"]) == {"polls_per_s", "cpu_us_per_poll"}


def test_polls_can_still_seed_rows_into_the_database_for_the_daemon_to_adopt() -> None:
    """``--seed db``, the labelled extra: 20 RUNNING rows written into the database (their
    next poll left unset) are adopted and polled, and the JSON line says how they were made."""
    figures = run_bench(
        "polls",
        *("--seed", "db", "--executions", "20", "--duration", "1", "--settle", "0.5"),
        "--no-batch",
    )
    assert figures["params"]["seed"] == "db"
    run = figures["ecron"]
    assert run["seeding"] == "db" and run["polled_at_start"] == 20, run
    assert run["progress_persisted"], run


def test_runs_creates_each_run_once_and_measures_both_phases_and_the_fires() -> None:
    """300 runs through the API in each phase: each answered 202 with its own execution and
    triggered once; the fire phase's 40 fire times all triggered; the ceiling phase's reads
    all answered, and /readyz's body and the saturation metrics recorded."""
    figures = run_bench(
        "runs",
        *("--runs", "300", "--edge", "50", "--settle", "0.5"),
        *("--fire-tasks", "20", "--fire-duration", "2", "--fire-warmup", "1", "--fire-drain", "1"),
        *("--duration", "20", "--hold", "2", "--ceiling-runs", "300", "--poll-interval", "1"),
    )
    idle, ceiling, fires = (
        figures["ecron"]["idle"],
        figures["ecron"]["ceiling"],
        figures["baseline"],
    )
    for run in (idle, ceiling):
        assert run["runs_created"] == run["runs_distinct_ids"] == 300, run
        assert run["other_answers"] == {} and run["trigger_duplicates"] == 0, run
        assert run["run_ms_p99"] is not None and run["cpu_percent"] >= 0, run
    assert idle["triggers_received"] == 300 and idle["all_triggered"], idle
    assert idle["in_flight_end"] == 300, idle
    for key in ("runs_per_s", "runs_per_s_first", "runs_per_s_last", "cpu_us_per_run"):
        assert idle[key] is not None, (key, idle)
    assert fires["expected"] == fires["triggered"] == 40 and fires["duplicates"] == 0, fires
    assert fires["cpu_us_per_fire"] is not None, fires
    assert ceiling["triggered"] == ceiling["service_running_end"] == 300, ceiling
    assert ceiling["reads"] > 0 and ceiling["reads_unanswered"] == 0, ceiling
    assert ceiling["readyz"]["status"] == 200 and ceiling["readyz"]["body"], ceiling
    assert isinstance(ceiling["metrics"], list), ceiling
    for key in ("polls_per_s", "gap_max_s", "gap_max_over_even", "unpolled_over_3_intervals"):
        assert key in ceiling, key
    assert set(figures["ratio"]) == {"runs_per_s_over_fires_per_s", "cpu_per_run_over_cpu_per_fire"}
    assert figures["daemon"]["daemons_started"] == 3


def test_lifecycle_counts_statements_and_transactions_per_execution() -> None:
    """5 executions of trigger, 10 polls and success: statements and transactions per
    execution are counted net of an idle window of the same length."""
    figures = run_bench("lifecycle", "--executions", "5", "--poll-interval", "100ms")
    run = figures["ecron"]
    assert run["statements"] > 0 and run["transactions"] > 0, run
    assert set(run["statements_by_kind"]) >= {"SELECT", "INSERT", "UPDATE", "DELETE"}
    assert "idle_window" in figures["baseline"]


def test_startup_times_fresh_and_existing_databases_and_the_bare_app() -> None:
    """10 tasks, one run: the daemon's start on a fresh and on an existing database, and the
    bare aiohttp app's, are each measured until /healthz answers."""
    figures = run_bench("startup", "--tasks", "10", "--runs", "1")
    (size,) = figures["ecron"]
    assert size["tasks"] == 10
    for state in ("fresh", "existing"):
        assert size[state]["runs"] == 1 and size[state]["median_s"] > 0
        assert size[state]["rss_mib"] > 0
    assert figures["baseline"]["median_s"] > 0


def test_overload_ramps_the_due_work_and_measures_the_api_memory_and_recovery() -> None:
    """1x and 5x of a tiny node's capacity (2 workers, a 0.1 s service: 20 fires/s): at
    each level every probe of the API and the health checks answered, nothing was triggered
    twice, fires were done, RSS and the rows by outcome were read, the recovery after the
    service speeds up was measured, and the knee is reported."""
    figures = run_bench(
        "overload",
        *("--levels", "1,5", "--workers", "2", "--delay", "0.1"),
        *("--duration", "1", "--warmup", "0.5", "--settle", "0.5", "--recovery", "2"),
    )
    levels = [figures["baseline"], *figures["ecron"]]
    assert [run["level"] for run in levels] == [1.0, 5.0]
    for run in levels:
        assert run["due_per_s"] == run["level"] * 20, run
        assert run["done_per_s"] > 0 and run["duplicates"] == 0, run
        assert run["rss_mib_peak"] > 0 and run["rows"], run
        for path, probed in run["api"].items():
            assert probed["asked"] > 0 and probed["unanswered"] == 0, (path, probed)
        assert all(a["unanswered"] == 0 for a in run["api_after_drop"].values()), run
        assert run["recovery"]["expected"] > 0, run
    assert set(figures["knee"]) == {"max_done_per_s", "at_level", "first_saturated_level"}


def test_pools_runs_the_same_load_in_pools_and_without_and_triggers_every_fire_time_once() -> None:
    """20 tasks every second for 2 s, in 4 pools of max_running 5, and the same without
    pools: each of the 40 fire times in the window is triggered once in both runs, every
    execution is persisted, and the ratio of CPU per fire is reported."""
    figures = run_bench(
        "pools", "--tasks", "20", "--pools", "4", "--max-running", "5",
        "--duration", "2", "--warmup", "1", "--drain", "1.5",
    )  # fmt: skip
    for side in ("ecron", "baseline"):
        run = figures[side]
        assert run["triggered"] == run["expected"] == 40, run
        assert run["duplicates"] == 0, run
        assert run["rows_success"] >= run["triggered"], run
    assert figures["ratio"]["cpu_per_fire"] is not None


def test_soak_samples_the_daemon_from_outside_and_does_every_kind_of_work(tmp_path: Path) -> None:
    """A 15-second soak at a small load (5 tasks every second, 20 long jobs of about 5 s,
    2 callback tasks every second), a sample every 3 s: each sample is a line of the
    samples file with the daemon's RSS, file descriptors and connections and the health
    latency; fires, polls, callbacks, API reads and the keeper's manual runs were all done,
    and nothing failed."""
    samples = tmp_path / "soak.jsonl"
    figures = run_bench(
        "soak", "--minutes", "0.25", "--interval", "3", "--samples", str(samples),
        "--fire-tasks", "5", "--long-jobs", "20", "--job-seconds", "5",
        "--callback-tasks", "2", "--callback-every", "1s",
    )  # fmt: skip
    soak = figures["ecron"]
    lines = [json.loads(line) for line in samples.read_text().splitlines()]
    assert soak["samples"] == len(lines) == 5 and soak["samples_file"] == str(samples)
    for key in ("rss_mib", "fds", "conn_service", "conn_api", "health_ms_p50"):
        assert soak["levels"][key]["start"] is not None and soak["levels"][key]["end"], key
    lag = soak["levels"]["loop_lag_ms_mean"]  # read from the daemon's own metric
    assert lag["start"] is not None and lag["end"] is not None, lag
    totals = soak["totals"]
    for key in ("fires", "polls", "callbacks_accepted", "reads_answered", "runs_created"):
        assert totals[key] > 0, (key, totals)
    assert totals["errors"] == 0, totals
    assert soak["rss_kib_per_min_second_half"] is not None


#: bench.growth at a tiny size: sizes 20 and 60, windows of 1 s, polls at 200/s.
GROWTH = (
    *("--sizes", "20,60", "--seconds", "1", "--poll-rate", "200", "--fire-tasks", "10"),
    *("--run-rate", "20", "--warmup", "0.5", "--drain", "1", "--settle", "0"),
)


def assert_growth(figures: dict[str, Any], name: str, figure: str) -> None:
    """One measurement of bench.growth at sizes 20 and 60: a figure per size, each size's
    growth over the first (1 for the first itself), and every node kept what it held."""
    grown = figures["growth"][name]
    assert grown["figure"] == figure and grown["sizes"] == [20, 60], grown
    assert len(figures["ecron"][name]) == 2 and grown["held"] == [True, True], grown
    assert all(value is not None for value in grown["ecron"]), grown
    assert grown["growth"][0] == 1.0 and grown["growth"][1] is not None, grown
    assert isinstance(figures["flat"][name], bool), figures["flat"]


def test_growth_polls_the_same_rate_at_each_size_beside_the_plain_poller() -> None:
    """bench.growth's poll measurement: 20 and then 60 executions made through the API are
    polled at 200 polls/s in all (every 0.1 s, then every 0.3 s), by ecron and by the plain
    poller; polls are counted and the CPU per poll read for each, with its growth."""
    figures = run_bench("growth", *GROWTH, "--measurements", "poll")
    assert set(figures["growth"]) == {"poll"} and figures["baseline"]["run"] is None
    assert_growth(figures, "poll", "cpu_us_per_poll")
    for mine, size in zip(figures["ecron"]["poll"], (20, 60), strict=True):
        assert mine["in_flight"] == mine["seed_runs_created"] == size, mine
        assert mine["polls"] > 0 and mine["kib_per_execution"] is not None, mine
    assert len(figures["growth"]["poll"]["baseline_growth"]) == 2
    for theirs in figures["baseline"]["poll"]:
        assert theirs["polls_per_s"] > 0 and theirs["cpu_us_per_poll"] is not None, theirs


def test_growth_fires_and_runs_at_a_fixed_rate_beside_tasks_and_runs_held() -> None:
    """bench.growth's fire and run measurements: 10 tasks every second fire each fire time
    of the window once beside 20, then 60, tasks at rest (on APScheduler too); then,
    with 20 and 60 runs held, 20 runs asked in the window are each answered 202 and
    triggered, and the CPU per run is set beside the CPU per fire at the same size."""
    figures = run_bench("growth", *GROWTH, "--measurements", "fire,run")
    assert set(figures["growth"]) == {"fire", "run"} and figures["baseline"]["poll"] is None
    assert_growth(figures, "fire", "cpu_us_per_fire")
    assert_growth(figures, "run", "cpu_us_per_run")
    for side in ("ecron", "baseline"):
        for fired in figures[side]["fire"]:
            assert fired["expected"] == fired["triggered"] == 10, fired
            assert fired["duplicates"] == 0 and fired["fired_in_window"] > 0, fired
    for side in ("ecron", "baseline"):
        assert [f["at_rest"] for f in figures[side]["fire"]] == [20, 60], figures[side]
    for ran, size in zip(figures["ecron"]["run"], (20, 60), strict=True):
        assert ran["held_runs"] == size and ran["asked"] == 20, ran
        assert ran["runs_created"] == ran["runs_distinct_ids"] == 20, ran
        assert ran["all_triggered"] and ran["run_ms_p99"] is not None, ran
    beside = figures["growth"]["run"]["beside_cpu_us_per_fire"]
    assert beside == figures["growth"]["fire"]["ecron"], beside


def test_kit_measures_the_kit_and_a_bare_handler_giving_the_same_answers() -> None:
    """bench.kit at a tiny size: both services answer every trigger and poll with a 200 and
    a report, the same bytes for the same execution, and each one's CPU per execution (a
    trigger and 10 polls) is read, with their ratio. No ratio is asserted here."""
    command = [sys.executable, "-m", "bench.kit", "--triggers", "100", "--rounds", "1"]
    done = subprocess.run(
        [*command, "--warmup", "10"], cwd=ROOT, capture_output=True, text=True, timeout=110
    )
    assert done.returncode == 0, f"bench.kit failed:\n{done.stdout}\n{done.stderr}"
    (line,) = [line for line in done.stdout.splitlines() if line.startswith('{"bench": ')]
    figures = json.loads(line)
    assert figures["bench"] == "kit" and figures["same_answers"] is True, figures
    for side in ("kit", "baseline"):
        assert figures[side]["rounds"] == 1 and figures[side]["requests_per_s"] > 0
    assert figures["ratio"] > 0 and len(figures["ratios"]) == 1
