"""What a statement costs inside PostgreSQL: the buffers it touches and the plans of the
statements inside the functions it calls (the benchmarks use these too: bench/history.py)."""

from __future__ import annotations

import json
from typing import Any

import psycopg


def buffers(conn: psycopg.Connection[Any], statement: str, params: dict[str, Any]) -> int:
    """Shared buffers a function call touches (rolled back): its scan node runs it whole,
    every statement inside it included."""
    with conn.transaction(force_rollback=True):
        [[plan]] = conn.execute(
            "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + statement, params
        ).fetchall()
    node = plan[0]["Plan"]
    return int(node["Shared Hit Blocks"]) + int(node["Shared Read Blocks"])


def nested_plans(
    conn: psycopg.Connection[Any], statement: str, params: dict[str, Any], *, analyze: bool = False
) -> list[dict[str, Any]]:
    """The plans (JSON; with ``analyze``, run, with buffers, WAL and triggers) of every
    statement run inside the functions ``statement`` calls, by auto_explain at NOTICE level;
    the statement is rolled back. Every state change is a function (db/functions/), whose
    statements a plain EXPLAIN of the call does not show."""
    plans: list[dict[str, Any]] = []

    def collect(diagnostic: psycopg.errors.Diagnostic) -> None:
        message = diagnostic.message_primary or ""
        if "plan:" in message:
            plans.append(json.loads(message.split("plan:", 1)[1]))

    conn.add_notice_handler(collect)
    try:
        with conn.transaction(force_rollback=True):
            conn.execute("LOAD 'auto_explain'")
            for setting, value in (
                ("log_min_duration", "0"),
                ("log_nested_statements", "on"),
                ("log_format", "json"),
                ("log_level", "notice"),
                ("log_analyze", "on" if analyze else "off"),
                ("log_buffers", "on" if analyze else "off"),
                ("log_wal", "on" if analyze else "off"),
                ("log_triggers", "on" if analyze else "off"),
            ):
                conn.execute(f"SET LOCAL auto_explain.{setting} = {value}")
            conn.execute(statement, params)
    finally:
        conn.remove_notice_handler(collect)
    return plans
