"""Typed access to ``db/queries/limits.sql``: concurrency limits per capability (migration
0009; enforced in the lease, docs/limits.md)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from psycopg.rows import class_row

from rara.pg.queries import Conn, many, run


@dataclass(frozen=True, slots=True)
class LimitRow:
    capability: str
    max_running: int
    updated_at: datetime
    running: int  # attempts of the capability running now


def set_limit(conn: Conn, capability: str, max_running: int | None) -> None:
    """At most ``max_running`` attempts of ``capability`` at once; None removes the limit."""
    run(conn, "capability_limit_set", capability=capability, max_running=max_running)


def list_all(conn: Conn) -> list[LimitRow]:
    return many(conn, "capability_limit_list", class_row(LimitRow))
