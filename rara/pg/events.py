"""Typed access to ``db/queries/events.sql``: a run's progress events and attempt history."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg.rows import class_row

from rara.pg.queries import Conn, many
from rara.states import AttemptOutcome


@dataclass(frozen=True, slots=True)
class EventRow:
    key: str
    attempt: int
    seq: int
    kind: str
    fraction: float | None
    message: str
    metrics: dict[str, float] | None
    created_at: datetime


@dataclass(frozen=True, slots=True)
class AttemptRow:
    key: str
    attempt: int
    worker: str
    outcome: AttemptOutcome
    started_at: datetime
    ended_at: datetime | None
    error: dict[str, Any] | None

    def __post_init__(self) -> None:
        object.__setattr__(self, "outcome", AttemptOutcome(self.outcome))


def list_events(conn: Conn, run_id: int) -> list[EventRow]:
    return many(conn, "event_list", class_row(EventRow), run_id=run_id)


def list_attempts(conn: Conn, run_id: int) -> list[AttemptRow]:
    return many(conn, "attempt_list", class_row(AttemptRow), run_id=run_id)
