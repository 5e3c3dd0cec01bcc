"""Real worker processes and real signals: SIGKILL, SIGTERM, many competing workers, and a
PostgreSQL restart in the middle of a run."""

from __future__ import annotations

import signal
import time
from typing import Any

import psycopg
import pytest

from rara.pg.embedded import EmbeddedPostgres
from tests.support.definitions import apply
from tests.support.history import check_history
from tests.support.leasing import enqueue_single_step_runs
from tests.support.runs import attempts_of, define, start, steps_of, wait_run
from tests.support.waiting import wait_until
from tests.support.workers import FAST


def _leased_by(conn: psycopg.Connection[Any], run_id: int) -> str | None:
    step = steps_of(conn, run_id)[0]
    return step["leased_by"] if step["status"] == "running" else None


def test_sigkill_mid_step_recovered_after_lease_expiry(
    conn: psycopg.Connection[Any], spawn: Any
) -> None:
    define(
        conn,
        "crashy",
        [
            {
                "key": "s",
                "capability": "test.sleep@1",
                "retry": {"maxAttempts": 2, "initialDelay": "1ms"},
            }
        ],
    )
    victim = spawn("victim")
    run_id = start(conn, "crashy", {"seconds": 60, "slow_attempts": 1})
    wait_until(lambda: _leased_by(conn, run_id) == "victim", message="victim leased the step")
    spawn("rescuer")
    victim.signal(signal.SIGKILL)
    killed = time.monotonic()
    victim.wait(10)
    wait_run(conn, run_id, status="succeeded", timeout=30)
    recovery = time.monotonic() - killed
    # lease expiry + one reaper interval (jittered) + lease and run; generous for loaded CI
    assert recovery < FAST["lease_seconds"] + 1.2 * FAST["reaper_seconds"] + 2.0, recovery
    first, second = attempts_of(conn, run_id)
    assert (first["worker"], first["outcome"]) == ("victim", "lease_expired")
    assert (second["worker"], second["outcome"], second["ended_by"]) == (
        "rescuer",
        "succeeded",
        "rescuer",
    )
    check_history(conn)


def test_sigterm_releases_leases_within_the_grace(
    conn: psycopg.Connection[Any], spawn: Any
) -> None:
    grace = 1.5
    define(conn, "short", [{"key": "s", "capability": "test.sleep@1"}])
    # maxAttempts 1: a released attempt must not use up the only attempt there is.
    # A sync handler that ignores cancel: its thread cannot be stopped, yet the process exits.
    define(
        conn, "long", [{"key": "s", "capability": "test.sleep_sync@1", "retry": {"maxAttempts": 1}}]
    )
    leaving = spawn("leaving", shutdown_grace_seconds=grace, concurrency=2)
    short = start(conn, "short", {"seconds": 0.5})
    long = start(conn, "long", {"seconds": 60, "slow_attempts": 1, "ignore_cancel": True})
    wait_until(
        lambda: _leased_by(conn, short) == _leased_by(conn, long) == "leaving",
        message="both steps leased",
    )
    spawn("staying")
    leaving.signal(signal.SIGTERM)
    signalled = time.monotonic()
    assert leaving.wait(grace + 5) == 0, leaving.output()
    assert grace <= time.monotonic() - signalled < grace + 2.0
    wait_run(conn, short, status="succeeded")
    [finished] = attempts_of(conn, short)  # it finished within the grace, where it was
    assert (finished["worker"], finished["outcome"]) == ("leaving", "succeeded")
    wait_run(conn, long, status="succeeded", timeout=15)
    [step] = steps_of(conn, long)
    assert (step["attempt"], step["releases"]) == (2, 1)
    first, second = attempts_of(conn, long)
    assert (first["worker"], first["outcome"], first["ended_by"]) == (
        "leaving",
        "released",
        "leaving",
    )
    assert (second["worker"], second["outcome"]) == ("staying", "succeeded")
    assert conn.execute(
        "SELECT stopped_at IS NOT NULL FROM rara_workers WHERE id = 'leaving'"
    ).fetchone() == (True,)
    check_history(conn)


def _succeeded(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute("SELECT count(*) FROM rara_steps WHERE status = 'succeeded'").fetchone()
    return int(row[0]) if row else 0


def test_competing_workers_run_every_step_exactly_once(
    conn: psycopg.Connection[Any], spawn: Any
) -> None:
    steps, workers = 5_000, 8
    version = apply(conn, "noop", [{"key": "n", "capability": "test.noop@1"}])
    enqueue_single_step_runs(
        conn, definition="noop", version=version.version, key="n", capability="test.noop@1", n=steps
    )
    procs = [
        spawn(f"w{i}", wait=False, concurrency=8, lease_seconds=10.0, heartbeat_seconds=3.0)
        for i in range(workers)
    ]
    began = time.monotonic()
    wait_until(
        lambda: _succeeded(conn) == steps,
        timeout=120,
        interval=0.2,
        message=f"{steps} steps to succeed",
    )
    elapsed = time.monotonic() - began
    for proc in procs:
        assert proc.proc.poll() is None, proc.output()
    report = check_history(conn)
    assert report == {"steps": steps, "attempts": steps, "succeeded": steps}
    by_worker = dict(
        conn.execute("SELECT worker, count(*) FROM rara_attempts GROUP BY 1").fetchall()
    )
    assert len(by_worker) >= 2, by_worker  # they really competed
    assert conn.execute(
        "SELECT count(*) FROM rara_runs WHERE status <> 'succeeded'"
    ).fetchone() == (0,)
    print(f"{steps} steps, {workers} workers: {elapsed:.1f}s incl. start-up; {by_worker}")


def test_postgres_restart_mid_run(
    conn: psycopg.Connection[Any], spawn: Any, pg_server: EmbeddedPostgres | None, database_url: str
) -> None:
    if pg_server is None:
        pytest.skip("needs the embedded test server (RARA_TEST_DATABASE_URL is set)")
    steps = 300
    conn.execute("CREATE TABLE test_ledger (key text PRIMARY KEY, executions integer NOT NULL)")
    version = apply(
        conn,
        "ledger",
        [
            {
                "key": "l",
                "capability": "test.ledger@1",
                "retry": {"maxAttempts": 20, "initialDelay": "50ms", "maxDelay": "1s"},
            }
        ],
    )
    enqueue_single_step_runs(
        conn,
        definition="ledger",
        version=version.version,
        key="l",
        capability="test.ledger@1",
        n=steps,
        max_attempts=20,
        initial_ms=50,
        max_ms=1000,
        input={"ledger_dsn": database_url, "seconds": 0.02},
    )
    procs = [
        spawn(f"pg{i}", concurrency=4, lease_seconds=8.0, heartbeat_seconds=1.0) for i in range(2)
    ]
    wait_until(lambda: _succeeded(conn) >= steps // 4, timeout=60, message="a quarter done")
    pg_server.restart()

    def done() -> bool:
        try:
            with psycopg.connect(database_url, autocommit=True) as fresh:
                return _succeeded(fresh) == steps
        except psycopg.OperationalError:
            return False

    wait_until(done, timeout=90, interval=0.2, message="every step to succeed after the restart")
    for proc in procs:
        assert proc.proc.poll() is None, proc.output()  # survived the restart
    with psycopg.connect(database_url, autocommit=True) as fresh:
        check_history(fresh)
        ledger = fresh.execute("SELECT count(*), max(executions) FROM test_ledger").fetchone()
        assert ledger == (steps, 1)  # every step's effect exactly once
    # and the outage was real: the workers saw it and rode it out
    assert any("listen connection lost" in p.log.read_text(errors="replace") for p in procs)
