"""A worker sends its gRPC steps on one Session per executor that serves it, and an Execute
call each to one that does not; an executor killed mid-session costs its jobs what a broken
Execute call costs (a retryable failure, the step retried), nothing more."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest

from rara.pg import workers
from rara.worker.grpc_executor import GrpcExecutor
from tests.support.executors import executor_process, free_address, start_executor
from tests.support.runs import define, start, steps_of, wait_run
from tests.support.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
REMOTE = "test.hang@1"  # served only by the executor: listed once the worker heard from it


def _served(conn: psycopg.Connection[Any]) -> None:
    wait_until(
        lambda: REMOTE in workers.capabilities(conn, alive_seconds=30),
        timeout=30,
        message="the executor's capabilities served",
    )


def _wide(conn: psycopg.Connection[Any], name: str, n: int, capability: str, **step: Any) -> None:
    define(
        conn,
        name,
        [{"key": f"s{i}", "capability": capability, "executor": "grpc", **step} for i in range(n)],
    )


def _old_executor(address: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.support.old_executor", address],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


async def test_the_protocol_follows_what_the_executor_says(tmp_path: Path) -> None:
    new, old = free_address(), free_address()
    with executor_process(new, tmp_path):
        proc = _old_executor(old)
        try:
            both = GrpcExecutor([new, old], token=None)
            off = GrpcExecutor([new], token=None, sessions=False)
            try:
                await _until_live(both)
                await _until_live(off)
                assert [e.client.protocol for e in both._endpoints] == ["session", "execute"]
                assert off._endpoints[0].client.protocol == "execute"
            finally:
                await both.close()
                await off.close()
        finally:
            proc.terminate()
            proc.wait(30)


async def _until_live(executor: GrpcExecutor) -> None:
    async with asyncio.timeout(30):
        while True:
            await executor.refresh()
            if all(e["live"] for e in executor.describe()):
                return
            await asyncio.sleep(0.1)


@pytest.mark.parametrize("sessions", [True, False])
def test_many_steps_on_one_executor(
    conn: psycopg.Connection[Any], spawn: Any, tmp_path: Path, sessions: bool
) -> None:
    address = free_address()
    with executor_process(address, tmp_path):
        spawn("w1", executor_endpoint=address, concurrency=16, executor_sessions=sessions)
        _served(conn)
        _wide(conn, "wide", 40, "test.echo@1", retry={"maxAttempts": 1})
        run_id = start(conn, "wide", {"text": "hi"})
        wait_run(conn, run_id, timeout=60, status="succeeded")
    steps = steps_of(conn, run_id)
    assert all(s["attempt"] == 1 for s in steps), steps
    assert all(s["result"]["input"] == {"text": "hi"} for s in steps), steps


def test_an_executor_without_sessions_gets_execute_calls(
    conn: psycopg.Connection[Any], spawn: Any
) -> None:
    """Against an old executor (Session unimplemented) a session would fail every attempt;
    with one attempt allowed, the run succeeding says the worker called Execute."""
    address = free_address()
    proc = _old_executor(address)
    try:
        spawn("w1", executor_endpoint=address, concurrency=8)
        _served(conn)
        _wide(conn, "old", 8, "test.echo@1", retry={"maxAttempts": 1})
        run_id = start(conn, "old", {"text": "hi"})
        wait_run(conn, run_id, timeout=60, status="succeeded")
    finally:
        proc.terminate()
        proc.wait(30)


def test_sigkill_of_the_executor_mid_session_retries_its_steps(
    conn: psycopg.Connection[Any], spawn: Any, tmp_path: Path
) -> None:
    address = free_address()
    spawn("w1", executor_endpoint=address, concurrency=8)
    _wide(conn, "killed", 4, "test.sleep@1", retry={"maxAttempts": 3, "initialDelay": "100ms"})
    first = start_executor(address, tmp_path)
    try:
        _served(conn)
        run_id = start(conn, "killed", {"seconds": 2.0, "steps": 4})
        wait_until(
            lambda: (
                conn.execute(
                    "SELECT count(*) FROM rara_attempts WHERE run_id = %s", (run_id,)
                ).fetchone()
                == (4,)
            ),
            timeout=30,
            message="every step's first attempt sent",
        )
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(30)
    with executor_process(address, tmp_path):
        wait_run(conn, run_id, timeout=60, status="succeeded")
    attempts = conn.execute(
        "SELECT attempt, outcome::text FROM rara_attempts WHERE run_id = %s ORDER BY step_id, "
        "attempt",
        (run_id,),
    ).fetchall()
    ends = {outcome for attempt, outcome in attempts if attempt == 1}
    assert ends <= {"failed", "released", "succeeded"}, attempts
    assert [o for _, o in attempts].count("succeeded") == 4, attempts
