"""A database's worth of finished history, filled set-wise: the retention tests' and the
history benchmark's (bench/history.py) data.

Test-only code, so outside the wheel; the benchmarks import it from here.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import aiosql
import psycopg

Conn = psycopg.Connection[Any]
STEPS, ATTEMPTS = 5, 2  # per history run, per history step
SPAN_DAYS = 60  # the history's runs ended over this many days up to now


def _scalar(conn: Conn, query: str, params: Any = None) -> Any:
    row = conn.execute(query, params).fetchone()
    assert row is not None
    return row[0]


def fill(conn: Conn, rows: int) -> dict[str, Any]:
    """``rows`` finished attempts + events (and their steps and runs) of the ``noop``
    definition, ending over the last SPAN_DAYS days; then VACUUM ANALYZE, as autovacuum would
    have long done, so that it does not start during the measurement."""
    queries: Any = aiosql.from_path(
        Path(__file__).with_suffix(".sql"), "psycopg", mandatory_parameters=False
    )
    runs = max(1, rows // (2 * STEPS * ATTEMPTS))
    t0 = time.monotonic()
    params = {
        "base_run": _scalar(conn, "SELECT coalesce(max(id), 0) FROM rara_runs"),
        "base_step": _scalar(conn, "SELECT coalesce(max(id), 0) FROM rara_steps"),
        "runs": runs,
        "steps": STEPS,
        "attempts": ATTEMPTS,
        "definition": "noop",
        "capability": "bench.noop@1",
        "span_seconds": SPAN_DAYS * 86400,
    }
    with conn.transaction():
        conn.execute("SET LOCAL session_replication_role = replica")
        for name in ("history_runs", "history_steps", "history_attempts", "history_events"):
            conn.execute(str(getattr(queries, name).sql), params)
        for seq, table in (("rara_runs_id_seq", "rara_runs"), ("rara_steps_id_seq", "rara_steps")):
            conn.execute(f"SELECT setval('{seq}', (SELECT max(id) FROM {table}))")
    filled = time.monotonic() - t0
    conn.execute("VACUUM ANALYZE")
    counts = {
        t: _scalar(conn, f"SELECT count(*) FROM {t}")
        for t in ("rara_runs", "rara_steps", "rara_attempts", "rara_events")
    }
    return {
        "rows": counts,
        "fill_seconds": round(filled, 1),
        "vacuum_seconds": round(time.monotonic() - t0 - filled, 1),
        "database_bytes": _scalar(conn, "SELECT pg_database_size(current_database())"),
    }
