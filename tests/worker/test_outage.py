"""What a heartbeat may extend, and how often it is retried while the database is away.

A heartbeat never extends a lease that is no longer alive (``rara_lease_alive``, the SQL fence
in ``rara_step_heartbeat``: expired, unless it expired during an outage and the database
returned less than its grace ago), nor one the worker has stopped as lost or is done with
(``AttemptState.holds_lease``, read when the statement is sent): a heartbeat sent before an
outage and answered after it would otherwise keep steps nobody runs away from the reaper for
another lease. A failed try that proves the database away keeps the attempts past their horizon
for the grace (``database_absent``, ``Worker._ride_outage``). The outages themselves, with real
processes and a real server stopped: tests/e2e/test_outage.py, tests/e2e/test_outage_lease.py.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest

from rara.worker.dispatch import InProcessExecutor
from rara.worker.registry import load_registry
from rara.worker.retry import (
    HEARTBEAT_MARGIN,
    HEARTBEAT_TRY_MIN,
    database_absent,
    heartbeat_delay,
    heartbeat_within,
    outage_grace,
)
from rara.worker.runner import Worker
from rara.worker.settings import WorkerSettings
from rara.worker.store import WorkerStore, make_pool
from rara.worker.vocabulary import AttemptState, Fence
from tests.support.runs import define, start
from tests.support.workers import HANDLERS

PAIRS = [("test.echo@1", "inprocess")]


@pytest.fixture
async def store(database_url: str) -> AsyncIterator[WorkerStore]:
    pool = make_pool(database_url, 2)
    await pool.open()
    try:
        yield WorkerStore(pool, "w-outage")
    finally:
        await pool.close()


@asynccontextmanager
async def _registered_worker(url: str, tmp_path: Path, worker_id: str) -> AsyncIterator[Worker]:
    """A worker (lease 30 s) whose loops do not run: the test drives its heartbeat or lease
    loop's steps itself. Its pool open and its row registered."""
    settings = WorkerSettings(
        database_url=url,
        handlers=[HANDLERS],
        id=worker_id,
        lease_seconds=30.0,
        artifact_root=tmp_path / "artifacts",
    )
    worker = Worker(settings, [InProcessExecutor(load_registry(settings.handlers))], url)
    await worker.pool.open()
    try:
        await worker.store.register(["test.echo@1"])
        yield worker
    finally:
        await worker.store.close()  # the heartbeat's own connection, if a test opened it
        await worker.pool.close()


def _expiry(conn: psycopg.Connection[Any], step_id: int) -> Any:
    row = conn.execute(
        "SELECT lease_expires_at FROM rara_steps WHERE id = %s", (step_id,)
    ).fetchone()
    assert row is not None
    return row[0]


async def test_a_heartbeat_does_not_revive_an_expired_lease(
    conn: psycopg.Connection[Any], store: WorkerStore
) -> None:
    define(conn, "expired", [{"key": "s", "capability": "test.echo@1"}])
    start(conn, "expired")
    [step] = await store.lease(PAIRS, 1, lease_seconds=0.2)
    deadline = time.monotonic() + 10
    while conn.execute(
        "SELECT lease_expires_at > now() FROM rara_steps WHERE id = %s", (step.id,)
    ).fetchone() != (False,):
        assert time.monotonic() < deadline, "the lease did not expire"
        await asyncio.sleep(0.02)
    expired_at = _expiry(conn, step.id)
    # Expired, not yet reaped: the fence (id, worker, token, running) still matches.
    answer = await store.heartbeat_all(["test.echo@1"], lambda: [(step.id, step.lease_token)], 30)
    assert answer == {}, "an expired lease was extended"
    assert _expiry(conn, step.id) == expired_at
    assert [s for s, _ in await store.reap(10, 0.0)] == [step.id]


async def test_a_heartbeat_leaves_out_attempts_lost_or_ended(
    conn: psycopg.Connection[Any], database_url: str, tmp_path: Path
) -> None:
    define(conn, "three", [{"key": "s", "capability": "test.echo@1"}])
    for _ in range(3):
        start(conn, "three")
    async with _registered_worker(database_url, tmp_path, "w-outage") as worker:
        leased = await worker.store.lease(PAIRS, 3, lease_seconds=30)
        live, lost, ended = (
            AttemptState(
                step=s,
                fence=Fence(s.id, "w-outage", s.lease_token),
                loop=asyncio.get_running_loop(),
            )
            for s in leased
        )
        lost.lose()  # stopped as lost: its local horizon passed without an answer
        ended.ended = True  # its end was given up ("its lease will expire")
        worker.attempts.update({st.step.id: st for st in (live, lost, ended)})
        before = {st.step.id: _expiry(conn, st.step.id) for st in (live, lost, ended)}
        await worker.keeping.heartbeat(within=5.0)
        after = {st.step.id: _expiry(conn, st.step.id) for st in (live, lost, ended)}
        assert after[live.step.id] > before[live.step.id]
        assert after[lost.step.id] == before[lost.step.id], "a lost attempt's lease extended"
        assert after[ended.step.id] == before[ended.step.id], "an ended attempt's lease extended"
        assert not live.lease_lost
        assert live.lease_valid_until < float("inf")


