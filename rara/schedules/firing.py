"""Firing schedules: a pass decides every due tick once, and a loop sleeps between passes.

Any number of processes may run the loop (the operator's replicas, `rara schedules run`):
exactly once comes from the database, not from there being one of them. A pass takes the due
schedules' rows with FOR UPDATE SKIP LOCKED (``schedule_claim``), starts each due tick's run
under the idempotency key of (schedule, tick) and records the tick (``schedule_decide``), in
one transaction. Killed before its commit, it leaves nothing and the next pass decides the
same ticks; killed after, the ticks are decided. Between ticks the loop sleeps until the
earliest next tick, or until a schedule changes (NOTIFY rara_schedules): no polling.

One schedule never stops the others: each is fired in a savepoint of its own, and one that
cannot be fired (its ticks cannot be planned, its statements fail) is rolled back alone and
refused (``schedule_refuse``: no pass takes it until it is applied again). An error of the
whole pass is logged and the loop starts again after a backoff; ``Health`` says meanwhile
that it is failing (the operator's liveness probe reads it).
"""

from __future__ import annotations

import hashlib
import logging
import select
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import psycopg

from rara.errors import RaraError
from rara.pg import schedules as schedule_sql
from rara.pg.schedules import Decided, DueSchedule
from rara.runs import start_run
from rara.schedules import ticks

log = logging.getLogger(__name__)

CLAIM_LIMIT = 100  # schedules per transaction; a pass goes on while it gets full batches
MAX_TICKS_PER_PASS = 100  # ticks of one schedule per pass (a long outage: several passes)
MAX_SLEEP_SECONDS = 300.0  # a lost NOTIFY or a clock step costs at most this much lateness
RECONNECT_SECONDS = 1.0  # the first wait after a failed pass; doubled each time, up to:
MAX_BACKOFF_SECONDS = 60.0
CHANNEL = "rara_schedules"


def idempotency_key(schedule: str, tick: datetime) -> str:
    """The run of ``schedule`` at ``tick``: the same key whoever starts it (a firing pass, a
    backfill), so a tick has one run. Names too long for the key's 200 characters are hashed.
    The database builds the same key (rara_schedule_run_key) to tell a schedule's runs from
    any other."""
    when = tick.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
    name = (
        schedule
        if len(schedule) <= 160
        else "sha256-" + hashlib.sha256(schedule.encode()).hexdigest()[:32]
    )
    return f"schedule:{name}:{when}"


@dataclass
class PassCounts:
    started: int = 0
    skipped: int = 0
    refused: int = 0
    missed: int = 0
    schedules: int = 0
    refused_schedules: int = 0  # schedules refused by this pass (schedule_refuse)
    retried: int = 0  # schedules rolled back by a conflict (a deadlock): the next pass's


class Unplannable(Exception):
    """A schedule whose ticks cannot be computed: its cron or zone as stored, or cronsim."""


def fire_due(conn: psycopg.Connection[Any]) -> PassCounts:
    """One pass: every due tick of every due schedule decided, in batches of CLAIM_LIMIT
    schedules, each batch one transaction and each schedule a savepoint in it."""
    counts = PassCounts()
    while True:
        with conn.transaction():
            due = schedule_sql.claim(conn, CLAIM_LIMIT)
            for schedule in due:
                _fire_alone(conn, schedule, counts)
        counts.schedules += len(due)
        if len(due) < CLAIM_LIMIT:
            return counts


def _fire_alone(conn: psycopg.Connection[Any], schedule: DueSchedule, counts: PassCounts) -> None:
    """One schedule's ticks in a savepoint: what goes wrong with it is rolled back alone and
    the others fire. A lost connection is the whole pass's (the caller's retry); a conflict
    with another transaction (a deadlock) leaves it due for the next pass; anything else
    refuses it, with the reason, until it is applied again."""
    where = f"{schedule.namespace}/{schedule.name}"
    try:
        with conn.transaction():
            _fire(conn, schedule, counts)
        return
    except psycopg.errors.TransactionRollback as exc:  # before OperationalError, its base
        log.warning("schedule %s: rolled back (%s); the next pass fires it", where, exc)
        counts.retried += 1
        return
    except psycopg.OperationalError:
        raise
    except Unplannable as exc:
        reason = f"cannot plan its ticks: {exc}"
    except Exception as exc:
        reason = f"firing failed: {type(exc).__name__}: {exc}"
    log.error("schedule %s refused: %s; it fires again once applied again", where, reason)
    schedule_sql.refuse(conn, schedule.name, reason[:500], namespace=schedule.namespace)
    counts.refused_schedules += 1


