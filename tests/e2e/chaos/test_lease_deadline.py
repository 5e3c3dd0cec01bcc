"""Isolated from the chaos smoke: a worker whose heartbeat cannot get an answer keeps running
its handler after its lease has surely expired, while the step's next owner runs it too.

The worker knows when its lease surely expires (``AttemptState.lease_valid_until``: the
monotonic time a heartbeat was *sent* plus the lease) and the heartbeat loop means to stop
such attempts ("once the lease surely expired, stop as if lost rather than risk two owners
doing the work", worker/lease_keeping.py ``heartbeat_loop``). But that check runs only *after*
``await self.store.heartbeat_all(...)`` returns, and neither that call nor the supervisor
(worker/attempt.py ``_next_stop``, which never looks at ``lease_valid_until``) bounds it: a
heartbeat that hangs — a network partition, a half-open TCP connection to a failed-over
server, a pool waiting out its 10 s timeout for a connection while PostgreSQL restarts — lets
the handler run on for as long as the call hangs. Meanwhile the lease expires in the
database, any worker's reaper recovers the step, another worker leases it, and two owners
run the step's code at once: an unfenced side effect (an email, an upload, a ledger row)
happens twice. The fenced writes stay correct (the stale owner's result is refused), so
``check_history`` cannot see it; only the handler's own observations can.

Expected: the handler is told to stop (``ctx.cancelled()`` true / its task cancelled) by the
time the lease has surely expired, whatever the heartbeat call is doing.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from rara.worker.store import WorkerStore
from tests.e2e.chaos.handlers import TICKS
from tests.support.definitions import apply
from tests.support.runs import start
from tests.support.waiting import wait_until
from tests.support.workers import ThreadWorker

LEASE = 1.0
HANDLERS = ["tests.e2e.chaos.handlers"]


def _hang_heartbeats(monkeypatch: pytest.MonkeyPatch, hang: asyncio.Event) -> None:
    """Every heartbeat statement of the worker "partitioned" waits for ``hang`` (forever, unless
    set): the lease is no longer extended, as in a network partition."""
    real = WorkerStore.heartbeat_all

    async def hung(self: WorkerStore, *args: Any, **kwargs: Any) -> Any:
        if self.worker == "partitioned":
            await hang.wait()
        return await real(self, *args, **kwargs)

    monkeypatch.setattr(WorkerStore, "heartbeat_all", hung)


@pytest.fixture
def conn(database_url: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(database_url, autocommit=True) as connection:
        yield connection


def test_handler_stops_when_the_lease_surely_expired_even_if_heartbeats_hang(
    conn: psycopg.Connection[Any],
    database_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    TICKS.clear()
    hang = asyncio.Event()  # never set: a heartbeat that gets no answer
    _hang_heartbeats(monkeypatch, hang)
    apply(
        conn,
        "slow",
        [
            {
                "key": "s",
                "capability": "chaos.tick@1",
                "retry": {"maxAttempts": 3, "initialDelay": "1ms"},
            }
        ],
    )
    run_id = start(conn, "slow", {"seconds": 8})
    first, second = (f"{run_id}:s", 1), (f"{run_id}:s", 2)
    stuck = ThreadWorker(
        database_url,
        tmp_path,
        id="partitioned",
        handlers=HANDLERS,
        lease_seconds=LEASE,
        heartbeat_seconds=0.3,
        reaper_seconds=60.0,
    )
    stuck.start(conn)
    try:
        wait_until(lambda: first in TICKS, message="the first attempt started")
        # The lease expires in the database; another worker recovers and re-runs the step.
        rescuer = ThreadWorker(
            database_url, tmp_path, id="rescuer", handlers=HANDLERS, lease_seconds=30.0
        )
        rescuer.start(conn)
        try:
            wait_until(
                lambda: second in TICKS, timeout=15, message="the step's next attempt started"
            )
            time.sleep(0.5)
            old, new = TICKS[first], TICKS[second]
            overlap = old["last"] - new["started"]
            assert overlap <= 0, (
                f"two owners ran the step at once for {overlap:.2f}s: the partitioned "
                f"worker's handler was still running {old['last'] - old['started']:.1f}s "
                f"after its attempt began ({LEASE}s lease, heartbeats unanswered)"
            )
            assert old["last"] <= old["started"] + LEASE + 0.5
        finally:
            rescuer.stop()
    finally:
        hang.set()
        stuck.stop()


def test_a_worker_that_leases_a_step_again_keeps_tracking_the_new_attempt(
    conn: psycopg.Connection[Any],
    database_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """worker/slots.py ``start`` keys ``attempts`` by step id, and each supervisor's
    done callback pops ``self.attempts[step.id]`` without checking it is its own state. If the
    worker leases a step again while an older attempt of it is still winding down here (its
    lease was lost, unknown to it or not), the new state overwrites the old — the old attempt
    is no longer heartbeaten or told it lost its lease — and when the old supervisor ends it
    removes the *new* attempt's state: the new attempt runs on untracked, with no heartbeats
    (its lease expires under a healthy worker and another worker re-runs it), no progress
    writes, no cancel, and no release on shutdown.

    Here the older attempt is kept alive by a hanging heartbeat (the bug above); the same
    happens without it whenever a lost attempt takes a moment to unwind (``_CANCEL_WAIT``, a
    sync handler ignoring cancel, a final write retrying through an outage) while its step,
    reaped elsewhere, comes back ready and this worker leases it.
    """
    TICKS.clear()
    hang = asyncio.Event()
    _hang_heartbeats(monkeypatch, hang)
    apply(
        conn,
        "slow",
        [
            {
                "key": "s",
                "capability": "chaos.tick@1",
                "retry": {"maxAttempts": 5, "initialDelay": "1ms"},
            }
        ],
    )
    run_id = start(conn, "slow", {"seconds": 3})
    key = f"{run_id}:s"
    stuck = ThreadWorker(
        database_url,
        tmp_path,
        id="partitioned",
        handlers=HANDLERS,
        lease_seconds=LEASE,
        heartbeat_seconds=0.3,
        reaper_seconds=60.0,
    )
    stuck.start(conn)
    try:
        wait_until(lambda: (key, 1) in TICKS, message="attempt 1 started")
        # A reaper-only worker recovers the expired lease; the partitioned worker, whose lease
        # loop still works, leases the step again (attempt 2) while attempt 1 runs on.
        reaper = ThreadWorker(database_url, tmp_path, id="reaper", handlers=[])
        reaper.start(conn)
        try:
            wait_until(
                lambda: (key, 2) in TICKS, timeout=15, message="attempt 2 on the same worker"
            )
        finally:
            reaper.stop()
        hang.set()  # the partition heals; heartbeats flow again
        wait_until(lambda: "ended" in TICKS[(key, 1)], timeout=15, message="attempt 1 ended")
        time.sleep(0.3)
        assert "ended" not in TICKS[(key, 2)], "attempt 2 ended too soon for this test"
        assert stuck.worker is not None
        row = conn.execute("SELECT id FROM rara_steps WHERE run_id = %s", (run_id,)).fetchone()
        assert row is not None
        state = stuck.worker.attempts.get(row[0])
        tracked = state.step.attempt if state is not None else None
        assert tracked == 2, (
            "attempt 2 still runs on the partitioned worker, but the worker no longer tracks "
            f"it (attempts[step] = {tracked}): no heartbeats, no cancel, "
            "no release"
        )
    finally:
        hang.set()
        stuck.stop()
