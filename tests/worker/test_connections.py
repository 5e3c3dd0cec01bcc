"""A worker's database connections (``rara.worker.connections``): at rest, two — its LISTEN
connection and one of its pool — however many it used under load. A fleet's backends are
workers times connections, so this is what an idle fleet costs the database."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from rara.runs import start_run
from rara.worker import connections
from tests.support.definitions import apply
from tests.support.runs import run_status
from tests.support.waiting import wait_until
from tests.support.workers import ThreadWorker

NAME = "rara-test-at-rest"


def _backends(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (NAME,)
    ).fetchone()
    assert row is not None
    return int(row[0])


def _ended(conn: psycopg.Connection[Any], run_id: int) -> bool:
    return run_status(conn, run_id) == "succeeded"


def test_a_worker_at_rest_holds_two_connections_whatever_it_used_under_load(
    conn: psycopg.Connection[Any],
    database_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(connections, "IDLE_SECONDS", 0.3)  # the pool shrinks in seconds
    apply(conn, "wide", [{"key": f"s{i}", "capability": "test.sleep@1"} for i in range(8)])
    url = make_conninfo(database_url, application_name=NAME)
    worker = ThreadWorker(url, tmp_path, concurrency=8, poll_seconds=30.0).start(conn)
    try:
        peak = 0
        run = start_run(conn, "wide", input={"seconds": 0.5}).run_id

        def ended_watching_peak() -> bool:
            nonlocal peak
            peak = max(peak, _backends(conn))
            return _ended(conn, run)

        wait_until(ended_watching_peak, timeout=30, message="the wide run to end")
        wait_until(
            lambda: _backends(conn) == 2,
            timeout=20,
            message=f"two connections at rest (the listener and the pool's one; peak {peak})",
        )
        # At rest it still serves at once: the listener's wake-up, not the 30 s poll.
        apply(conn, "one", [{"key": "s", "capability": "test.echo@1"}])
        again = start_run(conn, "one").run_id
        wait_until(lambda: _ended(conn, again), timeout=10, message="a run started at rest")
    finally:
        worker.stop()