async def test_a_slow_heartbeat_answer_still_extends_the_leases(
    conn: psycopg.Connection[Any], database_url: str, tmp_path: Path
) -> None:
    """A busy server answers late (here the worker's row is held locked by another session for
    longer than the 5 s after which a try used to be abandoned): the try waits for its answer
    until the lease's horizon. Abandoning it to reconnect is what, on a loaded 2-core kind node
    during a `helm upgrade`, never got an answer while every lease of an executor pod expired."""
    define(conn, "slow", [{"key": "s", "capability": "test.echo@1"}])
    start(conn, "slow")
    async with _registered_worker(database_url, tmp_path, "w-slow") as worker:
        [step] = await worker.store.lease(PAIRS, 1, lease_seconds=30)
        held = AttemptState(
            step=step,
            fence=Fence(step.id, "w-slow", step.lease_token),
            loop=asyncio.get_running_loop(),
            lease_valid_until=time.monotonic() + 30,
        )
        worker.attempts[step.id] = held
        before = _expiry(conn, step.id)
        with psycopg.connect(database_url) as blocker:
            blocker.execute("SELECT 1 FROM rara_workers WHERE id = 'w-slow' FOR UPDATE")
            beat = asyncio.ensure_future(
                worker.keeping.heartbeat(
                    heartbeat_within(
                        time.monotonic(), worker.keeping.horizon(), worker.settings.lease_seconds
                    )
                )
            )
            with pytest.raises(TimeoutError):  # still waiting for its answer after 6 s
                await asyncio.wait_for(asyncio.shield(beat), 6.0)
            blocker.commit()
            await asyncio.wait_for(beat, 20.0)
        assert _expiry(conn, step.id) > before
        assert not held.lease_lost


def test_a_heartbeat_try_waits_until_the_earliest_horizon() -> None:
    assert heartbeat_within(1000.0, 1025.0, 30.0) == 25.0
    assert heartbeat_within(1000.0, 1000.2, 30.0) == HEARTBEAT_TRY_MIN
    assert heartbeat_within(1000.0, float("inf"), 30.0) == 30.0  # no lease held


def test_failed_heartbeats_are_retried_about_every_second_within_the_lease() -> None:
    now = 1000.0
    far = now + 50  # the earliest lease is confirmed for another 50 s
    delays = [heartbeat_delay(now, far, 60.0) for _ in range(200)]
    assert all(0.8 <= d <= 1.2 for d in delays), (min(delays), max(delays))
    # Never past the horizon less the margin, while there is time before it.
    near = now + HEARTBEAT_MARGIN + 0.5
    assert all(heartbeat_delay(now, near, 60.0) <= 0.5 for _ in range(200))
    # Inside the margin: tries a quarter of a second apart until the horizon passes.
    assert heartbeat_delay(now, now + 0.1, 60.0) == 0.25
    # A short lease: a tenth of it as the margin.
    assert heartbeat_delay(now, now + 2.0, 2.0) <= 1.8


async def test_leases_whose_answer_was_lost_are_given_back(
    conn: psycopg.Connection[Any], database_url: str, tmp_path: Path
) -> None:
    """A lease can commit and its answer never arrive (the connection dropped between the commit
    and the reply). After a failed lease the worker gives back whatever is leased in its name
    that it does not run: released at once, not left to expire a lease later for an attempt."""
    define(conn, "unheld", [{"key": "s", "capability": "test.echo@1"}])
    for _ in range(3):
        start(conn, "unheld")
    async with _registered_worker(database_url, tmp_path, "w-unheld") as worker:
        other = WorkerStore(worker.pool, "w-other")
        await other.register(["test.echo@1"])
        held, lost = await worker.store.lease(PAIRS, 2, lease_seconds=30)  # answer "lost"
        [others] = await other.lease(PAIRS, 1, lease_seconds=30)
        worker.attempts[held.id] = AttemptState(
            step=held,
            fence=Fence(held.id, "w-unheld", held.lease_token),
            loop=asyncio.get_running_loop(),
        )
        await worker.leasing.release_unheld()
        rows = {
            r[0]: r[1:]
            for r in conn.execute(
                "SELECT s.id, s.status::text, s.releases, s.leased_by, a.outcome::text "
                "FROM rara_steps s JOIN rara_attempts a "
                "ON a.step_id = s.id AND a.attempt = s.attempt WHERE s.id = ANY(%s)",
                ([held.id, lost.id, others.id],),
            )
        }
        assert rows[lost.id] == ("ready", 1, None, "released")
        assert rows[held.id] == ("running", 0, "w-unheld", "running"), "a held lease given back"
        assert rows[others.id] == ("running", 0, "w-other", "running"), "another's lease given back"


