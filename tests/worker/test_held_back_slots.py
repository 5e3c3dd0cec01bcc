"""Held-back slots (``WorkerSettings.held_back_slots``; docs/namespaces.md, "Held-back slots"):
a worker keeps slots back for the namespaces with nothing running on it, so that a team's
first step starts at its run's start however full another team's backlog keeps the other
slots. A real worker on a real PostgreSQL; the slots are seen in the database's rows."""

from __future__ import annotations

from typing import Any

import psycopg

from rara.runs import start_run
from tests.db.test_map_steps import _end, _won
from tests.support.definitions import apply
from tests.support.leasing import lease_now
from tests.support.waiting import wait_until

A, B, C = "team-a", "team-b", "team-c"
NAP = [{"key": "s", "capability": "test.sleep@1"}]


def _running(conn: psycopg.Connection[Any]) -> dict[str, int]:
    rows = conn.execute(
        "SELECT namespace, count(*) FROM rara_steps WHERE status = 'running' GROUP BY 1"
    ).fetchall()
    return {namespace: int(n) for namespace, n in rows}


def _start(conn: psycopg.Connection[Any], namespace: str, seconds: float) -> int:
    return start_run(conn, "nap", input={"seconds": seconds}, namespace=namespace).run_id


def test_a_namespace_with_nothing_running_here_starts_in_a_held_back_slot(
    conn: psycopg.Connection[Any], thread_worker: Any
) -> None:
    for namespace in (A, B, C):
        apply(conn, "nap", NAP, namespace=namespace)
    thread_worker(concurrency=3, held_back_slots=1)
    for _ in range(5):  # A's backlog: more than the two slots every namespace may use
        _start(conn, A, 30)
    wait_until(lambda: _running(conn) == {A: 2}, message="A in the two slots for everyone")
    # B's start wakes the worker (NOTIFY rara_queued): B has nothing running here, so its step
    # takes the held-back slot, which none of A's three ready steps took.
    _start(conn, B, 0.2)
    wait_until(lambda: _running(conn).get(B) == 1, message="B in the held-back slot")
    assert _running(conn)[A] == 2
    # B's step ends and the slot is held back again: A, still queued, does not get it; the
    # next namespace that starts does.
    wait_until(lambda: B not in _running(conn), message="B's step ended")
    _start(conn, C, 0.2)
    wait_until(lambda: _running(conn).get(C) == 1, message="C in the held-back slot")
    assert _running(conn)[A] == 2
    [(leased_by,)] = conn.execute(
        "SELECT count(DISTINCT leased_by) FROM rara_steps WHERE status = 'running'"
    ).fetchall()
    assert leased_by == 1


def test_queued_steps_notify_once_per_statement_and_ends_do_not(
    conn: psycopg.Connection[Any], database_url: str
) -> None:
    # rara_queued names the capability of steps an INSERT queued ready: a run's start, not
    # the dependants an end makes ready (rara_ready alone), so that a worker's held-back slots
    # lease once per start rather than once per end batch.
    apply(
        conn,
        "chain",
        [
            {"key": "first", "capability": "test.noop@1"},
            {"key": "then", "capability": "test.echo@1", "depends_on": ["first"]},
        ],
        namespace=A,
    )
    with psycopg.connect(database_url, autocommit=True) as listener:
        listener.execute("LISTEN rara_queued")
        listener.execute("LISTEN rara_ready")
        run_id = start_run(conn, "chain", namespace=A, queue_anyway=True).run_id
        conn.execute("NOTIFY rara_ready, 'marker'")  # delivered after what came before
        seen = _until_marker(listener)
        assert ("rara_queued", "test.noop@1") in seen
        assert ("rara_queued", "test.echo@1") not in seen  # blocked when inserted
        [(step_id,)] = conn.execute(
            "SELECT id FROM rara_steps WHERE run_id = %s AND key = 'first'", (run_id,)
        ).fetchall()
        [first] = lease_now(conn, ["test.noop@1"], worker="w", limit=1)
        assert first.id == step_id
        _end(database_url, _won(first))  # makes `then` ready: an UPDATE
        conn.execute("NOTIFY rara_ready, 'marker'")
        assert _until_marker(listener) == [("rara_ready", "test.echo@1")]


def _until_marker(listener: psycopg.Connection[Any]) -> list[tuple[str, str]]:
    seen = []
    for note in listener.notifies(timeout=10):
        if note.payload == "marker":
            return seen
        seen.append((note.channel, note.payload))
    raise AssertionError(f"no marker within 10 s; seen {seen}")
