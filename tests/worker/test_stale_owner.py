"""A worker whose lease expired and was taken over can write nothing more: not the result,
not a failure, not a heartbeat, not progress, not a checkpoint, not a release."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest

from rara.states import AttemptOutcome
from rara.worker.store import WorkerStore, make_pool
from rara.worker.vocabulary import Ending, Fence
from tests.support.history import check_history
from tests.support.runs import attempts_of, define, start, steps_of
from tests.support.waiting import wait_until, wait_until_async
from tests.worker.handlers import SEEN

PAIRS = [("test.echo@1", "inprocess")]
QUICK_RETRY = {"maxAttempts": 3, "initialDelay": "1ms", "maxDelay": "1ms"}


@pytest.fixture
async def stores(database_url: str) -> AsyncIterator[tuple[WorkerStore, WorkerStore]]:
    pool = make_pool(database_url, 4)
    await pool.open()
    try:
        yield WorkerStore(pool, "old-owner"), WorkerStore(pool, "new-owner")
    finally:
        await pool.close()


async def test_stale_owner_writes_nothing(
    conn: psycopg.Connection[Any], stores: tuple[WorkerStore, WorkerStore]
) -> None:
    old, new = stores
    define(conn, "stale", [{"key": "s", "capability": "test.echo@1", "retry": QUICK_RETRY}])
    run_id = start(conn, "stale")
    [mine] = await old.lease(PAIRS, 5, lease_seconds=0.2)

    async def reaped() -> bool:
        return bool(await new.reap(10, 0.0))

    await wait_until_async(reaped, timeout=10, message="the stale attempt reaped")
    taken: list[Any] = []

    async def leased() -> bool:
        taken.extend(await new.lease(PAIRS, 5, lease_seconds=30))
        return bool(taken)

    await wait_until_async(leased, timeout=10, message="the step leased again")
    stale = Fence(mine.id, "old-owner", mine.lease_token)
    token = mine.lease_token
    assert await old.end_many(
        [Ending(stale, run_id, AttemptOutcome.SUCCEEDED, result={"late": True})]
    ) == [None]
    assert await old.end_many(
        [
            Ending(
                stale, run_id, AttemptOutcome.FAILED, error={"code": "X"}, retryable=True, jitter=0
            )
        ]
    ) == [None]
    assert await old.end_many([Ending(stale, run_id, AttemptOutcome.CANCELLED)]) == [None]
    assert await old.heartbeat_all(["test.echo@1"], lambda: [(mine.id, token)], 30) == {}
    assert await old.write_progress([(mine.id, token, 1, 0.5, "late", {})]) == set()
    assert await old.write_checkpoint(mine.id, token, 1, {"late": True}, None) is False
    assert await old.release([(mine.id, token)]) == []

    assert conn.execute("SELECT count(*) FROM rara_events").fetchone() == (0,)
    assert conn.execute("SELECT count(*) FROM rara_checkpoints").fetchone() == (0,)
    [step] = steps_of(conn, run_id)
    assert (step["status"], step["leased_by"], step["result"]) == ("running", "new-owner", None)
    assert await new.end_many(
        [
            Ending(
                Fence(mine.id, "new-owner", taken[0].lease_token),
                run_id,
                AttemptOutcome.SUCCEEDED,
                result={"ok": 1},
            )
        ]
    ) == ["succeeded"]
    first, second = attempts_of(conn, run_id)
    assert (first["outcome"], first["ended_by"]) == ("lease_expired", "reaper:new-owner")
    assert (second["outcome"], second["ended_by"]) == ("succeeded", "new-owner")
    check_history(conn)


def test_running_worker_stops_a_handler_whose_lease_was_taken(
    conn: psycopg.Connection[Any], thread_worker: Any, database_url: str
) -> None:
    """The heartbeat answer misses the attempt: the handler is stopped, nothing is written."""
    define(conn, "taken", [{"key": "s", "capability": "test.sleep@1", "retry": QUICK_RETRY}])
    worker = thread_worker()
    run_id = start(conn, "taken", {"seconds": 60})
    wait_until(lambda: f"{run_id}:s" in SEEN, message="handler started")
    # Another owner takes the step over behind the worker's back (as after a partition).
    conn.execute(
        "UPDATE rara_steps SET leased_by = 'intruder', "
        "lease_expires_at = now() + interval '1 hour' WHERE run_id = %s",
        (run_id,),
    )
    assert worker.worker is not None
    wait_until(lambda: not worker.worker.attempts, timeout=5, message="attempt stopped")
    for _ in range(2):  # two more worker heartbeats: time for a wrong write to show up
        beat = conn.execute("SELECT heartbeat_at FROM rara_workers").fetchone()
        wait_until(
            lambda beat=beat: (
                conn.execute("SELECT heartbeat_at FROM rara_workers").fetchone() != beat
            ),
            message="a heartbeat",
        )
    [step] = steps_of(conn, run_id)
    assert (step["status"], step["leased_by"]) == ("running", "intruder")
    [attempt] = attempts_of(conn, run_id)
    assert attempt["outcome"] == "running"
