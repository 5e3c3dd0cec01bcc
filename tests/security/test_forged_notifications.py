"""NOTIFY is a wake-up, never an authority: any login may send any payload on any channel.
Before, `NOTIFY rara_cancel, '<step id>'` from a login with no rara role stopped that step
although its run was never asked to cancel. Now the worker asks the database (its fenced
heartbeat) and acts on the answer only; a forged notification costs it one heartbeat."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg

from rara.client import Client
from tests.support.runs import attempts_of, define, start, steps_of, wait_run
from tests.support.waiting import wait_until
from tests.worker.handlers import SEEN

Login = Callable[[str | None], psycopg.Connection[Any]]


def test_a_forged_cancel_stops_nothing(
    conn: psycopg.Connection[Any], thread_worker: Any, login: Login
) -> None:
    define(conn, "long", [{"key": "s", "capability": "test.sleep@1"}])
    thread_worker()
    run_id = start(conn, "long", {"seconds": 2})
    wait_until(lambda: f"{run_id}:s" in SEEN, message="handler started")
    [(step_id,)] = conn.execute("SELECT id FROM rara_steps WHERE run_id = %s", (run_id,))
    stranger = login(None)
    for channel in ("rara_cancel", "rara_ready", "rara_queued", "rara_run"):
        stranger.execute(f"NOTIFY {channel}, '{step_id}'")
    stranger.execute(f"NOTIFY rara_run, '{run_id}:succeeded'")
    wait_run(conn, run_id, status="succeeded", timeout=15)
    assert "cancelled" not in SEEN[f"{run_id}:s"]
    assert [a["outcome"] for a in attempts_of(conn, run_id)] == ["succeeded"]


def test_a_forged_run_end_does_not_end_a_wait(
    conn: psycopg.Connection[Any], thread_worker: Any, login: Login, database_url: str
) -> None:
    """rara_run wakes a waiting client, which reads the run again: only the database's word
    ends the wait."""
    define(conn, "long", [{"key": "s", "capability": "test.sleep@1"}])
    thread_worker()
    run_id = start(conn, "long", {"seconds": 1})
    wait_until(lambda: f"{run_id}:s" in SEEN, message="handler started")
    login(None).execute(f"NOTIFY rara_run, '{run_id}:succeeded'")
    view = Client(database_url).wait(run_id, timeout=15)
    assert view.status == "succeeded"
    assert [s["status"] for s in steps_of(conn, run_id)] == ["succeeded"]
