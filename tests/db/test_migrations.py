"""Migrations: applied once, re-running is a no-op, safe when many processes race."""

from __future__ import annotations

import threading
from typing import Any

import psycopg

from rara.pg.migrate import available, migrate
from rara.pg.queries import async_queries, sync_queries


def _fresh(admin_url: str, name: str) -> str:
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {name}")
    return admin_url.rsplit("/", 1)[0] + "/" + name


def _schema(url: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(url) as conn:
        return conn.execute(
            "SELECT table_name, column_name, data_type FROM information_schema.columns "
            "WHERE table_schema = 'public' ORDER BY 1, 2"
        ).fetchall()


def test_migrate_twice_is_a_noop(pg_admin_url: str) -> None:
    url = _fresh(pg_admin_url, "rara_mig_twice")
    assert [m.version for m in migrate(url)] == [m.version for m in available()]
    before = _schema(url)
    assert migrate(url) == []
    assert _schema(url) == before


def test_concurrent_migrators_apply_once(pg_admin_url: str) -> None:
    url = _fresh(pg_admin_url, "rara_mig_race")
    barrier = threading.Barrier(6)
    applied: list[int] = []
    errors: list[BaseException] = []

    def run() -> None:
        barrier.wait()
        try:
            applied.extend(m.version for m in migrate(url))
        except BaseException as exc:  # collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert errors == []
    assert sorted(applied) == [m.version for m in available()]
    with psycopg.connect(url) as conn:
        count = conn.execute("SELECT count(*) FROM rara_schema_migrations").fetchone()
    assert count == (len(available()),)


def test_every_named_query_loads_for_both_drivers() -> None:
    names = set(sync_queries().available_queries)
    assert names == set(async_queries().available_queries)
    for expected in (
        "step_lease_routed",
        "worker_heartbeat_steps",
        "steps_complete_many",
        "step_fail",
        "steps_reap",
        "step_release",
        "runs_refresh",
        "run_start",
        "definition_version_insert",
    ):
        assert expected in names


def test_rara_database_sessions_run_without_jit(conn: psycopg.Connection[Any]) -> None:
    """Migration 0004: JIT compiled generic plans for longer than they ran (53 of 58 ms).
    (``conn``'s database is a clone of the migrated template: rara.pg.clone copies it.)"""
    assert conn.execute("SHOW jit").fetchone() == ("off",)
    assert conn.execute("SHOW plan_cache_mode").fetchone() == ("auto",)


def test_fenced_batch_writes_are_never_planned_onto_the_reaper_index(
        conn: psycopg.Connection[Any]) -> None:
    """Migration 0004: with `status = 'running'` as the reaper index's predicate the planner
    scanned every running step for a completion batch's ids (and, under a held xmin horizon,
    every dead entry of finished attempts); its predicate now is one no fence implies."""
    q = sync_queries()
    plans = [
        conn.execute("EXPLAIN " + q.steps_complete_many.sql,
                     {"worker": "w", "endings": '[{"id": 1, "token": "'
                                                 '00000000-0000-0000-0000-000000000001"}]'}),
        conn.execute("EXPLAIN " + q.worker_heartbeat_steps.sql,
                     {"worker": "w", "capabilities": ["x@1"], "step_ids": [1, 2],
                      "tokens": ["00000000-0000-0000-0000-000000000001"] * 2,
                      "lease_seconds": 30}),
    ]
    for plan in plans:
        text = "\n".join(row[0] for row in plan.fetchall())
        assert "rara_steps_running_expiry" not in text, text
