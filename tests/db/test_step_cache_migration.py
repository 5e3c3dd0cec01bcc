"""Migrations 0013 (the step cache) and 0026 (entries of their steps' namespace) on a database
filled by the schema before each."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from rara.pg.migrate import migrate, retired
from rara.runs import start_run
from tests.support.databases import empty_database
from tests.support.definitions import apply


def test_0013_upgrades_a_database_with_runs(pg_admin_url: str) -> None:
    with empty_database(pg_admin_url, "rara_mig_step_cache") as url:
        migrate(url, [m for m in retired() if m.version < 13])
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


def test_0026_gives_entries_their_steps_namespace_and_drops_the_rest(pg_admin_url: str) -> None:
    """An entry takes the namespace of the step that wrote it; one whose step is gone (its run
    pruned), had no `cache:`, or is of another capability than the entry says is deleted."""
    with empty_database(pg_admin_url, "rara_mig_cache_namespaces") as url:
        migrate(url, [m for m in retired() if m.version < 26])
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("INSERT INTO rara_definitions (name, namespace) VALUES ('d', 'team-a')")
            [(version,)] = conn.execute(
                "INSERT INTO rara_definition_versions (name, namespace, version, digest, spec,"
                " steps) VALUES ('d', 'team-a', 1, 'sha256:' || repeat('1', 64), '{}', '[]')"
                " RETURNING id"
            ).fetchall()
            [(run,)] = conn.execute(
                "INSERT INTO rara_runs (namespace, definition_version_id, input, steps_total)"
                " VALUES ('team-a', %s, '{}', 2) RETURNING id",
                (version,),
            ).fetchall()
            steps: dict[str, int] = dict(
                conn.execute(
                    "INSERT INTO rara_steps (run_id, namespace, key, capability, executor,"
                    " payload, status, max_attempts, retry_initial_ms, retry_max_ms,"
                    " retry_coefficient, finished_at)"
                    " VALUES (%(run)s, 'team-a', 'cached', 'x@1', 'inprocess', %(cached)s,"
                    "         'succeeded', 3, 1000, 60000, 2, now()),"
                    "        (%(run)s, 'team-a', 'plain', 'x@1', 'inprocess', '{}',"
                    "         'succeeded', 3, 1000, 60000, 2, now())"
                    " RETURNING key, id",
                    {"run": run, "cached": Jsonb({"cache": {"ttl_ms": None}})},
                ).fetchall()
            )
            entries = {
                # key digit: (its step's row, the capability it says)
                "1": (run, steps["cached"], "cached", "x@1"),  # kept
                "2": (run, steps["plain"], "plain", "x@1"),  # no `cache:`
                "3": (run + 1, steps["plain"] + 1, "gone", "x@1"),  # its run was pruned
                "4": (run, steps["cached"], "cached", "y@1"),  # another capability
            }
            for digit, (source_run, source_step, key, capability) in entries.items():
                conn.execute(
                    "INSERT INTO rara_step_cache (key, base, capability, step_key, parts,"
                    " source_run, source_step, source_attempt)"
                    " VALUES ('sha256:' || repeat(%s, 64), 'sha256:' || repeat('0', 64), %s,"
                    "         %s, '{}', %s, %s, 1)",
                    (digit, capability, key, source_run, source_step),
                )
            migrate(url)
            assert conn.execute(
                "SELECT key, namespace, capability FROM rara_step_cache"
            ).fetchall() == [("sha256:" + "1" * 64, "team-a", "x@1")]
