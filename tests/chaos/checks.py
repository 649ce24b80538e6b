"""What the crash loops check, read straight from the tables (ecron/store/tables.py) and
from the user services' records.

- ``Snapshots`` reads every execution and step row again and again while the nodes run and
  die: each row's fence and version only grow, a final status never changes, and a final
  row (with its steps) never changes at all once it is final.
- ``chains`` groups the rows of each fire time (task, scheduled_at): retries (attempt + 1)
  and resumes (``resume_of``) of one fire time are one chain, which must have exactly one
  end, final, with every link before it a FAILED that was continued.
- ``started_checks`` holds the services' starts against the rows: each remote id started
  once, for an execution that exists with the task and fire time the service was told, and
  nothing started for a SKIPPED fire time.
"""

from __future__ import annotations

import asyncio
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa

from ecron.clock import iso
from ecron.core import FINAL
from ecron.store.sql import SqlStore
from ecron.store.sql_nodes import held_until, node_leases
from ecron.store.tables import execution_table, step_table

FINAL_NAMES = frozenset(status.value for status in FINAL)
ACTIVE_NAMES = frozenset({"PENDING", "RUNNING"})

Row = dict[str, Any]


@dataclass
class Tables:
    """The database the nodes share, read directly."""

    store: SqlStore

    @classmethod
    def open(cls, database_url: str) -> Tables:
        return cls(SqlStore.open(database_url))

    async def close(self) -> None:
        await self.store.close()

    async def read(self) -> tuple[dict[str, Row], dict[tuple[str, int], Row]]:
        """Every execution row by eid (with ``held_until``: until when it is held, its own
        claim and its owner's node lease taken together, ``sql_leases.held_until``) and every
        step row by (eid, number), in one read."""
        async with self.store.engines.read() as conn:
            executions = (await conn.execute(sa.select(execution_table))).mappings().all()
            steps = (await conn.execute(sa.select(step_table))).mappings().all()
            leases = await node_leases(conn)
        return (
            {row["eid"]: {**row, "held_until": held_until(row, leases)} for row in executions},
            {(row["eid"], row["number"]): dict(row) for row in steps},
        )

    async def database_now(self) -> datetime:
        """The database's own clock (on SQLite, which has none, this machine's)."""
        query = sa.select(sa.func.clock_timestamp() if self._postgres else sa.func.now())
        async with self.store.engines.read() as conn:
            found = (await conn.execute(query)).scalar_one()
        return found if isinstance(found, datetime) else datetime.now(UTC)

    @property
    def _postgres(self) -> bool:
        return self.store.engines.dialect.name == "postgresql"

    async def duplicate_keys(self) -> list[Any]:
        """Rows that share a unique key, counted by the database itself."""
        c = execution_table.c
        fire = (
            sa.select(c.task, c.scheduled_at, c.attempt, c.resume_attempt, sa.func.count())
            .group_by(c.task, c.scheduled_at, c.attempt, c.resume_attempt)
            .having(sa.func.count() > 1)
        )
        resumed = (
            sa.select(c.resume_of, sa.func.count())
            .where(c.resume_of.is_not(None))
            .group_by(c.resume_of)
            .having(sa.func.count() > 1)
        )
        async with self.store.engines.read() as conn:
            return [*(await conn.execute(fire)).all(), *(await conn.execute(resumed)).all()]


@dataclass(frozen=True)
class Lease:
    """An execution's lease as a snapshot saw it."""

    owner: str | None
    until: datetime | None


