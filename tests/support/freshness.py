"""Definitions that declare freshness, and time moved back under them (rara.freshness)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import psycopg

from rara.definitions.parse import definition_from_object
from rara.definitions.registry import apply_definition
from tests.support.definitions import definition

Conn = psycopg.Connection[Any]
STEPS = [{"key": "collect", "capability": "test.produce@1", "input": {"text": "alpha"}}]


def declared(conn: Conn, max_age: str = "1h") -> None:
    doc = definition("refresh", STEPS)
    doc["spec"]["freshness"] = {"maxAge": max_age}
    apply_definition(conn, definition_from_object(doc))


def age(conn: Conn, table: str, column: str, hours: float) -> None:
    """As the superuser, past the append-only triggers (a replica's session applies changes
    without them): the rows of ``table`` made ``hours`` ago."""
    with conn.transaction():
        conn.execute("SET LOCAL session_replication_role = replica")
        conn.execute(
            f"UPDATE {table} SET {column} = now() - %s".encode(),  # type: ignore[arg-type]
            (timedelta(hours=hours),),
        )
