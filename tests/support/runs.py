"""Runs in a test database: define, start, wait for the end, and read steps and attempts."""

from __future__ import annotations

from typing import Any

import psycopg

from rara.runs import start_run
from tests.support.definitions import apply
from tests.support.waiting import wait_until


def define(conn: psycopg.Connection[Any], name: str, steps: list[dict[str, Any]]) -> None:
    apply(conn, name, steps)


def start(conn: psycopg.Connection[Any], name: str, input: dict[str, Any] | None = None) -> int:
    return start_run(conn, name, input=input or {}, queue_anyway=True).run_id


def run_status(conn: psycopg.Connection[Any], run_id: int) -> str:
    row = conn.execute("SELECT status::text FROM rara_runs WHERE id = %s", (run_id,)).fetchone()
    assert row is not None
    return str(row[0])


def wait_run(
    conn: psycopg.Connection[Any], run_id: int, *, timeout: float = 30.0, status: str | None = None
) -> str:
    """Wait until the run is terminal; optionally assert its status."""
    final = wait_until(
        lambda: (s := run_status(conn, run_id)) in ("succeeded", "failed", "cancelled") and s,
        timeout=timeout,
        message=f"run {run_id} to end",
    )
    if status is not None:
        assert final == status, steps_of(conn, run_id)
    return str(final)


def steps_of(conn: psycopg.Connection[Any], run_id: int) -> list[dict[str, Any]]:
    cur = conn.execute(
        "SELECT key, status::text, attempt, releases, error, result, leased_by "
        "FROM rara_steps WHERE run_id = %s ORDER BY id",
        (run_id,),
    )
    names = [d.name for d in cur.description or []]
    return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


def attempts_of(conn: psycopg.Connection[Any], run_id: int) -> list[dict[str, Any]]:
    cur = conn.execute(
        "SELECT s.key, a.attempt, a.worker, a.outcome::text AS outcome, a.error, "
        "a.started_at, a.ended_at, a.ended_by FROM rara_attempts a "
        "JOIN rara_steps s ON s.id = a.step_id WHERE a.run_id = %s "
        "ORDER BY s.id, a.attempt",
        (run_id,),
    )
    names = [d.name for d in cur.description or []]
    return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


def waiting_of(conn: psycopg.Connection[Any], run_id: int) -> list[str]:
    """The keys of the run's steps that wait now (a row in rara_waits: migration 0021)."""
    rows = conn.execute(
        "SELECT s.key FROM rara_waits w JOIN rara_steps s ON s.id = w.step_id"
        " WHERE w.run_id = %s ORDER BY s.key",
        (run_id,),
    )
    return [r[0] for r in rows]


def reused_of(conn: psycopg.Connection[Any], run_id: int) -> dict[str, Any]:
    """Each step of the run by key: its reused_from (None: it ran)."""
    return dict(
        conn.execute(
            "SELECT key, reused_from FROM rara_steps WHERE run_id = %s", (run_id,)
        ).fetchall()
    )
