"""A slow database (issue 24, part 3): two PostgreSQL nodes run the crash loop's workload,
one of them reaching the database through a proxy (tests/support/latency.py) that adds
50 ms to every round trip, then 500 ms, then nothing for a while (the slow node takes work
on again), then holds everything for 5 s (more than twice the 2 s lease) while that node's
writes are on their way. The slow node renews its leases in time or lets them go when they
run out and says so (``leases_expired_unrenewed``); the other node takes over only what ran
out, and the slow node's late writes are refused by the fence. Nothing is lost or doubled:
the crash loop's checks hold (fences and versions only grow, no final row changes), no
lease is taken from a node while it still runs by the database's clock, and no job is
timed out early."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import pytest

from tests.chaos.driver import chaos_seed
from tests.chaos.faulted import Cluster, faulted_counts, faulted_problems, faulted_run
from tests.chaos.launcher import start_warm_node
from tests.support.cluster import let_time_pass
from tests.support.latency import LatencyProxy, proxied_database
from tests.support.service import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.usefixtures("warm_forkserver")]

#: (seconds added to each round trip, for how long) before the stall (the last phase at
#: full speed, so that the slow node holds work again when the stall comes, with writes on
#: their way); the stall; and how long the nodes run on once it is over.
PHASES = [(0.05, 4.0), (0.5, 4.0), (0.0, 3.0)]
STALL = 5.0
AFTER = 3.0
#: A generous bound on the wait for node1 to hold work before the stall.
HOLD_TIMEOUT = 15.0


async def _slow_then_stalled(proxy: LatencyProxy, cluster: Cluster) -> None:
    """The proxy's delays, one after the other; then, once node1 holds work again, the
    stall; then a while at full speed."""
    for delay, seconds in PHASES:
        proxy.delay = delay
        await let_time_pass(seconds)
    await wait_for(lambda: cluster.holds_work("node1"), timeout=HOLD_TIMEOUT, interval=0.1)
    proxy.stall(STALL)
    await let_time_pass(STALL + AFTER)


async def test_a_node_on_a_slow_then_stalled_database_lets_go_of_what_it_cannot_renew(
    postgres_url: str, tmp_path: Path
) -> None:
    """node1 reaches PostgreSQL through a proxy adding 50 ms per round trip for 4 s, then
    500 ms for 4 s, then nothing for 3 s, then holding every byte for 5 s; node0 reaches
    it directly. Every fire
    time of the window has one chain that ended, no remote id was started twice, no lease
    changed hands while its node was up and it still ran by the database's clock, no job
    was cancelled before the deadline its trigger carried (a trigger that node1 recorded
    through the slow proxy leaves that much later, and one sent again after a takeover
    keeps the first's deadline: the job is given less than its timeout), node1 said it let
    its leases go (``leases_expired_unrenewed``), and both nodes stop cleanly.
    It may take up to 35 s on a loaded machine, over the 30 s of the suite's rule: the
    four stretches of the proxy are 16 s of real time, with the window around them."""
    seed = chaos_seed()
    async with proxied_database(postgres_url) as (proxy, slow_url):
        print(f"\nnode1 through the latency proxy on port {proxy.port}; seed {seed}")
        launch = [
            lambda name, directory: start_warm_node(name, directory, postgres_url, tmp_path),
            lambda name, directory: start_warm_node(name, directory, slow_url, tmp_path),
        ]
        found = await faulted_run(
            postgres_url, tmp_path, launch, partial(_slow_then_stalled, proxy), seed=seed
        )
    summary = f"{faulted_counts(found)} proxy_connections={proxy.connections}"
    print(summary)
    broken = {
        check: p[:10] for check, p in faulted_problems(found, database_healthy=False).items() if p
    }
    if not found.events["leases_expired_unrenewed"]:
        broken["let go"] = ["node1 never said it let its leases go (leases_expired_unrenewed)"]
    assert broken == {}, f"{broken}\n{summary}\n{found.run.logs}"