@dataclass
class Snapshots:
    """Reads the tables every ``every`` seconds and checks each read against the earlier
    ones; ``problems`` lists what went wrong, ``taken`` how many reads were compared.

    With ``live`` (the node ids whose processes are up) it also watches leases change hands
    (``leases_taken`` counts the changes of owner it saw): a lease taken from a node that
    was up while by the database's clock it had not run out (held until after the
    database's time just after the read that showed the new owner: its node lease under its
    epoch, and its own claim, ``sql_leases.held_until``) is a problem."""

    tables: Tables
    every: float = 0.5
    live: Callable[[], set[str]] | None = None
    taken: int = 0
    leases_taken: int = 0
    problems: list[str] = field(default_factory=list)
    _fences: dict[str, tuple[int, int]] = field(default_factory=dict)
    _finals: dict[str, Row] = field(default_factory=dict)
    _final_steps: dict[str, list[Row]] = field(default_factory=dict)
    _leases: dict[str, Lease] = field(default_factory=dict)

    def watch_leases(self, executions: dict[str, Row], now: datetime, live: set[str]) -> None:
        """Compare each lease with the one seen before (``now``: the database's clock just
        after this read; ``live``: the node ids up all through it)."""
        for eid, row in executions.items():
            before = self._leases.get(eid)
            lease = Lease(row["owner"], row["held_until"])
            self._leases[eid] = lease
            if before is None or before.owner is None or lease.owner in (None, before.owner):
                continue
            self.leases_taken += 1
            if before.owner in live and before.until is not None and before.until > now:
                self.problems.append(
                    f"{eid}: lease taken from live node {before.owner} by {lease.owner} by "
                    f"{iso(now)} (database clock), while it ran until {iso(before.until)}"
                )

    def compare(self, executions: dict[str, Row], steps: dict[tuple[str, int], Row]) -> None:
        """Check one read against everything read before it."""
        self.taken += 1
        steps_of: dict[str, list[Row]] = defaultdict(list)
        for (eid, _), step in sorted(steps.items()):
            steps_of[eid].append(step)
        for eid, row in executions.items():
            before = self._fences.get(eid)
            now = (row["fence"], row["version"])
            if before is not None and (now[0] < before[0] or now[1] < before[1]):
                self.problems.append(f"{eid}: fence/version went from {before} to {now}")
            self._fences[eid] = now
            if eid in self._finals:
                if row != self._finals[eid]:
                    self.problems.append(
                        f"{eid}: final row changed: {_diff(self._finals[eid], row)}"
                    )
                if steps_of.get(eid, []) != self._final_steps[eid]:
                    self.problems.append(f"{eid}: steps of a final row changed")
            elif row["status"] in FINAL_NAMES:
                self._finals[eid] = row
                self._final_steps[eid] = steps_of.get(eid, [])
        gone = set(self._fences) - set(executions)
        if gone:
            self.problems.append(f"rows disappeared: {sorted(gone)[:5]}")

    async def take(self) -> None:
        live = self.live() if self.live is not None else None
        executions, steps = await self.tables.read()
        self.compare(executions, steps)
        if live is not None and self.live is not None:
            now = await self.tables.database_now()
            self.watch_leases(executions, now, live & self.live())

    async def run(self, stop: asyncio.Event) -> None:
        """Take snapshots until ``stop`` is set (and one more then)."""
        while not stop.is_set():
            await self.take()
            try:
                await asyncio.wait_for(stop.wait(), self.every)
            except TimeoutError:
                continue
        await self.take()

    @property
    def finals_watched(self) -> int:
        return len(self._finals)


def _diff(old: Row, new: Row) -> dict[str, tuple[Any, Any]]:
    return {key: (old[key], new.get(key)) for key in old if old[key] != new.get(key)}


# --- chains ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ChainReport:
    """Per fire time (task, scheduled_at): its rows, and what is wrong with them."""

    chains: dict[tuple[str, datetime], list[Row]]
    problems: list[str]

    @property
    def rows(self) -> int:
        return sum(len(rows) for rows in self.chains.values())


def chains(executions: dict[str, Row]) -> ChainReport:
    """Group rows by fire time and check each group is one chain with one final end."""
    groups: dict[tuple[str, datetime], list[Row]] = defaultdict(list)
    for row in executions.values():
        groups[row["task"], row["scheduled_at"]].append(row)
    problems = []
    for fire, rows in groups.items():
        problems += _chain_problems(fire, rows)
    return ChainReport(dict(groups), problems)


