"""Migrations: applied once, re-running is a no-op, safe when many processes race; an applied
file may change its comments, never its statements."""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import replace
from typing import Any

import psycopg
import pytest

from rara.pg.migrate import (
    _RELEASED,
    Migration,
    MigrationError,
    available,
    canonical_sql,
    migrate,
    retired,
)
from rara.pg.queries import sql
from tests.support.plans import nested_plans


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


def test_rara_database_sessions_run_without_jit(conn: psycopg.Connection[Any]) -> None:
    """Migration 0004: JIT compiled generic plans for longer than they ran (53 of 58 ms).
    (``conn``'s database is a clone of the migrated template: rara.pg.clone copies it.)"""
    assert conn.execute("SHOW jit").fetchone() == ("off",)
    assert conn.execute("SHOW plan_cache_mode").fetchone() == ("auto",)


def test_fenced_batch_writes_are_never_planned_onto_the_reaper_index(
    conn: psycopg.Connection[Any],
) -> None:
    """Migration 0004: with `status = 'running'` as the reaper index's predicate the planner
    scanned every running step for a completion batch's ids (and, under a held xmin horizon,
    every dead entry of finished attempts); its predicate now is one no fence implies."""
    token = "00000000-0000-0000-0000-000000000001"
    conn.execute("SET enable_seqscan = off")  # as the worker's sessions (HOT_PATH_SESSION)
    plans = [
        *nested_plans(
            conn,
            sql("step_end_many"),
            {"worker": "w", "successes": f'[{{"id": 1, "token": "{token}"}}]', "others": "[]"},
        ),
        *nested_plans(
            conn,
            sql("step_heartbeat"),
            {
                "worker": "w",
                "capabilities": ["x@1"],
                "step_ids": [1, 2],
                "tokens": [token] * 2,
                "lease_seconds": 30,
            },
        ),
    ]
    texts = [json.dumps(plan) for plan in plans]
    assert any("rara_steps_pkey" in text for text in texts), texts  # the fenced probes
    for text in texts:
        assert "rara_steps_running_expiry" not in text, text


_FILE = """-- A table.
CREATE TABLE t (a text DEFAULT 'x  -- not a comment', "B" int);  /* a /* nested */ comment */
CREATE FUNCTION f(n int) RETURNS int LANGUAGE sql AS $body$ SELECT n + 1 -- inside the body
$body$;
SELECT E'it\\'s -- still the literal', $1;
"""


def _migration(sql: str) -> Migration:
    return Migration(1, "example", sql)


def test_canonical_sql_drops_comments_and_layout_keeps_literals_as_written() -> None:
    assert canonical_sql(_FILE) == (
        "CREATE TABLE t (a text DEFAULT 'x  -- not a comment', \"B\" int); "
        "CREATE FUNCTION f(n int) RETURNS int LANGUAGE sql AS $body$ SELECT n + 1 -- inside the "
        "body\n$body$; SELECT E'it\\'s -- still the literal', $1;"
    )


@pytest.mark.parametrize(
    "edited",
    [
        _FILE.replace("-- A table.", "-- The table t: one text column.\n--\n-- (Reworded.)"),
        _FILE.replace("CREATE TABLE t (", "CREATE  TABLE\n    t\n("),
        _FILE.replace("/* a /* nested */ comment */", "-- a comment of another kind"),
        "\n\n" + _FILE + "\n-- trailing words\n",
    ],
)
def test_comment_and_layout_edits_keep_the_checksum(edited: str) -> None:
    assert _migration(edited).checksum == _migration(_FILE).checksum


@pytest.mark.parametrize(
    "edited",
    [
        _FILE.replace("'x  -- not a comment'", "'x -- not a comment'"),  # inside a literal
        _FILE.replace('"B"', '"b"'),  # a quoted name
        _FILE.replace("-- inside the body", "-- inside the function"),  # stored with the function
        _FILE.replace("n + 1", "n + 2"),
        _FILE.replace("text DEFAULT", "varchar DEFAULT"),
    ],
)
def test_statement_edits_change_the_checksum(edited: str) -> None:
    assert _migration(edited).checksum != _migration(_FILE).checksum


def _checksums(url: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(url) as conn:
        return conn.execute(
            "SELECT version, checksum FROM rara_schema_migrations ORDER BY 1"
        ).fetchall()


def test_an_applied_migration_may_change_its_comments(database_url: str) -> None:
    first, *rest = available()
    reworded = first.sql.replace(
        "-- A definition's name in a namespace; retiring it keeps every version (runs pin",
        "-- Definition names.\n--\n-- Retiring one keeps its versions: runs pin",
    ).replace("CREATE TABLE rara_definitions (", "CREATE TABLE\n    rara_definitions\n(")
    assert reworded != first.sql
    before = _checksums(database_url)
    assert migrate(database_url, [replace(first, sql=reworded), *rest]) == []
    assert _checksums(database_url) == before


def test_an_applied_migration_may_not_change_its_statements(database_url: str) -> None:
    first, *rest = available()
    changed = first.sql.replace("WITH (fillfactor='80')", "WITH (fillfactor='75')")
    assert changed != first.sql
    with pytest.raises(MigrationError, match="0029_baseline was changed after it"):
        migrate(database_url, [replace(first, sql=changed), *rest])


def _stamp_file_checksums(url: str, checksums: dict[int, str]) -> None:
    """What the runner before statement checksums stored: sha256 of each file's bytes."""
    with psycopg.connect(url) as conn:
        for version, checksum in checksums.items():
            conn.execute(
                "UPDATE rara_schema_migrations SET checksum = %s WHERE version = %s",
                (checksum, version),
            )


def test_file_checksums_of_the_released_migrations_are_accepted_and_restamped(
    pg_admin_url: str,
) -> None:
    url = _fresh(pg_admin_url, "rara_mig_released")
    migrate(url, retired())
    _stamp_file_checksums(url, {v: raw for v, (raw, _) in _RELEASED.items()})
    assert migrate(url) == available()[1:]
    assert _checksums(url) == [(m.version, m.checksum) for m in available()]
    assert all(m.checksum.startswith("stmt-sha256:") for m in available())


def test_file_checksums_are_refused_unless_the_statements_are_those_released(
    pg_admin_url: str,
) -> None:
    url = _fresh(pg_admin_url, "rara_mig_released_not")
    migrate(url, retired())
    _stamp_file_checksums(url, {1: hashlib.sha256(b"another file").hexdigest()})
    with pytest.raises(MigrationError, match="0001_workflow_state of the retired chain"):
        migrate(url)
    _stamp_file_checksums(url, {1: _RELEASED[1][0]})
    assert migrate(url) == available()[1:]  # as released: accepted
