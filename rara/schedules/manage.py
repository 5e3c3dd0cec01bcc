"""What people and the operator do to schedules: apply, pause, resume, delete, trigger a run
now, backfill a range of ticks. The firing itself is rara.schedules.firing."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import psycopg

from rara.errors import InputInvalid, NotFound, ScheduleInvalid
from rara.namespaces import DEFAULT_NAMESPACE, qualified
from rara.pg import schedules as schedule_sql
from rara.pg.queries import value
from rara.pg.schedules import Applied, Decided
from rara.runs import check_input, start_run
from rara.schedules import ticks
from rara.schedules.firing import idempotency_key
from rara.schedules.model import WorkflowSchedule, spec_json

MAX_BACKFILL_TICKS = 1000  # one backfill's runs; a longer range is several backfills
# The earliest tick a backfill reaches: the Unix epoch (before it, a date near year 1 has no
# room for a zone's offset, and no schedule's run is that old).
EARLIEST_BACKFILL = datetime(1970, 1, 1, tzinfo=UTC)


def database_now(conn: psycopg.Connection[Any]) -> datetime:
    now = value(conn, "database_now", datetime)
    if now is None:
        raise AssertionError("database_now returned nothing")
    return now


def apply_schedule(
    conn: psycopg.Connection[Any],
    schedule: WorkflowSchedule,
    *,
    namespace: str = DEFAULT_NAMESPACE,
) -> Applied:
    """Create or change the schedule of this name in ``namespace`` (its runs start there, of
    that namespace's definition); the same document again changes nothing.
    An input that a start of its definition would refuse now is refused here (ScheduleInvalid
    naming ``spec.input`` and the field), and nothing is written: else every tick would be
    refused alike (docs/schedules.md)."""
    spec = schedule.spec
    try:
        check_input(
            conn, spec.definition, version=spec.version, input=spec.input, namespace=namespace
        )
    except InputInvalid as exc:
        raise ScheduleInvalid([f"spec.input: {exc}"]) from None
    next_tick = ticks.first_tick_after(spec.schedule, spec.time_zone, database_now(conn))
    return schedule_sql.apply(
        conn,
        namespace=namespace,
        name=schedule.name,
        spec=spec_json(spec),
        next_tick=next_tick,
        definition=spec.definition,
        version=spec.version,
        cron=spec.schedule,
        time_zone=spec.time_zone,
        input=spec.input,
        concurrency_policy=spec.concurrency_policy,
        starting_deadline_seconds=spec.starting_deadline_seconds,
        suspended=spec.suspend,
        successful_runs_kept=spec.successful_runs_history_limit,
        failed_runs_kept=spec.failed_runs_history_limit,
    )


def get_schedule(
    conn: psycopg.Connection[Any], name: str, *, namespace: str = DEFAULT_NAMESPACE
) -> schedule_sql.ScheduleRow:
    row = schedule_sql.get(conn, name, namespace=namespace)
    if row is None:
        raise NotFound(f"no schedule {qualified(namespace, name)}")
    return row


def set_suspended(
    conn: psycopg.Connection[Any],
    name: str,
    suspended: bool,
    *,
    namespace: str = DEFAULT_NAMESPACE,
) -> bool:
    """Pause or resume; False: it already was. A resumed schedule fires from its next tick
    after now: ticks while it was paused are neither fired nor counted as missed."""
    row = get_schedule(conn, name, namespace=namespace)
    next_tick = ticks.first_tick_after(row.cron, row.time_zone, database_now(conn))
    changed = schedule_sql.suspend(conn, name, suspended, next_tick, namespace=namespace)
    if changed is None:
        raise NotFound(f"no schedule {qualified(namespace, name)}")
    return changed


def delete_schedule(
    conn: psycopg.Connection[Any], name: str, *, namespace: str = DEFAULT_NAMESPACE
) -> None:
    if not schedule_sql.delete(conn, name, namespace=namespace):
        raise NotFound(f"no schedule {qualified(namespace, name)}")


def trigger(conn: psycopg.Connection[Any], name: str, *, namespace: str = DEFAULT_NAMESPACE) -> int:
    """A run now, outside the ticks and whatever the concurrency policy (a person asked for
    it); recorded in the schedule's history as `triggered`. Returns its run id."""
    with conn.transaction():
        row = get_schedule(conn, name, namespace=namespace)
        now = database_now(conn)
        started = start_run(
            conn,
            row.definition,
            version=row.version,
            input=row.input,
            idempotency_key=idempotency_key(name, now) + ":trigger",
            queue_anyway=True,
            namespace=namespace,
        )
        schedule_sql.decide(
            conn, name, [Decided(now, "triggered", started.run_id)], 0, None, namespace=namespace
        )
    return started.run_id


@dataclass(frozen=True)
class Backfilled:
    tick: datetime
    run_id: int
    created: bool  # False: this tick already had its run (fired, or backfilled before)


def backfill(
    conn: psycopg.Connection[Any],
    name: str,
    start: datetime,
    end: datetime,
    *,
    namespace: str = DEFAULT_NAMESPACE,
) -> list[Backfilled]:
    """One run per tick of the schedule in [start, end], under the tick's own idempotency key:
    a tick that already ran (fired or backfilled) keeps its run, so a backfill run twice starts
    nothing the second time. Bounded: at most MAX_BACKFILL_TICKS ticks, none before
    EARLIEST_BACKFILL, none in the future."""
    if start.tzinfo is None or end.tzinfo is None:
        raise InputInvalid("--from and --to need a UTC offset (e.g. 2026-11-01T00:00:00+00:00)")
    for flag, instant in (("--from", start), ("--to", end)):
        if _before_epoch(instant):
            raise InputInvalid(
                f"{flag} ({instant.isoformat()}) is before {EARLIEST_BACKFILL.isoformat()}, "
                "the earliest tick a backfill reaches"
            )
    if end < start:
        raise InputInvalid(f"--to ({end}) is before --from ({start})")
    with conn.transaction():
        row = get_schedule(conn, name, namespace=namespace)
        now = database_now(conn)
        if end > now:
            raise InputInvalid(f"--to ({end}) is in the future; the schedule fires those ticks")
        found = ticks.between(row.cron, row.time_zone, start, end, MAX_BACKFILL_TICKS)
        if len(found) > MAX_BACKFILL_TICKS:
            raise InputInvalid(
                f"--from {start} --to {end} spans more than {MAX_BACKFILL_TICKS} ticks of "
                f"{row.cron!r}; backfill a shorter range"
            )
        done = []
        for tick in found:
            started = start_run(
                conn,
                row.definition,
                version=row.version,
                input=row.input,
                idempotency_key=idempotency_key(name, tick),
                queue_anyway=True,
                namespace=namespace,
            )
            done.append(Backfilled(tick, started.run_id, started.created))
        schedule_sql.decide(
            conn,
            name,
            [Decided(b.tick, "backfilled", b.run_id) for b in done if b.created],
            0,
            None,
            namespace=namespace,
        )
    return done


def _before_epoch(instant: datetime) -> bool:
    """Whether ``instant`` is before EARLIEST_BACKFILL (one whose offset takes it out of
    datetime's range, at year 1 or 9999, by its year)."""
    try:
        return instant.astimezone(UTC) < EARLIEST_BACKFILL
    except OverflowError:
        return instant.year < EARLIEST_BACKFILL.year
