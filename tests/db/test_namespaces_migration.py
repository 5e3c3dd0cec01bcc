"""Migration 0017 (namespaces) on a database filled by the schema before it: every definition,
version, run, schedule and tick moves to `default` with nothing lost, each relation still
holds, and the histories go on where they were (the next version is N+1, an old idempotency
key still finds its run, an old schedule still fires)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import psycopg

from rara.pg import definitions as definition_sql
from rara.pg.migrate import migrate, retired
from rara.runs import start_run
from rara.schedules import firing
from tests.support.databases import empty_database
from tests.support.definitions import apply

# Each table's rows before and after, as the columns both schemas have.
_ROWS = {
    "rara_definitions": "SELECT name, retired_at FROM rara_definitions ORDER BY name",
    "rara_definition_versions": (
        "SELECT id, name, version, digest FROM rara_definition_versions ORDER BY id"
    ),
    "rara_runs": (
        "SELECT id, definition_version_id, idempotency_key, status::text, steps_total"
        " FROM rara_runs ORDER BY id"
    ),
    "rara_steps": "SELECT id, run_id, key, status::text FROM rara_steps ORDER BY id",
    "rara_schedules": "SELECT name, definition, next_tick FROM rara_schedules ORDER BY name",
    "rara_schedule_ticks": (
        "SELECT schedule, tick, outcome, run_id FROM rara_schedule_ticks ORDER BY schedule, tick"
    ),
}


def _fill(conn: psycopg.Connection[Any]) -> None:
    """Rows as the schema before 0017 had them (a partial migration installs no functions:
    they are written for the latest schema), as the owner."""
    conn.execute("INSERT INTO rara_definitions (name) VALUES ('rag'), ('old')")
    conn.execute("UPDATE rara_definitions SET retired_at = now() WHERE name = 'old'")
    for name, version in (("rag", 1), ("rag", 2), ("old", 1)):
        conn.execute(
            "INSERT INTO rara_definition_versions (name, version, digest, spec, steps)"
            " VALUES (%s, %s, %s, '{}', '[]')",
            (name, version, "sha256:" + f"{version}{name}".encode().hex().ljust(64, "0")[:64]),
        )
    for key, version in (("nightly-1", 1), ("nightly-2", 2), (None, 2)):
        [(run,)] = conn.execute(
            "INSERT INTO rara_runs (definition_version_id, input, idempotency_key, steps_total,"
            " status, started_at, finished_at)"
            " SELECT id, '{}', %s, 1, 'succeeded', now(), now() FROM rara_definition_versions"
            " WHERE name = 'rag' AND version = %s RETURNING id",
            (key, version),
        ).fetchall()
        conn.execute(
            "INSERT INTO rara_steps (run_id, key, capability, executor, payload, status,"
            " max_attempts, retry_initial_ms, retry_max_ms, retry_coefficient, finished_at)"
            " VALUES (%s, 'a', 'x@1', 'inprocess', '{\"input\": {}}', 'succeeded',"
            " 3, 1000, 60000, 2, now())",
            (run,),
        )
    conn.execute(
        "INSERT INTO rara_schedules (name, definition, cron, time_zone, concurrency_policy,"
        " starting_deadline_seconds, successful_runs_kept, failed_runs_kept, spec, next_tick)"
        " VALUES ('every-second', 'rag', '* * * * * *', 'UTC', 'Allow', 60, 3, 1, '{}',"
        " date_trunc('second', now()) - interval '2 seconds')"
    )
    conn.execute(
        "INSERT INTO rara_schedule_ticks (schedule, tick, outcome, run_id)"
        " SELECT 'every-second', now() - interval '1 hour', 'started', min(id) FROM rara_runs"
    )


def test_0017_moves_every_row_to_default_and_the_histories_go_on(pg_admin_url: str) -> None:
    with empty_database(pg_admin_url, "rara_mig_namespaces") as url:
        migrate(url, [m for m in retired() if m.version < 17])
        with psycopg.connect(url, autocommit=True) as conn:
            _fill(conn)
            before = {table: conn.execute(q).fetchall() for table, q in _ROWS.items()}
            assert all(before.values())
            # 0017 and every later migration (the functions need the latest schema).
            assert migrate(url)[0].version == 17
            after = {table: conn.execute(q).fetchall() for table, q in _ROWS.items()}
            assert after == before
            for table in _ROWS:
                if table != "rara_steps":
                    namespaces = conn.execute(f"SELECT DISTINCT namespace FROM {table}")
                    assert namespaces.fetchall() == [("default",)], table
            # No default is left on the columns: every writer says which namespace.
            defaults = conn.execute(
                "SELECT table_name FROM information_schema.columns"
                " WHERE column_name = 'namespace' AND column_default IS NOT NULL"
            ).fetchall()
            assert defaults == []

            # The history goes on: the next version of `rag` is 3, in default; the same name
            # in another namespace starts from 1.
            step = [{"key": "a", "capability": "x@1"}]
            assert apply(conn, "rag", step).version == 3
            got = definition_sql.version_get(conn, "old", namespace="default")
            assert got is not None
            assert got.retired_at is not None
            # An old idempotency key still names its run in default, and only there.
            old_run = before["rara_runs"][0][0]
            again = start_run(conn, "rag", idempotency_key="nightly-1", queue_anyway=True)
            assert (again.run_id, again.created) == (old_run, False)
            # The old schedule fires in default, from its overdue tick on.
            conn.execute(
                "UPDATE rara_schedules SET next_tick = date_trunc('second', now()) - %s",
                (timedelta(seconds=1),),
            )
            assert firing.fire_due(conn).started >= 2
            fired = conn.execute(
                "SELECT DISTINCT r.namespace FROM rara_schedule_ticks t"
                " JOIN rara_runs r ON r.id = t.run_id WHERE t.tick > now() - interval '1 minute'"
            ).fetchall()
            assert fired == [("default",)]
