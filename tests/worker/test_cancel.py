"""Cancel reaches running handlers (NOTIFY at once, else the next heartbeat answer) and
cancels waiting steps at once."""

from __future__ import annotations

import time
from typing import Any

import psycopg
import pytest

from rara.runs import cancel_run
from tests.support.runs import attempts_of, define, start, steps_of, wait_run
from tests.support.waiting import wait_until
from tests.support.workers import FAST
from tests.worker.handlers import SEEN


def _cancel_when_running(conn: psycopg.Connection[Any], run_id: int) -> float:
    wait_until(lambda: steps_of(conn, run_id)[0]["status"] == "running", message="step running")
    wait_until(lambda: f"{run_id}:s" in SEEN, message="handler started")
    t0 = time.monotonic()
    assert cancel_run(conn, run_id)
    return t0


@pytest.mark.parametrize(("listen", "within"), [(True, 0.2), (False, FAST["heartbeat_seconds"])])
def test_cancel_reaches_a_running_handler(
    conn: psycopg.Connection[Any], thread_worker: Any, listen: bool, within: float
) -> None:
    define(
        conn,
        "long",
        [
            {"key": "s", "capability": "test.sleep@1"},
            {"key": "later", "capability": "test.echo@1", "dependsOn": ["s"]},
        ],
    )
    thread_worker(listen=listen)
    run_id = start(conn, "long", {"seconds": 60})
    t0 = _cancel_when_running(conn, run_id)
    later = steps_of(conn, run_id)[1]
    assert later["status"] == "cancelled"  # a waiting step is cancelled at once
    wait_until(lambda: "cancelled" in SEEN[f"{run_id}:s"], timeout=5, message="handler saw cancel")
    assert SEEN[f"{run_id}:s"]["cancelled"] - t0 <= within + 0.15
    wait_run(conn, run_id, status="cancelled", timeout=5)
    [attempt] = attempts_of(conn, run_id)
    assert (attempt["outcome"], attempt["ended_by"]) == ("cancelled", attempt["worker"])


def test_cancel_stops_a_handler_that_ignores_it(
    conn: psycopg.Connection[Any], thread_worker: Any
) -> None:
    define(conn, "stubborn", [{"key": "s", "capability": "test.sleep@1"}])
    thread_worker()
    run_id = start(conn, "stubborn", {"seconds": 60, "ignore_cancel": True})
    t0 = _cancel_when_running(conn, run_id)
    wait_run(conn, run_id, status="cancelled", timeout=5)
    assert time.monotonic() - t0 < FAST["cancel_grace_seconds"] + 1.0


def test_cancel_reaches_a_sync_handler_thread(
    conn: psycopg.Connection[Any], thread_worker: Any
) -> None:
    define(conn, "threaded", [{"key": "s", "capability": "test.sleep_sync@1"}])
    thread_worker()
    run_id = start(conn, "threaded", {"seconds": 60})
    t0 = _cancel_when_running(conn, run_id)
    wait_until(lambda: "cancelled" in SEEN[f"{run_id}:s"], timeout=5, message="thread saw cancel")
    # Within a heartbeat or two, not at the end of the 60 s sleep (0.1-0.3 s on an idle machine;
    # a bound, not a benchmark: three test processes share two cores under make test).
    assert SEEN[f"{run_id}:s"]["cancelled"] - t0 <= 2.0
    wait_run(conn, run_id, status="cancelled", timeout=5)


def test_cancel_of_a_waiting_run(conn: psycopg.Connection[Any]) -> None:
    define(
        conn,
        "idle",
        [
            {"key": "a", "capability": "test.echo@1"},
            {"key": "b", "capability": "test.echo@1", "dependsOn": ["a"]},
        ],
    )
    run_id = start(conn, "idle")
    assert cancel_run(conn, run_id)
    assert [s["status"] for s in steps_of(conn, run_id)] == ["cancelled", "cancelled"]
    assert wait_run(conn, run_id) == "cancelled"
