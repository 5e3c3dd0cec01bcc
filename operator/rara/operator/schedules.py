"""WorkflowSchedule handlers: the spec becomes a schedule in PostgreSQL, and a timer mirrors
the schedule's state (next tick, last run, missed ticks) into the status. The operator also
runs the firing loop (rara.schedules.firing), in every replica: firing is exactly once by the
database, not by there being one firer, so a standby that fires too does no harm. The loop
starts again after any error (with a backoff), and the liveness probe fails while it does
(``firing_probe``).

An invalid spec is reported in the status (condition Ready False, SpecInvalid, the message
naming the field) and nothing is written to PostgreSQL, as for a WorkflowDefinition; so is an
input that the definition's input schemas refuse (spec.input, checked at apply). Deleting the
resource deletes the schedule and its tick history; the runs it started stay.

A resource's Kubernetes namespace is its rara namespace (rara.namespaces): the schedule lives
there and starts runs of that namespace's definition; the same name in two namespaces is two
schedules.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any

import kopf
import psycopg

from rara.errors import ScheduleInvalid
from rara.namespaces import qualified
from rara.operator import conditions, stored
from rara.operator.models import document_of, namespace_of
from rara.operator.runtime import connection
from rara.pg import schedules as schedule_sql
from rara.schedules import firing, manage
from rara.schedules.model import schedule_from_object

log = logging.getLogger(__name__)


def reconcile_schedule(
    body: kopf.Body,
    name: str,
    namespace: str | None,
    meta: kopf.Meta,
    status: kopf.Status,
    patch: kopf.Patch,
    memo: kopf.Memo,
    logger: kopf.Logger,
    **_: Any,
) -> None:
    generation = meta.get("generation")
    namespace = namespace_of(namespace)
    where = qualified(namespace, name)
    document = document_of(body, name)
    patch.status["observedGeneration"] = generation
    try:
        schedule = schedule_from_object(document)
        with connection(memo) as conn:  # refuses an input the definition's schemas refuse
            applied = manage.apply_schedule(conn, schedule, namespace=namespace)
            row = schedule_sql.get(conn, name, namespace=namespace)
    except ScheduleInvalid as exc:
        stored.refuse_spec(
            body,
            status,
            patch,
            logger,
            what=f"schedule {where}",
            problems=exc.problems,
            generation=generation,
        )
        return
    stored.report_applied(
        status,
        patch,
        logger,
        noun="schedule",
        where=where,
        applied=applied,
        generation=generation,
        mirrored=mirrored_status(row),
    )


def delete_schedule(
    name: str, namespace: str | None, memo: kopf.Memo, logger: kopf.Logger, **_: Any
) -> None:
    namespace = namespace_of(namespace)
    stored.delete_stored(
        memo,
        logger,
        what=f"schedule {qualified(namespace, name)}",
        delete=lambda conn: manage.delete_schedule(conn, name, namespace=namespace),
    )


def sync_status(
    name: str,
    namespace: str | None,
    status: kopf.Status,
    patch: kopf.Patch,
    memo: kopf.Memo,
    **_: Any,
) -> None:
    """The timer: the schedule's state into the status, patched only when it changed."""
    namespace = namespace_of(namespace)
    with connection(memo) as conn:
        row = schedule_sql.get(conn, name, namespace=namespace)
    stored.patch_changed(status, patch, mirrored_status(row))


def mirrored_status(row: schedule_sql.ScheduleRow | None) -> dict[str, Any] | None:
    if row is None:
        return None
    return {
        "nextTick": None if row.suspended else conditions.rfc3339(row.next_tick),
        "lastTick": conditions.rfc3339(row.last_tick),
        "lastRunId": row.last_run_id,
        "lastRunStatus": row.last_run_status,
        "missedTicks": row.missed_ticks,
    }


@dataclass
class Firing:
    """The firing loop's thread, how to stop it at once (it sleeps until the next tick), and
    whether it fires (``problem``, for the liveness probe)."""

    url: str
    stop: threading.Event
    thread: threading.Thread
    health: firing.Health

    @classmethod
    def start(cls, url: str) -> Firing:
        stop = threading.Event()
        health = firing.Health()
        thread = threading.Thread(
            target=_fire_until_stopped,
            args=(url, stop, health),
            name="rara-schedules",
            daemon=True,
        )
        thread.start()
        return cls(url, stop, thread, health)

    def problem(self) -> str | None:
        """None while the loop fires (or was told to stop); else why it does not."""
        if self.stop.is_set():
            return None
        if not self.thread.is_alive():
            return "the firing thread has ended"
        return self.health.problem()

    def close(self, timeout: float = 10.0) -> None:
        self.stop.set()
        try:  # wake it from its sleep
            with psycopg.connect(self.url, autocommit=True, connect_timeout=5) as conn:
                conn.execute(f"NOTIFY {firing.CHANNEL}")
        except psycopg.OperationalError:
            pass  # the database is down: the loop is in its reconnect wait, which stop ends
        self.thread.join(timeout)


def _fire_until_stopped(url: str, stop: threading.Event, health: firing.Health) -> None:
    """The thread: the firing loop, started again whatever ends it before ``stop`` (it
    catches its passes' errors itself; this is for an error of its own)."""
    while not stop.is_set():
        try:
            firing.run_forever(url, stop, health, process="rara operator")
        except Exception as exc:
            health.failed(exc)
            wait = health.backoff()
            log.exception("the schedules' firing loop ended; starting it again in %.0f s", wait)
            stop.wait(wait)


def firing_probe(memo: kopf.Memo, **_: Any) -> dict[str, str] | None:
    """kopf's liveness probe (``--liveness``): fails (HTTP 500) while the firing loop fails,
    so the kubelet restarts an operator whose schedules do not fire. A database outage does
    not fail it (firing.Health)."""
    current: Firing | None = getattr(memo, "firing", None)
    if current is None:
        return None  # this operator does not fire
    problem = current.problem()
    if problem is not None:
        raise kopf.PermanentError(f"the schedules' firing is down: {problem}")
    return {"schedules": "firing"}
