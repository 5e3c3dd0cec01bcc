"""Typed access to ``db/queries/schedules.sql``: schedules and their decided ticks (migration
0014; the rules in db/functions/schedules.sql and docs/schedules.md)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg.rows import class_row
from psycopg.types.json import Jsonb

from rara.pg.queries import AsyncConn, Conn, aone, many, one, run, value


@dataclass(frozen=True, slots=True)
class Applied:
    created: bool
    changed: bool  # False: the same spec was already applied


@dataclass(frozen=True, slots=True)
class ScheduleCore:
    """What every read of one schedule carries: what its ticks start, when, and the last run."""

    namespace: str
    name: str
    definition: str
    version: int | None
    cron: str
    time_zone: str
    input: dict[str, Any]
    concurrency_policy: str
    starting_deadline_seconds: int
    next_tick: datetime
    last_run_id: int | None


@dataclass(frozen=True, slots=True)
class DueSchedule(ScheduleCore):
    """A due schedule, its row locked by this transaction (``schedule_claim``)."""

    last_run_ended: bool | None  # None: no run yet (or it was deleted)
    db_now: datetime


@dataclass(frozen=True, slots=True)
class NextDue:
    next_tick: datetime | None  # None: no live schedule
    db_now: datetime


@dataclass(frozen=True, slots=True)
class ScheduleRow(ScheduleCore):
    """One schedule as stored, with its last run's status (``schedule_get``)."""

    suspended: bool
    successful_runs_kept: int
    failed_runs_kept: int
    spec: dict[str, Any]
    last_tick: datetime | None
    missed_ticks: int
    created_at: datetime
    updated_at: datetime
    last_run_status: str | None
    refused_reason: str | None  # why the firing refused it (None: it fires)
    refused_at: datetime | None


@dataclass(frozen=True, slots=True)
class ScheduleSummary:
    namespace: str
    name: str
    definition: str
    version: int | None
    cron: str
    time_zone: str
    concurrency_policy: str
    suspended: bool
    next_tick: datetime
    last_tick: datetime | None
    last_run_id: int | None
    missed_ticks: int
    last_run_status: str | None
    # Why the firing refused it (None: it fires): schedule_list and the UI's page read it.
    refused_reason: str | None = None


@dataclass(frozen=True, slots=True)
class TickRow:
    tick: datetime
    outcome: str  # started, skipped, refused, triggered, backfilled
    run_id: int | None
    reason: str | None
    decided_at: datetime
    run_status: str | None


@dataclass(frozen=True, slots=True)
class Decided:
    """One decided tick, as ``schedule_decide`` records it."""

    tick: datetime
    outcome: str
    run_id: int | None = None
    reason: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "tick": self.tick.isoformat(),
            "outcome": self.outcome,
            "run_id": self.run_id,
            "reason": self.reason,
        }


def apply(
    conn: Conn,
    *,
    namespace: str,
    name: str,
    spec: dict[str, Any],
    next_tick: datetime,
    **fields: Any,
) -> Applied:
    row = one(
        conn,
        "schedule_apply",
        class_row(Applied),
        namespace=namespace,
        name=name,
        spec=Jsonb(spec),
        next_tick=next_tick,
        **{k: Jsonb(v) if k == "input" else v for k, v in fields.items()},
    )
    if row is None:
        raise AssertionError("schedule_apply returned no row")
    return row


def suspend(
    conn: Conn, name: str, suspended: bool, next_tick: datetime | None, *, namespace: str
) -> bool | None:
    return value(
        conn,
        "schedule_suspend",
        bool,
        name=name,
        suspended=suspended,
        next_tick=next_tick,
        namespace=namespace,
    )


def delete(conn: Conn, name: str, *, namespace: str) -> bool:
    return bool(value(conn, "schedule_delete", bool, name=name, namespace=namespace))


def claim(conn: Conn, limit: int) -> list[DueSchedule]:
    return many(conn, "schedule_claim", class_row(DueSchedule), limit=limit)


