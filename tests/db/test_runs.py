"""Runs: idempotent creation under a race, aggregation of step outcomes into the run."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import psycopg
import pytest

from rara.errors import CapabilityUnavailable, InputInvalid, NotFound
from rara.runs import cancel_run, start_run
from rara.states import AttemptOutcome, StepStatus
from rara.worker.store import end_many
from rara.worker.vocabulary import Ending, Fence, LeasedStep
from tests.support.definitions import apply
from tests.support.leasing import lease_now

CHAIN = [
    {"key": "a", "capability": "x@1", "retry": {"maxAttempts": 1}},
    {"key": "b", "capability": "x@1", "dependsOn": ["a"]},
    {"key": "c", "capability": "x@1", "dependsOn": ["b"]},
    {"key": "side", "capability": "x@1"},
]


def test_idempotent_run_creation_under_a_race(
    conn: psycopg.Connection[Any], database_url: str
) -> None:
    apply(conn, "race", CHAIN)
    clients = 24
    barrier = threading.Barrier(clients)
    results: list[int] = []
    lock = threading.Lock()

    def start() -> None:
        with psycopg.connect(database_url, autocommit=True) as own:
            barrier.wait()
            run = start_run(own, "race", idempotency_key="nightly-1", queue_anyway=True)
            with lock:
                results.append(run.run_id)

    threads = [threading.Thread(target=start) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert len(results) == clients
    assert len(set(results)) == 1
    assert conn.execute("SELECT count(*) FROM rara_runs").fetchone() == (1,)
    assert conn.execute("SELECT count(*) FROM rara_steps").fetchone() == (len(CHAIN),)


def test_start_refuses_unserved_capabilities_and_bad_input(conn: psycopg.Connection[Any]) -> None:
    apply(conn, "caps", [{"key": "a", "capability": "x@1"}, {"key": "b", "capability": "y@2"}])
    conn.execute("INSERT INTO rara_workers (id, capabilities) VALUES ('w', '{x@1}')")
    with pytest.raises(CapabilityUnavailable, match="y@2"):
        start_run(conn, "caps")
    with pytest.raises(NotFound, match="nope"):
        start_run(conn, "nope", queue_anyway=True)
    with pytest.raises(InputInvalid, match="JSON object"):
        start_run(conn, "caps", input=[1, 2], queue_anyway=True)  # type: ignore[arg-type]
    assert conn.execute("SELECT count(*) FROM rara_runs").fetchone() == (0,)


def _lease(conn: psycopg.Connection[Any]) -> dict[str, LeasedStep]:
    rows = lease_now(conn, ["x@1"], worker="w", limit=100, lease_seconds=60)
    return {r.key: r for r in rows}


def _end(url: str, step: LeasedStep, outcome: AttemptOutcome, **ending: Any) -> StepStatus | None:
    """One attempt's end on the path the worker's batcher takes (``end_many``)."""

    async def end() -> StepStatus | None:
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as aconn:
            [status] = await end_many(
                aconn,
                [Ending(Fence(step.id, "w", step.lease_token), step.run_id, outcome, **ending)],
            )
            return status

    return asyncio.run(end())


def _statuses(conn: psycopg.Connection[Any], run_id: int) -> dict[str, str]:
    return dict(
        conn.execute(
            "SELECT key, status::text FROM rara_steps WHERE run_id = %s", (run_id,)
        ).fetchall()
    )


def _run_status(conn: psycopg.Connection[Any], run_id: int) -> str:
    row = conn.execute("SELECT status::text FROM rara_runs WHERE id = %s", (run_id,)).fetchone()
    assert row is not None
    return str(row[0])


def test_all_steps_succeed_run_succeeds(conn: psycopg.Connection[Any], database_url: str) -> None:
    apply(conn, "ok", CHAIN)
    run = start_run(conn, "ok", queue_anyway=True).run_id
    assert _run_status(conn, run) == "pending"
    for _ in range(3):  # a, side; then b; then c
        leased = _lease(conn)
        assert _run_status(conn, run) == "running"
        for step in leased.values():
            assert _end(database_url, step, AttemptOutcome.SUCCEEDED, result={"ok": True})
    assert set(_statuses(conn, run).values()) == {"succeeded"}
    assert _run_status(conn, run) == "succeeded"


def test_terminal_failure_fails_run_and_cancels_dependants(
    conn: psycopg.Connection[Any], database_url: str
) -> None:
    apply(conn, "bad", CHAIN)
    run = start_run(conn, "bad", queue_anyway=True).run_id
    leased = _lease(conn)
    status = _end(
        database_url,
        leased["a"],
        AttemptOutcome.FAILED,
        error={"code": "X", "message": "boom"},
        retryable=True,
        jitter=0.0,
    )
    assert status == "failed"  # maxAttempts 1: retryable but no attempts left
    assert _statuses(conn, run) == {
        "a": "failed",
        "b": "cancelled",
        "c": "cancelled",
        "side": "running",
    }
    assert _run_status(conn, run) == "running"  # the independent branch still runs
    _end(database_url, leased["side"], AttemptOutcome.SUCCEEDED, result=None)
    assert _run_status(conn, run) == "failed"


def test_cancel_cancels_waiting_steps_and_flags_running(
    conn: psycopg.Connection[Any], database_url: str
) -> None:
    apply(conn, "cx", CHAIN)
    run = start_run(conn, "cx", queue_anyway=True).run_id
    leased = _lease(conn)
    assert cancel_run(conn, run)
    assert _statuses(conn, run) == {
        "a": "running",
        "b": "cancelled",
        "c": "cancelled",
        "side": "running",
    }
    flags = conn.execute(
        "SELECT key FROM rara_steps WHERE run_id = %s AND cancel_requested", (run,)
    ).fetchall()
    assert sorted(k for (k,) in flags) == ["a", "side"]
    for step in leased.values():
        assert _end(database_url, step, AttemptOutcome.CANCELLED)
    assert _run_status(conn, run) == "cancelled"
    assert not cancel_run(conn, run)  # already ended


def test_cancel_of_pending_run(conn: psycopg.Connection[Any]) -> None:
    apply(conn, "cp", CHAIN)
    run = start_run(conn, "cp", queue_anyway=True).run_id
    assert cancel_run(conn, run)
    assert _run_status(conn, run) == "cancelled"
    assert set(_statuses(conn, run).values()) == {"cancelled"}


def test_deleting_a_run_deletes_its_steps_and_their_attempt_history(
    conn: psycopg.Connection[Any],
) -> None:
    """rara_attempts has no foreign key (migration 0004: the lease, its only writer, inserts
    for rows it has just updated); a trigger keeps the cascade the key gave."""
    apply(conn, "two", [{"key": "a", "capability": "x@1"}, {"key": "b", "capability": "x@1"}])
    keep = start_run(conn, "two", queue_anyway=True).run_id
    gone = start_run(conn, "two", queue_anyway=True).run_id
    _lease(conn)
    assert conn.execute("SELECT count(*) FROM rara_attempts").fetchone() == (4,)
    conn.execute("DELETE FROM rara_runs WHERE id = %s", (gone,))
    left = conn.execute("SELECT DISTINCT run_id FROM rara_attempts").fetchall()
    assert left == [(keep,)]
    assert conn.execute("SELECT count(*) FROM rara_attempts").fetchone() == (2,)
