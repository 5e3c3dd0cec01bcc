"""Typed access to ``db/queries/triggers.sql``: triggers and the events they were given
(migration 0035; the rules in db/functions/triggers.sql and docs/triggers.md)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg.rows import class_row
from psycopg.types.json import Jsonb

from rara.pg.queries import Conn, many, one, run, value


@dataclass(frozen=True, slots=True)
class Applied:
    created: bool
    changed: bool  # False: the same spec was already applied


@dataclass(frozen=True, slots=True)
class Taken:
    """The trigger an event is for, held by this transaction until its commit."""

    kind: str
    definition: str
    version: int | None
    input: dict[str, Any]
    config: dict[str, Any]
    suspended: bool
    started_run_id: int | None  # the run an earlier delivery of this event started


@dataclass(frozen=True, slots=True)
class Recorded:
    outcome: str  # started, refused
    run_id: int | None
    seen: int  # deliveries of this event so far, this one included


@dataclass(frozen=True, slots=True)
class TriggerRow:
    namespace: str
    name: str
    kind: str
    definition: str
    version: int | None
    input: dict[str, Any]
    config: dict[str, Any]
    suspended: bool
    spec: dict[str, Any]
    created_at: datetime
    updated_at: datetime
    next_poll: datetime | None  # objects triggers: the next watching pass
    watch_error: str | None  # why the last pass could not watch (None: it did)
    watch_error_at: datetime | None
    objects: int  # the objects an objects trigger has seen


@dataclass(frozen=True, slots=True)
class TriggerSummary:
    namespace: str
    name: str
    kind: str
    definition: str
    version: int | None
    suspended: bool
    last_event_at: datetime | None
    last_outcome: str | None
    last_run_id: int | None
    last_run_status: str | None
    events: int


@dataclass(frozen=True, slots=True)
class EventRow:
    event_key: str
    outcome: str
    run_id: int | None
    reason: str | None
    seen: int
    first_at: datetime
    last_at: datetime
    run_status: str | None


def apply(
    conn: Conn,
    *,
    namespace: str,
    name: str,
    kind: str,
    definition: str,
    version: int | None,
    input: dict[str, Any],
    config: dict[str, Any],
    suspended: bool,
    spec: dict[str, Any],
) -> Applied:
    row = one(
        conn,
        "trigger_apply",
        class_row(Applied),
        namespace=namespace,
        name=name,
        kind=kind,
        definition=definition,
        version=version,
        input=Jsonb(input),
        config=Jsonb(config),
        suspended=suspended,
        spec=Jsonb(spec),
    )
    if row is None:
        raise AssertionError("trigger_apply returned no row")
    return row


def suspend(conn: Conn, name: str, suspended: bool, *, namespace: str) -> bool | None:
    return value(conn, "trigger_suspend", bool, name=name, suspended=suspended, namespace=namespace)


def delete(conn: Conn, name: str, *, namespace: str) -> bool:
    return bool(value(conn, "trigger_delete", bool, name=name, namespace=namespace))


def take(conn: Conn, name: str, event_key: str, *, namespace: str) -> Taken | None:
    return one(
        conn, "trigger_take", class_row(Taken), name=name, event_key=event_key, namespace=namespace
    )


def record_event(
    conn: Conn,
    name: str,
    event_key: str,
    *,
    run_id: int | None,
    reason: str | None,
    namespace: str,
) -> Recorded:
    row = one(
        conn,
        "trigger_event_record",
        class_row(Recorded),
        name=name,
        event_key=event_key,
        run_id=run_id,
        reason=reason,
        namespace=namespace,
    )
    if row is None:
        raise AssertionError("trigger_event_record returned no row")
    return row


@dataclass(frozen=True, slots=True)
class DueTrigger:
    """A watched trigger due for a pass, its row locked by this transaction."""

    namespace: str
    name: str
    kind: str  # objects, release, run
    definition: str
    version: int | None
    input: dict[str, Any]
    config: dict[str, Any]
    passes: int
    created_at: datetime
    db_now: datetime


@dataclass(frozen=True, slots=True)
class Upstream:
    """An event of a release or run trigger that no pass has recorded yet."""

    event_key: str  # move-<id>, run-<id>
    payload: dict[str, Any]


@dataclass(frozen=True, slots=True)
class SeenObject:
    key: str
    digest: str  # sha256:<hex>
    size: int
    fingerprint: str  # what the store says without reading the bytes (size and mtime or ETag)

    def as_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "digest": self.digest,
            "size": self.size,
            "fingerprint": self.fingerprint,
        }


def watch_claim(conn: Conn, limit: int) -> list[DueTrigger]:
    return many(conn, "trigger_watch_claim", class_row(DueTrigger), limit=limit)


def upstream(conn: Conn, name: str, limit: int, *, namespace: str) -> list[Upstream]:
    return many(
        conn, "trigger_upstream", class_row(Upstream), name=name, limit=limit, namespace=namespace
    )


def objects_seen(conn: Conn, name: str, *, namespace: str) -> dict[str, SeenObject]:
    rows = many(conn, "trigger_objects_seen", class_row(SeenObject), name=name, namespace=namespace)
    return {row.key: row for row in rows}


def watch_decide(
    conn: Conn,
    name: str,
    objects: list[SeenObject],
    *,
    changed: bool,
    next_poll: datetime,
    error: str | None,
    namespace: str,
) -> None:
    run(
        conn,
        "trigger_watch_decide",
        name=name,
        objects=Jsonb([o.as_json() for o in objects]),
        changed=changed,
        next_poll=next_poll,
        error=error,
        namespace=namespace,
    )


@dataclass(frozen=True, slots=True)
class NextDue:
    next_poll: datetime | None  # None: no live objects trigger
    db_now: datetime


def watch_next_due(conn: Conn) -> NextDue:
    row = one(conn, "trigger_watch_next_due", class_row(NextDue))
    if row is None:
        raise AssertionError("trigger_watch_next_due returned no row")
    return row


def event_seen(conn: Conn, name: str, event_key: str, *, namespace: str) -> bool:
    return bool(
        value(conn, "trigger_event_seen", bool, name=name, event_key=event_key, namespace=namespace)
    )


def get(conn: Conn, name: str, *, namespace: str) -> TriggerRow | None:
    return one(conn, "trigger_get", class_row(TriggerRow), name=name, namespace=namespace)


def list_all(conn: Conn, *, namespace: str | None, name: str | None = None) -> list[TriggerSummary]:
    return many(conn, "trigger_list", class_row(TriggerSummary), namespace=namespace, name=name)


def events(conn: Conn, name: str, *, namespace: str, limit: int = 20) -> list[EventRow]:
    return many(
        conn, "trigger_event_list", class_row(EventRow), name=name, namespace=namespace, limit=limit
    )


@dataclass(frozen=True, slots=True)
class Batched:
    """A debounced event, in its burst."""

    batch_id: int
    due_at: datetime  # when the burst's run is due now
    seen: int  # deliveries of this event, this one included
    events: int  # the events in the burst so far


@dataclass(frozen=True, slots=True)
class DueBatch:
    """A due burst of a debounced trigger, locked by this transaction."""

    id: int
    namespace: str
    trigger: str
    definition: str
    version: int | None
    input: dict[str, Any]
    config: dict[str, Any]
    inputs: list[dict[str, Any]]


def batch_add(
    conn: Conn,
    name: str,
    event_key: str,
    batch_key: str,
    event_input: dict[str, Any],
    *,
    window_seconds: int,
    max_delay_seconds: int,
    namespace: str,
) -> Batched:
    row = one(
        conn,
        "trigger_batch_add",
        class_row(Batched),
        name=name,
        event_key=event_key,
        batch_key=batch_key,
        input=Jsonb(event_input),
        window_seconds=window_seconds,
        max_delay_seconds=max_delay_seconds,
        namespace=namespace,
    )
    if row is None:
        raise AssertionError("trigger_batch_add returned no row")
    return row


def batch_claim(conn: Conn, limit: int) -> list[DueBatch]:
    return many(conn, "trigger_batch_claim", class_row(DueBatch), limit=limit)


def batch_close(conn: Conn, batch_id: int, *, run_id: int | None, reason: str | None) -> None:
    run(conn, "trigger_batch_close", batch_id=batch_id, run_id=run_id, reason=reason)
