"""The pause loops' driver (issue 24, part 1): the crash loops' nodes and workload, but a
node is paused instead of killed: SIGSTOP for 1 to 3 times ``lease_ttl`` at a random moment
(a seeded RNG, as the crash loop's: ``ECRON_CHAOS_SEED`` replays the moments and lengths),
then SIGCONT. The node paused is the one holding the most active executions then.
Meanwhile another node takes its work over; on waking it still believes it holds what it
held. Every check of the crash loop holds, and one more (``senders``): no call a woken node
sends is about an execution whose lease it no longer holds, but for one it had in flight
when it stopped."""

from __future__ import annotations

import asyncio
import random
import signal
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from tests.chaos.checks import ACTIVE_NAMES, Snapshots, Tables, fire_times
from tests.chaos.driver import (
    LEASE_TTL,
    WARM_UP,
    Run,
    _collect_starts,
    _config,
    _fires_again,
    _manual_runs,
    _settle,
    _wait_all_ended,
    counts,
    node_id,
    problems,
)
from tests.chaos.launcher import start_warm_node
from tests.chaos.senders import Senders
from tests.chaos.workload import EVERY, serve_workload
from tests.support.cluster import Node, clean_up, let_time_pass, stop_node, wait_ready

#: Pauses per run; the seconds between a wake and the next pause; a pause's length, in
#: lease_ttl.
PAUSES = 4
PAUSE_SPACING = (1.0, 2.5)
PAUSE_TTLS = (1.0, 3.0)


#: Errors a paused node logs by design: woken past its leases, it says it let them all go
#: (``leases_expired_unrenewed``, reason ``renewal_late``) before it sends anything.
EXPECTED_ERRORS = frozenset({"leases_expired_unrenewed"})


@dataclass
class PauseRun(Run):
    """What one pause loop did and found: the crash loop's, and the pauses and the calls."""

    #: (seconds from the first pause's wait, node, seconds stopped) of each pause.
    pauses: list[tuple[float, str, float]] = field(default_factory=list)
    senders: Senders | None = None
    #: Error lines the nodes logged, by event (an action that failed unexpectedly, say).
    errors: Counter[str] = field(default_factory=Counter)


async def pause_loop(database_url: str, tmp_path: Path, *, nodes: int, seed: int) -> PauseRun:
    """Run the workload on ``nodes`` nodes, pause one at random PAUSES times, let the
    cluster settle, and read everything the checks need."""
    rng = random.Random(seed)
    run = PauseRun(seed=seed, nodes=nodes)
    slots: list[Node] = []
    awake: list[Node] = []
    tables = Tables.open(database_url)
    senders = run.senders = Senders(tables)
    try:
        async with serve_workload(lambda: [n.api for n in awake], senders.middleware()) as work:
            directory = _config(tmp_path, work)
            for n in range(nodes):
                slots.append(start_warm_node(f"node{n}", directory, database_url, tmp_path))
                senders.add(slots[-1].process.pid)  # its calls begin before it answers
            await asyncio.gather(*(wait_ready(node) for node in slots))
            ids = {node.name: await node_id(node) for node in slots}
            for node in slots:
                senders.add(node.process.pid, ids[node.name])
            awake.extend(slots)
            began = datetime.now(UTC)
            run.snapshots = Snapshots(tables)
            stop = asyncio.Event()
            snapshotting = asyncio.create_task(run.snapshots.run(stop))
            manual = asyncio.create_task(_manual_runs(awake, rng, run.manual))
            started = time.monotonic()
            for _ in range(PAUSES):
                await let_time_pass(rng.uniform(*PAUSE_SPACING))
                node = await _busiest(tables, slots, ids, rng)
                seconds = rng.uniform(*PAUSE_TTLS) * LEASE_TTL
                at = round(time.monotonic() - started, 2)
                awake.remove(node)
                node.process.send_signal(signal.SIGSTOP)
                await senders.stopping(ids[node.name], node.process.pid)
                await let_time_pass(seconds)
                senders.woke(ids[node.name])
                node.process.send_signal(signal.SIGCONT)
                awake.append(node)
                run.pauses.append((at, node.name, round(seconds, 2)))
            window_end = datetime.now(UTC)
            run.phases["pauses"] = time.monotonic() - started
            manual.cancel()
            run.adopted_after = await _settle(tables, slots)
            run.window = (began + WARM_UP, window_end)
            expected = fire_times(EVERY, *run.window)
            run.phases["settled"] = time.monotonic() - started
            await _wait_all_ended(tables, expected, run.manual)
            run.chained_after = await _fires_again(tables, "chained", window_end)
            run.phases["ended"] = time.monotonic() - started
            stop.set()
            await snapshotting
            run.exit_codes = list(await asyncio.gather(*(stop_node(node) for node in slots)))
            run.phases["stopped"] = time.monotonic() - started
            await run.snapshots.take()
            run.executions, run.steps = await tables.read()
            run.duplicate_keys = await tables.duplicate_keys()
            run.logs = "\n".join(node.log_tail(15) for node in slots)
            logged = [event for node in slots for event in node.events()]
            run.events = Counter(str(event.get("event")) for event in logged)
            run.errors = Counter(
                str(event.get("event"))
                for event in logged
                if event.get("level") == "error" and event.get("event") not in EXPECTED_ERRORS
            )
            _collect_starts(run, work)
    finally:
        for node in slots:  # a node left stopped by a failure would never end
            node.process.send_signal(signal.SIGCONT)
        clean_up(slots)
        await tables.close()
    return run


async def _busiest(
    tables: Tables, slots: list[Node], ids: dict[str, str], rng: random.Random
) -> Node:
    """The node holding the most active executions now (the one whose pause leaves the
    most to take over, and to send zombie calls about); drawn at random among equals."""
    executions, _ = await tables.read()
    held = Counter(row["owner"] for row in executions.values() if row["status"] in ACTIVE_NAMES)
    most = max(held[ids[node.name]] for node in slots)
    return rng.choice([node for node in slots if held[ids[node.name]] == most])


def pause_problems(run: PauseRun) -> dict[str, list[str]]:
    """The crash loop's problems, and the calls of woken nodes without their lease."""
    assert run.senders is not None
    return {
        **problems(run),
        "calls after waking": run.senders.problems(),
        "errors logged": [f"{event} x{n}" for event, n in run.errors.items()],
    }


def pause_counts(run: PauseRun) -> str:
    """The counts checked, in one line to quote."""
    assert run.senders is not None
    sent = run.senders.sent
    return (
        f"{counts(run)} pauses={run.pauses} calls_received={run.senders.calls} "
        f"calls_by_woken_nodes={len(sent)} "
        f"of_which_held={sum(s.held for s in sent)} "
        f"in_flight_at_stop={sum(s.in_flight and not s.held for s in sent)} "
        f"own_row_lease_lapsed={sum(s.lapsed and not s.in_flight for s in sent)} "
        f"by_method={dict(Counter(s.method for s in sent))} "
        f"leases_lost={run.events['lease_lost']} "
        f"leases_expired_unrenewed={run.events['leases_expired_unrenewed']} "
        f"lease_renewal_late={run.events['lease_renewal_late']}"
    )