def _chain_problems(fire: tuple[str, datetime], rows: list[Row]) -> list[str]:
    """One chain: every row is reached from the first attempt through retries (the next
    attempt) and resumes (``resume_of``), exactly one row is continued by nothing (the
    end), it is final, and every other row is a FAILED that was continued."""
    name = f"{fire[0]}@{iso(fire[1])}"
    by_eid = {row["eid"]: row for row in rows}
    next_of: dict[str, list[str]] = defaultdict(list)
    firsts = []
    for row in rows:
        if row["resume_of"] is not None:
            parent = by_eid.get(row["resume_of"])
            if parent is None:
                return [f"{name}: {row['eid']} resumes {row['resume_of']}, not of this fire time"]
            next_of[parent["eid"]].append(row["eid"])
        elif row["attempt"] == 1:
            firsts.append(row)
        else:
            earlier = [r for r in rows if r["attempt"] == row["attempt"] - 1]
            if not earlier:
                return [f"{name}: attempt {row['attempt']} without attempt {row['attempt'] - 1}"]
            tail = max(earlier, key=lambda r: r["resume_attempt"])
            next_of[tail["eid"]].append(row["eid"])
    problems = []
    if len(firsts) != 1:
        problems.append(f"{name}: {len(firsts)} first executions")
    ends = [row for row in rows if not next_of.get(row["eid"])]
    if len(ends) != 1:
        problems.append(f"{name}: {len(ends)} chain ends: {[r['eid'] for r in ends]}")
    for row in rows:
        continued = next_of.get(row["eid"], [])
        if len(continued) > 1:
            problems.append(f"{name}: {row['eid']} continued twice: {continued}")
        if continued and row["status"] != "FAILED":
            problems.append(f"{name}: {row['eid']} is {row['status']} and was continued")
        if not continued and row["status"] not in FINAL_NAMES:
            problems.append(f"{name}: the chain ends {row['status']} ({row['eid']})")
    return problems


def fire_times(every: dict[str, int], start: datetime, end: datetime) -> list[tuple[str, datetime]]:
    """Every fire time of each ``{every: Ns}`` task (whole multiples of N seconds since the
    epoch) from ``start`` to ``end``."""
    found = []
    for task, seconds in every.items():
        step = timedelta(seconds=seconds)
        epoch = datetime(1970, 1, 1, tzinfo=start.tzinfo)
        first = epoch + step * -(-(start - epoch) // step)
        when = first
        while when <= end:
            found.append((task, when))
            when += step
    return found


# --- starts at the services ---------------------------------------------------------------


def remote_ids_of(row: Row, steps: list[Row]) -> list[str]:
    """The remote ids an execution's calls carry: its eid, or its steps' own (a resumed
    execution's inherited steps keep the old remote id, and were started by the old one)."""
    if not steps:
        return [row["eid"]]
    return [step["remote_id"] for step in steps if step["remote_id"].startswith(row["eid"])]


def started_checks(
    executions: dict[str, Row],
    steps: dict[tuple[str, int], Row],
    starts: Counter[str],
    headers: dict[str, tuple[str, str, str]],
) -> list[str]:
    """The services' starts (``starts``: per remote id; ``headers``: the task, fire time and
    attempt each start was told) against the rows."""
    steps_of: dict[str, list[Row]] = defaultdict(list)
    for (eid, _), step in sorted(steps.items()):
        steps_of[eid].append(step)
    owner_of = {
        rid: row for row in executions.values() for rid in remote_ids_of(row, steps_of[row["eid"]])
    }
    problems = [f"{rid} started {n} times" for rid, n in starts.items() if n != 1]
    for rid, (task, scheduled_at, attempt) in headers.items():
        row = owner_of.get(rid)
        if row is None:
            problems.append(f"{rid} was started but no execution has it")
        elif (row["task"], iso(row["scheduled_at"]), str(row["attempt"])) != (
            task,
            scheduled_at,
            attempt,
        ):
            problems.append(f"{rid} started as {task}@{scheduled_at}#{attempt}, is {row}")
    for row in executions.values():
        rids = remote_ids_of(row, steps_of[row["eid"]])
        if row["status"] == "SKIPPED" and any(rid in starts for rid in rids):
            problems.append(f"{row['eid']} is SKIPPED but was started")
    return problems
