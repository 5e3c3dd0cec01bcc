"""Typed access to ``db/queries/workers.sql``: who is alive and what they serve. (A worker's
own writes, registration and heartbeat included, are its store's: ``rara.worker.store``.)"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from psycopg.rows import class_row, scalar_row

from rara.pg.queries import Conn, many


@dataclass(frozen=True, slots=True)
class LiveWorker:
    id: str
    capabilities: list[str]
    started_at: datetime
    heartbeat_at: datetime


def list_live(conn: Conn, alive_seconds: float) -> list[LiveWorker]:
    """Workers with a heartbeat within ``alive_seconds`` that did not stop."""
    return many(conn, "worker_list_live", class_row(LiveWorker), alive_seconds=alive_seconds)


def capabilities(conn: Conn, alive_seconds: float) -> set[str]:
    """What live workers serve now."""
    return {
        str(c) for c in many(conn, "worker_capabilities", scalar_row, alive_seconds=alive_seconds)
    }