def _plan(schedule: DueSchedule) -> ticks.Plan:
    problem = ticks.cron_problem(schedule.cron) or ticks.zone_problem(schedule.time_zone)
    if problem is not None:
        raise Unplannable(problem)
    try:
        return ticks.plan(
            schedule.cron,
            schedule.time_zone,
            schedule.next_tick,
            schedule.db_now,
            schedule.starting_deadline_seconds,
            MAX_TICKS_PER_PASS,
        )
    except Exception as exc:  # whatever cronsim or zoneinfo raise on a row they cannot read
        raise Unplannable(f"{type(exc).__name__}: {exc}") from exc


def _fire(conn: psycopg.Connection[Any], schedule: DueSchedule, counts: PassCounts) -> None:
    plan = _plan(schedule)
    if plan.next_tick is None:
        # cronsim found no tick within 50 years after these: nothing would move next_tick,
        # and every pass would take the schedule again at once, forever.
        after = plan.fire[-1] if plan.fire else schedule.next_tick
        raise Unplannable(f"{schedule.cron!r} has no tick within 50 years after {after}")
    active = schedule.last_run_id if schedule.last_run_ended is False else None
    decided: list[Decided] = []
    for i, tick in enumerate(plan.fire):
        later = plan.fire[i + 1] if i + 1 < len(plan.fire) else None
        if schedule.concurrency_policy == "Replace" and later is not None:
            # Only the newest due tick would survive: the earlier ones start nothing.
            decided.append(Decided(tick, "skipped", reason=f"replaced by the tick of {later}"))
            continue
        if schedule.concurrency_policy == "Forbid" and active is not None:
            decided.append(Decided(tick, "skipped", reason=f"run {active} has not ended"))
            continue
        if schedule.concurrency_policy == "Replace" and active is not None:
            # The cancel path of `rara runs cancel`, for this schedule's last run only (the
            # database refuses any other); a run that ended is a no-op.
            schedule_sql.cancel_run(conn, schedule.name, active, namespace=schedule.namespace)
        outcome = _start(conn, schedule, tick)
        decided.append(outcome)
        if outcome.run_id is not None:
            active = outcome.run_id
    schedule_sql.decide(
        conn, schedule.name, decided, plan.missed, plan.next_tick, namespace=schedule.namespace
    )
    counts.started += sum(d.outcome == "started" for d in decided)
    counts.skipped += sum(d.outcome == "skipped" for d in decided)
    counts.refused += sum(d.outcome == "refused" for d in decided)
    counts.missed += plan.missed
    if plan.missed:
        log.warning(
            "schedule %s/%s: %d ticks missed their deadline",
            schedule.namespace,
            schedule.name,
            plan.missed,
        )


def _start(conn: psycopg.Connection[Any], schedule: DueSchedule, tick: datetime) -> Decided:
    """The tick's run (queued even when no worker is up: a pool scales from the backlog); a
    refusal (no such definition, an input its schemas refuse) is recorded, not raised, so one
    schedule's problem holds up no other."""
    try:
        with conn.transaction():  # a savepoint: a refused start leaves the pass intact
            started = start_run(
                conn,
                schedule.definition,
                version=schedule.version,
                input=schedule.input,
                idempotency_key=idempotency_key(schedule.name, tick),
                queue_anyway=True,
                namespace=schedule.namespace,
            )
    except RaraError as exc:
        log.warning(
            "schedule %s/%s: tick %s refused: %s", schedule.namespace, schedule.name, tick, exc
        )
        return Decided(tick, "refused", reason=str(exc)[:500])
    return Decided(tick, "started", run_id=started.run_id)


