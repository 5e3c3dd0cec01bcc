"""What people do to triggers: apply, pause, resume, delete, and read them with their events.
What an event does is rara.triggers.events."""

from __future__ import annotations

from typing import Any

import psycopg

from rara.errors import InputInvalid, NotFound, TriggerInvalid
from rara.namespaces import DEFAULT_NAMESPACE, qualified
from rara.pg import triggers as trigger_sql
from rara.pg.triggers import Applied, EventRow, TriggerRow, TriggerSummary
from rara.runs import check_input
from rara.triggers.model import WorkflowTrigger, spec_json


def apply_trigger(
    conn: psycopg.Connection[Any],
    trigger: WorkflowTrigger,
    *,
    namespace: str = DEFAULT_NAMESPACE,
) -> Applied:
    """Create or change the trigger of this name in ``namespace`` (its runs start there, of
    that namespace's definition); the same document again changes nothing. A constant input
    that a start of its definition would refuse now is refused here (TriggerInvalid naming
    ``spec.input`` and the field), and nothing is written; the fields each event fills are
    checked at each event, when their values are known."""
    spec = trigger.spec
    try:
        check_input(
            conn,
            spec.definition,
            version=spec.version,
            input=spec.input,
            namespace=namespace,
            filled_later=spec.filled_by_events,
        )
    except InputInvalid as exc:
        raise TriggerInvalid([f"spec.input: {exc}"]) from None
    return trigger_sql.apply(
        conn,
        namespace=namespace,
        name=trigger.name,
        kind=spec.kind,
        definition=spec.definition,
        version=spec.version,
        input=spec.input,
        config=spec.config,
        suspended=spec.suspend,
        spec=spec_json(spec),
    )


def get_trigger(
    conn: psycopg.Connection[Any], name: str, *, namespace: str = DEFAULT_NAMESPACE
) -> TriggerRow:
    row = trigger_sql.get(conn, name, namespace=namespace)
    if row is None:
        raise NotFound(f"no trigger {qualified(namespace, name)}")
    return row


def list_triggers(conn: psycopg.Connection[Any], *, namespace: str | None) -> list[TriggerSummary]:
    """The triggers of ``namespace`` (None: every namespace the caller reads)."""
    return trigger_sql.list_all(conn, namespace=namespace)


def trigger_summary(
    conn: psycopg.Connection[Any], name: str, *, namespace: str
) -> TriggerSummary | None:
    """One trigger's line of ``rara triggers list`` (None: no such trigger)."""
    found = trigger_sql.list_all(conn, namespace=namespace, name=name)
    return found[0] if found else None


def trigger_events(
    conn: psycopg.Connection[Any], name: str, *, namespace: str = DEFAULT_NAMESPACE, limit: int = 20
) -> list[EventRow]:
    return trigger_sql.events(conn, name, namespace=namespace, limit=limit)


def set_suspended(
    conn: psycopg.Connection[Any],
    name: str,
    suspended: bool,
    *,
    namespace: str = DEFAULT_NAMESPACE,
) -> bool:
    """Pause or resume; False: it already was. Events that come while a trigger is paused are
    refused (the sender is told, and may deliver them again after the resume)."""
    changed = trigger_sql.suspend(conn, name, suspended, namespace=namespace)
    if changed is None:
        raise NotFound(f"no trigger {qualified(namespace, name)}")
    return changed


def delete_trigger(
    conn: psycopg.Connection[Any], name: str, *, namespace: str = DEFAULT_NAMESPACE
) -> None:
    if not trigger_sql.delete(conn, name, namespace=namespace):
        raise NotFound(f"no trigger {qualified(namespace, name)}")
