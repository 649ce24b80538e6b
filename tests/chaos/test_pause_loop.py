"""The pause loops (issue 24, part 1): the crash loop's nodes and workload, but a node is
paused (SIGSTOP: a long GC pause, a VM migration, a laptop lid) for 1 to 3 times its
lease_ttl at a random moment, 4 times, and woken (SIGCONT). Another node takes its work
over meanwhile; on waking it still believes it holds what it held. Every check of the crash
loop holds afterwards, and no call a woken node sent to a user service (trigger, poll,
cancel) was about an execution whose lease it did not hold as the call arrived, but for the
one call it may have had in flight when it stopped."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos.driver import chaos_seed
from tests.chaos.pauses import PAUSES, pause_counts, pause_loop, pause_problems

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("warm_forkserver")]


async def _paused(database: str, tmp_path: Path, nodes: int, what: str) -> None:
    seed = chaos_seed()
    print(f"\npause loop on {what}, seed {seed} (ECRON_CHAOS_SEED={seed} replays it)")
    run = await pause_loop(database, tmp_path, nodes=nodes, seed=seed)
    summary = pause_counts(run)
    print(summary)
    assert len(run.pauses) == PAUSES
    assert run.senders is not None
    assert run.senders.sent, f"no call of a woken node seen\n{summary}"
    broken = {check: found[:10] for check, found in pause_problems(run).items() if found}
    assert broken == {}, f"{broken}\n{summary}\n{run.logs}"


async def test_two_sqlite_processes_on_one_file_paused_past_their_leases_send_nothing_they_lost(
    tmp_path: Path,
) -> None:
    """Two nodes on one SQLite file; one of them, drawn at random, is paused 4 times for 1 to
    3 lease_ttl and woken: the other takes its work over meanwhile, every crash-loop check
    holds, and the woken node sends no call about an execution it no longer holds.
    It takes 25 to 40 s, over the 30 s of the suite's rule: 4 pauses of 1 to 3 lease_ttl,
    with the window of fire times around them, are that much real time of real
    processes (a paused process cannot be given a faster clock)."""
    await _paused(f"sqlite+aiosqlite:///{tmp_path / 'ecron.db'}", tmp_path, 2, "SQLite")


@pytest.mark.postgres
async def test_two_postgresql_nodes_paused_past_their_leases_send_nothing_for_what_they_lost(
    postgres_url: str, tmp_path: Path
) -> None:
    """Two nodes on one PostgreSQL, one drawn at random paused 4 times for 1 to 3 lease_ttl
    and woken: every crash-loop check holds, and no woken node sends a call about an
    execution it no longer holds.
    It takes 25 to 50 s, over the 30 s of the suite's rule: 4 pauses of 1 to 3 lease_ttl
    of real processes are that much real time."""
    await _paused(postgres_url, tmp_path, 2, "PostgreSQL, 2 nodes")


@pytest.mark.postgres
async def test_three_postgresql_nodes_paused_past_their_leases_send_nothing_for_what_they_lost(
    postgres_url: str, tmp_path: Path
) -> None:
    """Three nodes on one PostgreSQL, one drawn at random paused 4 times for 1 to 3
    lease_ttl and woken: every crash-loop check holds, and no woken node sends a call about
    an execution it no longer holds.
    It takes 25 to 35 s, over the 30 s of the suite's rule: 4 pauses of 1 to 3 lease_ttl
    of real processes are that much real time."""
    await _paused(postgres_url, tmp_path, 3, "PostgreSQL, 3 nodes")