def decide(
    conn: Conn,
    name: str,
    ticks: list[Decided],
    missed: int,
    next_tick: datetime | None,
    *,
    namespace: str,
) -> None:
    run(
        conn,
        "schedule_decide",
        namespace=namespace,
        name=name,
        ticks=Jsonb([t.as_json() for t in ticks]),
        missed=missed,
        next_tick=next_tick,
    )


def cancel_run(conn: Conn, name: str, run_id: int, *, namespace: str) -> bool:
    """Replace's cancel: the schedule's last run, and no other (the database refuses)."""
    return bool(
        value(
            conn,
            "schedule_cancel_run",
            bool,
            name=name,
            run_id=run_id,
            namespace=namespace,
        )
    )


def refuse(conn: Conn, name: str, reason: str, *, namespace: str) -> bool:
    return bool(value(conn, "schedule_refuse", bool, name=name, reason=reason, namespace=namespace))


def next_due(conn: Conn) -> NextDue:
    row = one(conn, "schedule_next_due", class_row(NextDue))
    if row is None:
        raise AssertionError("schedule_next_due returned no row")
    return row


def get(conn: Conn, name: str, *, namespace: str) -> ScheduleRow | None:
    return one(conn, "schedule_get", class_row(ScheduleRow), name=name, namespace=namespace)


def list_all(conn: Conn, *, namespace: str | None) -> list[ScheduleSummary]:
    """The schedules of ``namespace``; of every namespace when None."""
    return many(conn, "schedule_list", class_row(ScheduleSummary), namespace=namespace)


def ticks(conn: Conn, name: str, limit: int = 20, *, namespace: str) -> list[TickRow]:
    return many(
        conn,
        "schedule_tick_list",
        class_row(TickRow),
        name=name,
        limit=limit,
        namespace=namespace,
    )


#: How a firing process names its database connection (its application_name): "rara schedules
#: run (schedule firing)", "rara operator (schedule firing)". What FiringSeen looks for.
FIRING_SUFFIX = "(schedule firing)"
#: A due tick not fired this long after it is overdue: nothing fired it, though a pass wakes at
#: each tick (rara.schedules.firing).
OVERDUE_SECONDS = 60.0


@dataclass(frozen=True, slots=True)
class FiringSeen:
    """Whether anything fires schedules: the firing processes connected now (their names), and
    when a firing pass last decided a tick of the schedules asked about (None: never)."""

    processes: list[str]
    last_fired: datetime | None
    db_now: datetime

    def last_seen(self, stamp: Callable[[datetime], str]) -> str:
        """When a firing process was last seen at work, times by ``stamp``."""
        if self.last_fired is None:
            return "none has ever fired a tick here"
        return f"none has fired a tick since {stamp(self.last_fired)}"

    def problem(self, stamp: Callable[[datetime], str]) -> str | None:
        """None while a firing process is connected; else what to say, times by ``stamp``."""
        if self.processes:
            return None
        return (
            f"no schedule firing process is connected ({self.last_seen(stamp)}): active"
            " schedules fire nothing until one runs (rara schedules run, or the operator)"
        )

    def overdue(self, next_tick: datetime) -> bool:
        """Whether a tick due at ``next_tick`` should have been fired by now."""
        return (self.db_now - next_tick).total_seconds() > OVERDUE_SECONDS


def firing_seen(conn: Conn, *, namespace: str | None) -> FiringSeen:
    """``FiringSeen`` for ``namespace``'s schedules (every visible namespace's when None)."""
    row = one(
        conn, "schedule_firing_seen", class_row(FiringSeen), suffix=FIRING_SUFFIX,
        namespace=namespace,
    )  # fmt: skip
    assert row is not None
    return row


async def afiring_seen(conn: AsyncConn, *, namespace: str | None) -> FiringSeen:
    """``firing_seen`` for the dashboard."""
    row = await aone(
        conn, "schedule_firing_seen", class_row(FiringSeen), suffix=FIRING_SUFFIX,
        namespace=namespace,
    )  # fmt: skip
    assert row is not None
    return row
