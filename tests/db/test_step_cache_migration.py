"""Migration 0013 (the step cache) on a database filled by the schema before it."""

from __future__ import annotations

from typing import Any

import psycopg

from rara.pg.migrate import available, migrate
from rara.runs import start_run
from tests.support.databases import empty_database
from tests.support.definitions import apply


def test_0013_upgrades_a_database_with_runs(pg_admin_url: str) -> None:
    with empty_database(pg_admin_url, "rara_mig_step_cache") as url:
        migrate(url, [m for m in available() if m.version < 13])
        with psycopg.connect(url, autocommit=True) as conn:
            # Rows as the schema before had them (its functions are not installed on a
            # partial migration: they are written for the latest schema only).
            conn.execute("INSERT INTO rara_definitions (name) VALUES ('old')")
            [(version,)] = conn.execute(
                "INSERT INTO rara_definition_versions (name, version, digest, spec, steps)"
                " VALUES ('old', 1, 'sha256:' || repeat('1', 64), '{}', '[]') RETURNING id"
            ).fetchall()
            [(before,)] = conn.execute(
                "INSERT INTO rara_runs (definition_version_id, input, steps_total)"
                " VALUES (%s, '{}', 1) RETURNING id",
                (version,),
            ).fetchall()
            conn.execute(
                "INSERT INTO rara_steps (run_id, key, capability, executor, payload, status,"
                " max_attempts, retry_initial_ms, retry_max_ms, retry_coefficient)"
                " VALUES (%s, 'a', 'x@1', 'inprocess', '{\"input\": {}}', 'ready',"
                " 3, 1000, 60000, 2)",
                (before,),
            )
            # 0013 and every later migration (the functions need the latest schema).
            assert migrate(url)[0].version == 13
            row: Any = conn.execute(
                "SELECT status::text, payload, reused_from FROM rara_steps WHERE run_id = %s",
                (before,),
            ).fetchone()
            assert row == ("ready", {"input": {}}, None)
            assert conn.execute("SELECT count(*) FROM rara_step_cache").fetchone() == (0,)
            # A version registered before gains `cache:` only as a new version.
            apply(conn, "old", [{"key": "a", "capability": "x@1", "cache": {"ttl": "2h"}}])
            after = start_run(conn, "old", queue_anyway=True).run_id
            payload: Any = conn.execute(
                "SELECT payload FROM rara_steps WHERE run_id = %s", (after,)
            ).fetchone()
            assert payload[0]["cache"] == {"ttl_ms": 7_200_000, "namespace": "default"}
