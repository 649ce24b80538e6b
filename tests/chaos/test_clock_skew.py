"""Clocks that disagree (issue 24, part 2): two PostgreSQL nodes, one of them run under
``faketime`` with its wall clock 5 s ahead of the machine's (and of the database's), then,
in a second run, 5 s behind, drive the crash loop's workload for a while. The tables and
the services' records must show what the crash loop's do (every fire time of the window
run once, no remote id started twice, the store's invariants in every snapshot), and no
lease taken from a live node, no execution timed out before its deadline and no fire time
triggered before its time, by the database's clock."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos.driver import chaos_seed
from tests.chaos.faulted import faulted_counts, faulted_problems, faulted_run
from tests.chaos.launcher import libfaketime, start_skewed_node, start_warm_node
from tests.support.cluster import let_time_pass

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.usefixtures("warm_forkserver")]

#: How long the skewed pair runs the workload (the window of fire times checked).
RUN_FOR = 12.0


@pytest.mark.parametrize("offset", ["+5s", "-5s"], ids=["ahead", "behind"])
async def test_a_node_5s_off_doubles_no_fire_time_takes_no_live_lease_times_out_nothing_early(
    postgres_url: str, tmp_path: Path, offset: str
) -> None:
    """One node on the machine's clock and one whose wall clock is ``offset`` off (faketime;
    its monotonic clock is left alone), on one PostgreSQL, run the crash loop's workload
    for 12 s: every fire time of the window has one chain that ended, no remote id was
    started twice, no lease changed hands while its node was up and the lease, by the
    database's clock, still ran, each job's trigger carried the deadline ``task_timeout``
    after it reached the service and no cancel came before it, and no trigger came before
    its fire time."""
    libfaketime()  # skips locally, fails in CI, when faketime is missing
    seed = chaos_seed()
    print(f"\nnode1's clock {offset}; seed {seed}")
    logs = tmp_path
    launch = [
        lambda name, directory: start_warm_node(name, directory, postgres_url, logs),
        lambda name, directory: start_skewed_node(name, directory, postgres_url, logs, offset),
    ]
    found = await faulted_run(
        postgres_url, tmp_path, launch, lambda _: let_time_pass(RUN_FOR), seed=seed
    )
    summary = faulted_counts(found)
    print(summary)
    found_problems = faulted_problems(found, database_healthy=True)
    broken = {check: p[:10] for check, p in found_problems.items() if p}
    assert broken == {}, f"{broken}\n{summary}\n{found.run.logs}"
