"""An executor that starts after its worker (a restarted or scaled-from-zero GPU pod) becomes
servable within seconds: the worker's client reconnects within about a second, and the worker
writes the new capabilities at once instead of at its next heartbeat (that took ~16 s;
bench/servable_latency.py measures it)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

import psycopg

from rara.pg import workers
from rara.runs import start_run
from tests.support.executors import free_address, start_executor
from tests.support.runs import define
from tests.support.waiting import wait_until

REMOTE = "test.hang@1"  # served only by the executor's conformance plugins


def test_a_late_executor_is_servable_within_seconds(
    conn: psycopg.Connection[Any], spawn: Any, tmp_path: Path
) -> None:
    address = free_address()
    # The worker's heartbeat is long here, so only the change itself can tell the database.
    spawn("w1", executor_endpoint=address, heartbeat_seconds=20, lease_seconds=60)
    define(conn, "late", [{"key": "a", "capability": REMOTE, "executor": "grpc"}])
    assert REMOTE not in workers.capabilities(conn, alive_seconds=30)
    executor = start_executor(address, tmp_path)
    try:
        started = time.monotonic()
        wait_until(
            lambda: REMOTE in workers.capabilities(conn, alive_seconds=30),
            timeout=12,
            message="the executor's capability served (was ~16 s before the fix)",
        )
        print(f"servable {time.monotonic() - started:.2f} s after the executor started")
        assert start_run(conn, "late").created
    finally:
        executor.terminate()
        executor.wait(30)


def test_an_executor_down_when_its_job_is_sent_costs_no_retry(
    conn: psycopg.Connection[Any], spawn: Any, tmp_path: Path
) -> None:
    """The worker still believes its executor alive (its last answer is recent) when the
    executor dies and a step arrives: the call finds nobody, and the worker releases the lease
    (NotStarted) instead of failing the attempt — an executor's restart under chaos used to
    spend a retry each time, and could exhaust a step's attempts."""
    address = free_address()

    def executor() -> subprocess.Popen[bytes]:
        return start_executor(address, tmp_path)

    first = executor()
    try:
        # A long refresh: nothing but the failed call tells the worker its executor went away.
        worker = spawn("w1", executor_endpoint=address, executor_refresh_seconds=600)
        define(
            conn,
            "remote",
            [
                {
                    "key": "a",
                    "capability": "test.echo@1",
                    "executor": "grpc",
                    "retry": {"maxAttempts": 1},
                }
            ],
        )
        # (a capability that only the executor serves: test.echo@1 is also in-process, so it
        # is listed before the worker has heard from the executor at all)
        wait_until(
            lambda: REMOTE in workers.capabilities(conn, alive_seconds=30),
            timeout=20,
            message="the executor's capabilities served",
        )
    finally:
        first.kill()
        first.wait(30)
    run_id = start_run(conn, "remote", input={"text": "hi"}).run_id
    try:
        wait_until(
            lambda: (
                conn.execute(
                    "SELECT count(*) FROM rara_attempts WHERE run_id = %s", (run_id,)
                ).fetchone()[0]
                >= 1
            ),  # type: ignore[index]
            timeout=30,
            message="the step leased and its call tried",
        )
    except TimeoutError as exc:
        raise AssertionError(f"{exc}; the worker said:\n{worker.output()}") from None
    second = executor()
    try:
        wait_until(
            lambda: (
                conn.execute(
                    "SELECT status::text FROM rara_runs WHERE id = %s", (run_id,)
                ).fetchone()
                == ("succeeded",)
            ),
            timeout=30,
            message="the run done once the executor is back",
        )
    finally:
        second.terminate()
        second.wait(30)
    outcomes = [
        row[0]
        for row in conn.execute(
            "SELECT outcome::text FROM rara_attempts WHERE run_id = %s ORDER BY attempt", (run_id,)
        ).fetchall()
    ]
    assert outcomes[0] == "released"  # not failed: maxAttempts 1 would have ended the run
    assert outcomes[-1] == "succeeded"