def seconds_until_due(conn: psycopg.Connection[Any]) -> float:
    """How long the loop may sleep: until the earliest next tick, by the database's clock."""
    due = schedule_sql.next_due(conn)
    if due.next_tick is None:
        return MAX_SLEEP_SECONDS
    return min(MAX_SLEEP_SECONDS, max(0.0, (due.next_tick - due.db_now).total_seconds()))


class Health:
    """How the firing loop is doing, for a probe in another thread: failing from an error of a
    pass until a pass completes again. A database outage is not counted as failing (the loop
    reconnects by itself, and restarting its process would not bring the database back)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._failures = 0
        self._error: str | None = None
        self._since: float | None = None

    def passed(self) -> None:
        with self._lock:
            self._failures, self._error, self._since = 0, None, None

    def failed(self, exc: BaseException) -> None:
        with self._lock:
            self._failures += 1
            self._error = f"{type(exc).__name__}: {exc}"[:500]
            self._since = self._since or time.monotonic()

    def backoff(self) -> float:
        """The wait before the next try: RECONNECT_SECONDS, doubled with each failure in a
        row, at most MAX_BACKOFF_SECONDS."""
        with self._lock:
            exponent = max(0, min(self._failures - 1, 16))
        return min(MAX_BACKOFF_SECONDS, RECONNECT_SECONDS * 2.0**exponent)

    def problem(self) -> str | None:
        """None while firing; else the error, and for how long no pass has completed."""
        with self._lock:
            if self._error is None or self._since is None:
                return None
            down = time.monotonic() - self._since
            return f"{self._error} (failing for {down:.0f} s, {self._failures} tries)"


def run_forever(
    url: str,
    stop: threading.Event | None = None,
    health: Health | None = None,
    process: str = "rara schedules run",
) -> None:
    """Fire due ticks, then sleep until the next one or a schedule change; reconnect after a
    database outage (a pass cut off by it committed nothing). Any other error of a pass is
    logged, told to ``health``, and the loop starts again after a backoff: firing stops only
    when ``stop`` is set. The connection is named "``process`` (schedule firing)": while it is
    open, `rara schedules list`, `rara status` and the dashboard know that something fires
    (schedule_sql.FiringSeen)."""
    stop = stop or threading.Event()
    health = health or Health()
    name = f"{process} {schedule_sql.FIRING_SUFFIX}"
    while not stop.is_set():
        try:
            with psycopg.connect(url, autocommit=True, application_name=name) as conn:
                conn.execute(f"LISTEN {CHANNEL}")
                _loop(conn, stop, health)
        except psycopg.OperationalError as exc:
            log.warning("schedules: database unavailable (%s); reconnecting", exc)
            stop.wait(RECONNECT_SECONDS)
        except Exception as exc:
            health.failed(exc)
            wait = health.backoff()
            log.exception("schedules: a firing pass failed; trying again in %.0f s", wait)
            stop.wait(wait)


def _loop(conn: psycopg.Connection[Any], stop: threading.Event, health: Health) -> None:
    while not stop.is_set():
        counts = fire_due(conn)
        health.passed()
        if counts.retried:
            stop.wait(RECONNECT_SECONDS)  # a conflict: not at once again
            continue
        wait = seconds_until_due(conn)
        if wait > 0:
            sleep_until_notified(conn, wait)


def sleep_until_notified(conn: psycopg.Connection[Any], seconds: float) -> None:
    """Block until a notification arrives on ``conn`` or ``seconds`` pass, in one select():
    psycopg's own ``notifies(timeout=…)`` wakes every 0.1 s (to notice Ctrl-C), which would
    be CPU between ticks. Notifications that arrived during the pass are in psycopg's
    backlog, not on the socket: they end the sleep at once."""
    if any(True for _ in conn.notifies(timeout=0)):
        return
    readable, _, _ = select.select([conn.fileno()], [], [], seconds)
    if readable:
        for _ in conn.notifies(timeout=0):  # read them, so the socket is quiet again
            pass
