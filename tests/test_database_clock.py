"""Which clock a node decides on (docs/reliability.md, "Which clock decides"): the
database's. A node reads it at start and at each heartbeat, across one round trip timed on
its monotonic clock, and adds the offset of the reading with the shortest round trip of the
last few to that monotonic clock; ids name moments of that clock too. And a node whose
renewal cannot land before its leases run out (a database that stalls) lets go of them
then, and says so; a trigger whose record lands only after its deadline is not sent."""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from structlog.testing import capture_logs

from ecron.clock import Clock, Reading, best_offset
from ecron.core import Status
from ecron.ids import new_eid
from ecron.store.sql import SqlStore
from tests.support.daemon import DaemonFactory, task
from tests.support.latency import proxied_database
from tests.support.service import UserService, wait_for

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
#: T0 on the monotonic clock (seconds since the epoch)
S0 = T0.timestamp()
MS = timedelta(milliseconds=1)


class OffClock(Clock):
    """A node's clock on a machine whose own wall clock is five seconds ahead (its
    monotonic clock, which counts from anything, is left alone)."""

    def local(self) -> datetime:
        return datetime.now(UTC) + timedelta(seconds=5)


@pytest.mark.parametrize(
    ("readings", "offset"),
    [
        ([], None),
        ([Reading(T0 + 10 * MS, S0, S0 + 0.020)], timedelta(0)),
        ([Reading(T0, S0 + 5.000, S0 + 5.002)], -5_001 * MS),
        (
            [  # a slow answer (500 ms) is outweighed by a quick one, whatever their order
                Reading(T0 + 500 * MS, S0, S0 + 0.5),
                Reading(T0 + 1_001 * MS, S0 + 1.000, S0 + 1.002),
            ],
            timedelta(0),
        ),
    ],
    ids=["none", "in step", "five seconds ahead", "the quickest reading wins"],
)
def test_the_offset_is_that_of_the_reading_with_the_shortest_round_trip(
    readings: list[Reading], offset: timedelta | None
) -> None:
    """The database read its clock somewhere in the round trip: taken at its middle."""
    assert best_offset(readings) == offset


async def test_a_node_whose_own_clock_is_off_decides_on_the_database_clock(
    database_url: str,
) -> None:
    """On PostgreSQL, a node whose wall clock is 5 s ahead reads the database's clock once
    aligned; on SQLite the database's clock is the machine's own (there is no other)."""
    store = SqlStore.open(database_url)
    clock = OffClock()
    try:
        clock.align(await store.read_clock(clock.ticks))
    finally:
        await store.close()
    ahead = (clock.now() - datetime.now(UTC)).total_seconds()
    if store.engines.dialect.name == "postgresql":
        assert abs(ahead) < 0.2, f"{ahead:.3f}s off the database's clock"
    else:
        assert ahead == pytest.approx(5, abs=0.2)


async def test_a_node_reads_the_database_clock_three_times_before_its_first_lease(
    make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """At start a node takes three readings (the quickest sets the offset), not one that a
    slow round trip may have put off; on SQLite none (the machine's clock is the database's)."""
    spec = task("job", f"{user_service.url}/jobs/x")
    async with make_daemon([spec], lease_ttl="60s") as daemon:  # no heartbeat meanwhile
        readings = daemon.clock.readings
        postgresql = daemon.store.engines.dialect.name == "postgresql"
    assert len(readings) == (3 if postgresql else 0)


def test_an_eid_names_the_moment_it_is_made_for() -> None:
    """Ids of executions sort by when they were made on the database's clock: the moment
    given, not this machine's clock (a later moment than any before, so the counter that
    keeps one process's ids in order does not step in)."""
    moment = datetime.now(UTC) + timedelta(days=1)
    assert uuid.UUID(new_eid(moment)).int >> 80 == int(moment.timestamp() * 1000)


@pytest.mark.postgres
@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
async def test_a_node_whose_database_stalls_lets_go_of_its_leases_when_they_run_out(
    database_url: str, make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """A node reaches PostgreSQL through a proxy that then holds every byte for three
    leases: the renewal under way cannot land, so when the lease runs out the node lets go
    of the running execution and logs ``leases_expired_unrenewed`` (reason
    ``renewal_late``), while the database is still stalled."""
    user_service.duration = 30
    async with proxied_database(database_url) as (proxy, through):
        spec = task("job", f"{user_service.url}/jobs/x", poll_interval="200ms")
        async with make_daemon([spec], database=through, lease_ttl="1s") as daemon:
            execution, _ = await daemon.parts.commands.run_now("job")
            held = daemon.parts.held

            async def running() -> bool:
                current = held.get(execution.eid)
                return current is not None and current.status is Status.RUNNING

            await wait_for(running)
            with capture_logs() as logs:
                proxy.stall(3.0)
                await wait_for(lambda: execution.eid not in held, timeout=5.0)
                still_stalled = time.monotonic() < proxy.stalled_until
    assert still_stalled, "the node let go only once the database answered again"
    lapsed = [e for e in logs if e["event"] == "leases_expired_unrenewed"]
    assert lapsed and lapsed[0]["reason"] == "renewal_late", logs


@pytest.mark.postgres
@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
async def test_a_trigger_recorded_only_after_its_deadline_is_not_sent_and_times_out_uncalled(
    database_url: str, make_daemon: DaemonFactory, user_service: UserService
) -> None:
    """A node whose every round trip to PostgreSQL takes 300 ms longer records that a 0.5 s
    job's trigger leaves (its deadline fixed then: the trigger's time plus
    ``task_timeout``), and the write lands only after that deadline. The trigger is not
    sent (it would start the job past its deadline) and nothing is cancelled: the run ends
    TIMED_OUT with no call at all to the service and no cancel recorded."""
    async with proxied_database(database_url) as (proxy, through):
        spec = task("job", f"{user_service.url}/jobs/x", task_timeout="500ms")
        async with make_daemon([spec], database=through, lease_ttl="60s") as daemon:
            proxy.delay = 0.3  # from here a write (begin, update, commit) outlasts 0.5 s
            execution, _ = await daemon.parts.commands.run_now("job")
            store = daemon.store

            async def ended() -> bool:
                row = await store.get_execution(execution.eid)
                return row is not None and row.is_final

            await wait_for(ended, timeout=30.0)
            proxy.delay = 0.0  # the daemon's stop need not wait
            row = await store.get_execution(execution.eid)
    assert row is not None
    print(f"\n{row.status} {row.message!r}; calls to the service: {user_service.calls}")
    assert row.status is Status.TIMED_OUT
    assert row.message == "the task timeout passed before its trigger left"
    assert row.cancel_sent_at is None and row.cancel_acknowledged is None
    assert user_service.calls == []  # neither the trigger nor a cancel
