"""Retries with backoff inside their jitter bounds, terminal failures, timeouts."""

from __future__ import annotations

from typing import Any

import psycopg

from tests.support.runs import attempts_of, define, start, steps_of, wait_run
from tests.support.workers import FAST


def test_backoff_within_jitter_bounds_then_failed_for_good(
    conn: psycopg.Connection[Any], thread_worker: Any
) -> None:
    define(
        conn,
        "flaky",
        [
            {
                "key": "f",
                "capability": "test.fail@1",
                "retry": {
                    "maxAttempts": 4,
                    "initialDelay": "300ms",
                    "maxDelay": "1s",
                    "backoffCoefficient": 2,
                },
            }
        ],
    )
    thread_worker(jitter=0.2)
    run_id = start(conn, "flaky")
    wait_run(conn, run_id, status="failed", timeout=30)
    attempts = attempts_of(conn, run_id)
    assert [a["outcome"] for a in attempts] == ["failed"] * 4
    # min(300ms * 2^(n-1), 1s), jittered down by up to 20%; the next lease comes when the
    # backoff ends (the worker sleeps until the next available step; a poll at the latest).
    for prev, nxt, delay in zip(attempts, attempts[1:], (0.3, 0.6, 1.0), strict=False):
        gap = (nxt["started_at"] - prev["ended_at"]).total_seconds()
        assert delay * 0.8 - 0.001 <= gap <= delay + FAST["poll_seconds"] + 0.2, (gap, delay)
    error = steps_of(conn, run_id)[0]["error"]
    assert error["code"] == "FLAKY"
    assert error["retryable"] is True
    assert error["type"] == "rara.errors.RetryableError"
    assert error["chain"] == [{"type": "KeyError", "message": "'root cause'"}]
    assert "raise RetryableError" in error["traceback"]


def test_terminal_error_is_never_retried(conn: psycopg.Connection[Any], thread_worker: Any) -> None:
    define(
        conn,
        "bad",
        [
            {
                "key": "f",
                "capability": "test.fail@1",
                "retry": {"maxAttempts": 5, "initialDelay": "10ms"},
            }
        ],
    )
    thread_worker()
    run_id = start(conn, "bad", {"terminal": True})
    wait_run(conn, run_id, status="failed")
    [step] = steps_of(conn, run_id)
    assert step["attempt"] == 1
    assert (step["error"]["code"], step["error"]["retryable"]) == ("BAD_INPUT", False)


def test_any_other_exception_is_retried(conn: psycopg.Connection[Any], thread_worker: Any) -> None:
    define(
        conn,
        "plain",
        [
            {
                "key": "f",
                "capability": "test.fail@1",
                "retry": {"maxAttempts": 3, "initialDelay": "10ms"},
            }
        ],
    )
    thread_worker()
    run_id = start(conn, "plain", {"plain": True, "fail": 1})
    wait_run(conn, run_id, status="succeeded")
    first, second = attempts_of(conn, run_id)
    assert first["error"]["code"] == "HANDLER_ERROR"
    assert first["error"]["type"] == "ValueError"
    assert second["outcome"] == "succeeded"


def test_timeout_fails_the_attempt_retryably(
    conn: psycopg.Connection[Any], thread_worker: Any
) -> None:
    define(
        conn,
        "slow",
        [
            {
                "key": "s",
                "capability": "test.sleep@1",
                "timeout": "300ms",
                "retry": {"maxAttempts": 2, "initialDelay": "10ms"},
            }
        ],
    )
    thread_worker()
    run_id = start(conn, "slow", {"seconds": 30, "ignore_cancel": True})
    wait_run(conn, run_id, status="failed", timeout=15)
    attempts = attempts_of(conn, run_id)
    assert [a["outcome"] for a in attempts] == ["timed_out", "timed_out"]
    for a in attempts:
        assert a["error"]["code"] == "TIMEOUT"
        assert a["error"]["retryable"] is True
        assert 0.3 <= (a["ended_at"] - a["started_at"]).total_seconds() < 1.5


def test_heartbeat_timeout_fails_a_silent_handler(
    conn: psycopg.Connection[Any], thread_worker: Any
) -> None:
    define(
        conn,
        "quiet",
        [
            {
                "key": "q",
                "capability": "test.silent@1",
                "heartbeatTimeout": "400ms",
                "retry": {"maxAttempts": 1},
            }
        ],
    )
    thread_worker()
    run_id = start(conn, "quiet", {"seconds": 30})
    wait_run(conn, run_id, status="failed", timeout=15)
    [attempt] = attempts_of(conn, run_id)
    assert attempt["outcome"] == "timed_out"
    assert attempt["error"]["code"] == "HEARTBEAT_TIMEOUT"
    assert 0.4 <= (attempt["ended_at"] - attempt["started_at"]).total_seconds() < 1.5