async def test_unheld_leases_are_given_back_only_between_held_back_leases(
    conn: psycopg.Connection[Any], database_url: str, tmp_path: Path
) -> None:
    """A lease into a held-back slot runs beside the lease loop (rara.worker.leasing). Giving
    back unheld leases waits until no such lease is in flight: one whose answer is in hand but
    whose attempt is not yet started must not be given back as unheld."""
    define(conn, "beside", [{"key": "s", "capability": "test.echo@1"}])
    start(conn, "beside")
    async with _registered_worker(database_url, tmp_path, "w-beside") as worker:
        async with worker.leasing.held_back_leasing:
            releasing = asyncio.create_task(worker.leasing.release_unheld())
            [step] = await worker.store.lease_held_back(PAIRS, 1, 30, None, ["team-z"])
            assert not releasing.done()  # (the lease's round trips gave it every chance)
            worker.attempts[step.id] = AttemptState(
                step=step,
                fence=Fence(step.id, "w-beside", step.lease_token),
                loop=asyncio.get_running_loop(),
            )
        await releasing
        [(status, leased_by)] = conn.execute(
            "SELECT status::text, leased_by FROM rara_steps WHERE id = %s", (step.id,)
        ).fetchall()
        assert (status, leased_by) == ("running", "w-beside")


def _alive(conn: psycopg.Connection[Any], expires: float, confirmed: float, now: float) -> bool:
    """rara_lease_alive with times in seconds from a return at 1000 s."""
    row = conn.execute(
        "SELECT rara_lease_alive(to_timestamp(%s), to_timestamp(%s), to_timestamp(1000), "
        "to_timestamp(%s))",
        (expires, confirmed, now),
    ).fetchone()
    assert row is not None
    return bool(row[0])


def test_a_lease_confirmed_before_the_return_is_alive_for_a_grace_after_it(
    conn: psycopg.Connection[Any],
) -> None:
    # A 30 s lease: its grace is 12 s after the return (a third of it, and 2 s).
    assert outage_grace(30.0) == 12.0
    assert _alive(conn, 1010, 980, 1005)  # unexpired
    assert not _alive(conn, 1040, 1010, 1041)  # confirmed after the return: its expiry only
    # Confirmed before the return, expired during the outage: alive until 1012, not after.
    assert _alive(conn, 985, 955, 1011.9)
    assert not _alive(conn, 985, 955, 1012.1)
    # Expiring within the grace: the grace; after it: its expiry.
    assert _alive(conn, 1005, 975, 1008)
    assert _alive(conn, 1025, 995, 1020)
    assert not _alive(conn, 1025, 995, 1026)
    # A lease shorter than 3 s: the grace is the lease (a later confirmation, whose answer
    # was lost, then lasts longer than any worker's horizon from before it).
    assert outage_grace(2.0) == 2.0
    assert _alive(conn, 990, 988, 1001.9)
    assert not _alive(conn, 990, 988, 1002.1)


def test_only_a_failure_that_proves_the_database_away_rides_the_outage() -> None:
    refused = psycopg.OperationalError(
        'connection failed: connection to server at "127.0.0.1", port 5432 failed: '
        "Connection refused\n\tIs the server running on that host?"
    )
    assert database_absent(refused)
    assert database_absent(psycopg.OperationalError("FATAL: the database system is shutting down"))
    for proves_nothing in (
        "server closed the connection unexpectedly",
        "connection timeout expired",
        "FATAL: the database system is starting up",
        "FATAL: the database system is in recovery mode",
        "couldn't get a connection after 5.00 sec",
    ):
        assert not database_absent(psycopg.OperationalError(proves_nothing)), proves_nothing


async def test_riding_an_outage_moves_only_the_held_attempts_horizons_and_never_back(
    conn: psycopg.Connection[Any], database_url: str, tmp_path: Path
) -> None:
    define(conn, "ride", [{"key": "s", "capability": "test.echo@1"}])
    for _ in range(3):
        start(conn, "ride")
    async with _registered_worker(database_url, tmp_path, "w-ride") as worker:
        now = time.monotonic()
        states = [
            AttemptState(
                step=s,
                fence=Fence(s.id, "w-ride", s.lease_token),
                loop=asyncio.get_running_loop(),
                lease_valid_until=now + 5,
            )
            for s in await worker.store.lease(PAIRS, 3, lease_seconds=30)
        ]
        held, lost, later = states
        lost.lose()
        later.lease_valid_until = now + 100
        worker.attempts.update({st.step.id: st for st in states})
        worker.keeping.ride_outage(now + 12)
        assert held.lease_valid_until == now + 12
        assert lost.lease_valid_until == now + 5, "a lost attempt's horizon moved"
        assert later.lease_valid_until == now + 100, "a horizon moved back"
