"""Concurrent ends never deadlock (issue 30): batches of ends (rara_step_end_many,
db/functions/lease.sql) that share runs, map steps and dependants take their rows in one order
— every step row the batch writes, in id order, then the runs — so no two wait on each other
in a cycle.

Driven as a fleet ends attempts: one dealer leases every ready step of many runs and deals
them, shuffled, to several connections, which end their shares at once (successes, failures
for good and cancels mixed), round after round for a bounded time. A deadlock is retried as
the worker does (its batch rolls back whole); the test counts them: in the exceptions and in
the server's log."""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

from rara.runs import start_run
from rara.states import AttemptOutcome
from rara.worker.store import end_many
from rara.worker.vocabulary import Ending, Fence, LeasedStep
from tests.support.definitions import apply
from tests.support.leasing import lease_now

ENDERS = 4  # connections ending batches at once
RUNS = 8  # runs started per wave
SECONDS = 15.0  # how long the ends are driven (stops early at a deadlock)
CAPABILITIES = ["x@1", "c@1", "j@1"]
ONCE = {"maxAttempts": 1}
# Four parallel steps, a map over the input (children ended in the same batches as the
# steps), and two joins every parallel step unblocks: one of them also waits for the map, so
# the map's end (succeeded or failed) writes a row the parallel steps' ends write too.
STEPS = [
    *({"key": f"a{i}", "capability": "x@1", "retry": ONCE} for i in range(4)),
    {"key": "m", "capability": "c@1", "map": {"over": "input.items"}, "retry": ONCE},
    {"key": "j1", "capability": "j@1", "dependsOn": ["a0", "a1", "a2", "a3", "m"], "retry": ONCE},
    {"key": "j2", "capability": "j@1", "dependsOn": ["a0", "a1", "a2", "a3"], "retry": ONCE},
]


def _ending(step: LeasedStep, rng: random.Random) -> Ending:
    fence = Fence(step.id, "w", step.lease_token)
    roll = rng.random()
    if roll < 0.7:
        return Ending(fence, step.run_id, AttemptOutcome.SUCCEEDED, {"n": step.id})
    if roll < 0.9:
        return Ending(
            fence, step.run_id, AttemptOutcome.FAILED, error={"code": "BOOM"}, retryable=False
        )
    return Ending(fence, step.run_id, AttemptOutcome.CANCELLED)


def _server_log(conn: psycopg.Connection[Any]) -> Path | None:
    """The embedded server's log (rara.pg.embedded: ``server.log`` beside its data
    directory); None for a server the tests did not start."""
    [[data]] = conn.execute("SELECT current_setting('data_directory')").fetchall()
    log = Path(str(data)).parent / "server.log"
    return log if log.is_file() else None


async def _drive(
    url: str, conn: psycopg.Connection[Any], deadline: float, rng: random.Random
) -> tuple[int, int]:
    """Waves of runs ended by ENDERS connections at once; (batches ended, deadlocks seen)."""
    enders = [await psycopg.AsyncConnection.connect(url, autocommit=True) for _ in range(ENDERS)]
    batches = deadlocks = 0

    async def end(aconn: psycopg.AsyncConnection[Any], batch: list[Ending]) -> None:
        nonlocal batches, deadlocks
        while True:
            try:
                await end_many(aconn, batch)
                batches += 1
                return
            except psycopg.errors.DeadlockDetected:
                deadlocks += 1  # rolled back whole: ended again, as the worker does

    try:
        while time.monotonic() < deadline and not deadlocks:
            for _ in range(RUNS):
                start_run(conn, "fanin", input={"items": list(range(3))}, queue_anyway=True)
            while time.monotonic() < deadline and not deadlocks:
                leased = lease_now(conn, CAPABILITIES, worker="w", limit=500)
                if not leased:
                    break
                rng.shuffle(leased)
                shares = [leased[i::ENDERS] for i in range(ENDERS)]
                await asyncio.gather(
                    *(
                        end(aconn, [_ending(step, rng) for step in share])
                        for aconn, share in zip(enders, shares, strict=True)
                        if share
                    )
                )
    finally:
        for aconn in enders:
            await aconn.close()
    return batches, deadlocks


@pytest.mark.timeout(120)
def test_concurrent_batches_of_ends_never_deadlock(
    conn: psycopg.Connection[Any], database_url: str
) -> None:
    apply(conn, "fanin", STEPS)
    log = _server_log(conn)
    logged_before = log.stat().st_size if log else 0

    batches, deadlocks = asyncio.run(
        _drive(database_url, conn, time.monotonic() + SECONDS, random.Random(30))
    )

    logged = ""
    if log is not None:
        with log.open(errors="replace") as f:
            f.seek(logged_before)
            logged = f.read()
    in_log = logged.count("deadlock detected")
    print(
        f"{batches} batches ended by {ENDERS} connections at once: {deadlocks} deadlocks, "
        f"{in_log} in the server log"
    )
    assert batches > 0
    assert in_log == 0, logged[logged.index("deadlock detected") :][:3000]
    assert deadlocks == 0
