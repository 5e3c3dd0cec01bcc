"""A worker login speaks only for its own workers (migration 0012, rara_worker_check_login):
before, any worker login could stop another's row, after which `rara runs start` refused work
("no live worker serves …") until that worker restarted."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from rara.pg.queries import sql
from rara.runs import start_run
from tests.support.definitions import apply

Denied = psycopg.errors.InsufficientPrivilege
Login = Callable[[str | None], psycopg.Connection[Any]]


def test_another_logins_worker_id_is_refused(conn: psycopg.Connection[Any], login: Login) -> None:
    apply(conn, "r", [{"key": "a", "capability": "x@1"}])
    mine, theirs = login("rara_worker"), login("rara_worker")
    mine.execute(
        sql("worker_register"), {"worker": "w-a", "capabilities": ["x@1"], "executors": "[]"}
    )
    row = conn.execute("SELECT * FROM rara_workers").fetchall()
    lease = {
        "worker": "w-a",
        "capabilities": ["x@1"],
        "executors": ["inprocess"],
        "after_ranks": [None],
        "after_ats": [None],
        "after_ids": [None],
        "after_namespaces": [None],
        "except_namespaces": None,
        "limit": 5,
        "lease_seconds": 60,
    }
    for name, params in [
        ("worker_stop", {"worker": "w-a"}),
        ("worker_register", {"worker": "w-a", "capabilities": ["y@1"], "executors": "[]"}),
        (
            "step_heartbeat",
            {
                "worker": "w-a",
                "capabilities": [],
                "lease_seconds": 60,
                "step_ids": [],
                "tokens": [],
            },
        ),
        ("step_lease", lease),
    ]:
        with pytest.raises(Denied, match="worker id w-a belongs to another login"):
            theirs.execute(sql(name), params)
    assert conn.execute("SELECT * FROM rara_workers").fetchall() == row
    assert start_run(conn, "r").created  # its worker still counts as live
    # Its own login may do all of it, and a fresh id is anyone's.
    mine.execute(
        sql("step_heartbeat"),
        {
            "worker": "w-a",
            "capabilities": ["x@1"],
            "lease_seconds": 60,
            "step_ids": [],
            "tokens": [],
        },
    )
    assert len(mine.execute(sql("step_lease"), lease).fetchall()) == 1
    theirs.execute(
        sql("worker_register"), {"worker": "w-b", "capabilities": ["x@1"], "executors": "[]"}
    )
    mine.execute(sql("worker_stop"), {"worker": "w-a"})
    assert conn.execute(
        "SELECT id, login IS NOT NULL, stopped_at IS NOT NULL FROM rara_workers ORDER BY id"
    ).fetchall() == [("w-a", True, True), ("w-b", True, False)]


def test_an_executors_record_that_is_not_a_list_is_refused(login: Login) -> None:
    """rara_workers.executors (migration 0015) is one object per endpoint, in a list: the Fleet
    page reads it row by row, so anything else is refused, naming the rule."""
    worker = login("rara_worker")
    with pytest.raises(psycopg.errors.CheckViolation, match="rara_workers_executors_is_array"):
        worker.execute(
            sql("worker_register"),
            {"worker": "w-a", "capabilities": ["x@1"], "executors": '{"endpoint": "e:1"}'},
        )
