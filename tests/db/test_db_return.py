"""The database's return (``rara_db_return``), from which the leases' outage rule counts, kept
for the server's life (``rara_db_life``, migration 0031): read from pg_stat_activity once, not
at every heartbeat and reaper call, and computed again for another life of the server — a
restart, a promoted standby, a crash the postmaster reinitialised after. The outages
themselves: tests/e2e/test_outage_lease.py."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import psycopg

from rara.pg.embedded import temporary_server
from rara.pg.migrate import migrate

COMPUTED = (
    "SELECT greatest(pg_postmaster_start_time(), (SELECT max(a.backend_start) "
    "FROM pg_stat_activity a WHERE a.backend_type = 'walwriter'))"
)


def _one(conn: psycopg.Connection[Any], query: str) -> Any:
    row = conn.execute(query).fetchone()
    assert row is not None
    return row[0]


def test_the_return_is_kept_for_the_servers_life(conn: psycopg.Connection[Any]) -> None:
    conn.execute("DELETE FROM rara_db_life")
    back = _one(conn, "SELECT rara_db_return()")
    assert back == _one(conn, COMPUTED)
    kept = conn.execute(
        "SELECT postmaster_start = pg_postmaster_start_time(), db_return FROM rara_db_life"
    ).fetchone()
    assert kept == (True, back)
    # Kept: what the row says is the answer (the row stands for this life of the server).
    conn.execute("UPDATE rara_db_life SET db_return = db_return - interval '1 h'")
    assert _one(conn, "SELECT rara_db_return()") == back - _one(conn, "SELECT interval '1 h'")


def test_a_row_of_another_life_is_computed_again(conn: psycopg.Connection[Any]) -> None:
    truth = _one(conn, COMPUTED)
    # Another server's life (a promoted standby reads its primary's row), then a crash the
    # postmaster reinitialised after (same start, pg_stat_wal reset anew): neither is used.
    for stale in (
        "postmaster_start = postmaster_start - interval '1 d'",
        "wal_stats_reset = wal_stats_reset - interval '1 d'",
    ):
        _one(conn, "SELECT rara_db_return()")
        conn.execute(f"UPDATE rara_db_life SET {stale}, db_return = '2000-01-01'")
        assert _one(conn, "SELECT rara_db_return()") == truth, stale
        assert _one(conn, "SELECT db_return FROM rara_db_life") == truth, stale


def test_no_role_writes_the_kept_return(conn: psycopg.Connection[Any]) -> None:
    """A login that could write it could move the return to the future and keep expired
    leases alive; only rara_db_return, as the functions' owner, writes it."""
    granted = conn.execute(
        "SELECT grantee, privilege_type FROM information_schema.role_table_grants "
        "WHERE table_name = 'rara_db_life' AND grantee <> current_user"
    ).fetchall()
    assert granted == [("rara_reader", "SELECT")]  # as every table (db/functions/reads.sql)


def test_after_a_crash_the_return_is_the_reinitialised_servers() -> None:
    """A backend killed by SIGKILL: the postmaster ends every session and reinitialises after
    crash recovery, without restarting (its start time stays). The return moves to then."""
    # Commits durable before the kill: with the fast settings' synchronous_commit=off, the
    # crash's reinitialisation may lose the migration's last commits (a loaded machine's
    # WAL writer had not flushed them), and rara_db_return() with them.
    server = temporary_server(fast=True, synchronous_commit="on")
    url = server.up()
    try:
        migrate(url)
        with psycopg.connect(url, autocommit=True) as conn:
            before = _one(conn, "SELECT rara_db_return()")
            started = _one(conn, "SELECT pg_postmaster_start_time()")
        with psycopg.connect(url, autocommit=True) as victim:
            os.kill(_one(victim, "SELECT pg_backend_pid()"), signal.SIGKILL)
        deadline = time.monotonic() + 60
        while True:
            try:
                with psycopg.connect(url, autocommit=True) as conn:
                    after = _one(conn, "SELECT rara_db_return()")
                    assert _one(conn, "SELECT pg_postmaster_start_time()") == started
                    assert after == _one(conn, COMPUTED)
                    break
            except psycopg.OperationalError:
                assert time.monotonic() < deadline, "the server did not come back"
                time.sleep(0.1)  # polling a server's return: there is no event to wait on
        assert after > before
    finally:
        server.destroy()
