"""Typed access to ``db/queries/steps.sql``: steps outside an attempt (reads for clients, the
operator and the worker's idle loop; the cancels of run cancel and of a failed dependency)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg.rows import class_row

from rara.pg.queries import AsyncConn, Conn, avalue, many
from rara.states import StepStatus

Pairs = list[tuple[str, str]]  # (capability, executor kind)


@dataclass(frozen=True, slots=True)
class StepRow:
    id: int
    key: str
    depends_on: list[str]
    capability: str
    executor: str
    status: StepStatus
    attempt: int
    max_attempts: int
    available_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    result: Any
    error: dict[str, Any] | None
    leased_by: str | None
    # A map step: its children summed up (done/running/failed of N); None for other steps.
    children: str | None = None
    # Where a step reused from the step cache took its result (rara.cache.describe_reuse).
    reused_from: dict[str, Any] | None = None
    # A waiting step (docs/waits.md): timer | signal | approval, the signal's name, and when
    # its time or deadline comes; None for every other step.
    wait_kind: str | None = None
    wait_signal: str | None = None
    wait_due_at: datetime | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "status", StepStatus(self.status))


@dataclass(frozen=True, slots=True)
class StepProgressRow:
    """A step of a run with the latest progress of its current attempt (``runs watch``)."""

    id: int
    key: str
    capability: str
    executor: str
    status: StepStatus
    attempt: int
    max_attempts: int
    started_at: datetime | None
    finished_at: datetime | None
    result: Any
    error: dict[str, Any] | None
    fraction: float | None
    message: str | None
    metrics: dict[str, float] | None
    is_map: bool = False  # a map step's row: its children's summary in ``message``
    reused_from: dict[str, Any] | None = None  # (rara.cache.describe_reuse)
    wait_kind: str | None = None  # timer | signal | approval: it waits (docs/waits.md)

    def __post_init__(self) -> None:
        object.__setattr__(self, "status", StepStatus(self.status))


@dataclass(frozen=True, slots=True)
class Backlog:
    capability: str
    ready: int
    running: int
    max_running: int | None = None  # its concurrency limit (migration 0009); None: none

    @property
    def workable(self) -> int:
        """The steps that could run now: ready + running, but no more than the limit."""
        total = self.ready + self.running
        return total if self.max_running is None else min(total, self.max_running)


@dataclass(frozen=True, slots=True)
class FailedStep:
    run_id: int
    key: str
    capability: str
    attempt: int
    finished_at: datetime
    error: Any


def list_for_run(conn: Conn, run_id: int) -> list[StepRow]:
    return many(conn, "step_list", class_row(StepRow), run_id=run_id)


def list_progress(conn: Conn, run_id: int) -> list[StepProgressRow]:
    return many(conn, "step_list_progress", class_row(StepProgressRow), run_id=run_id)


def backlog(conn: Conn) -> list[Backlog]:
    """Ready and running steps per capability (what the operator scales by)."""
    return many(conn, "step_backlog", class_row(Backlog))


def list_failed(conn: Conn, limit: int) -> list[FailedStep]:
    return many(conn, "step_list_failed", class_row(FailedStep), limit=limit)


async def next_available(conn: AsyncConn, pairs: Pairs) -> float | None:
    """Seconds until the earliest backing-off ready step of ``pairs`` (None: none)."""
    return await avalue(
        conn,
        "step_next_available",
        float,
        capabilities=[c for c, _ in pairs],
        executors=[e for _, e in pairs],
    )
