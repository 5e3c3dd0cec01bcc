"""What every watched trigger's pass does with an event it found: start its run under the
event's key and record the event beside it, in the pass's transaction; and what a pass counts."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psycopg

from rara.errors import InputInvalid, NotFound
from rara.pg import triggers as trigger_sql
from rara.pg.triggers import DueTrigger, SeenObject
from rara.runs import StartedRun, start_run, validate_input


@dataclass
class PassCounts:
    triggers: int = 0
    started: int = 0  # runs started
    unchanged: int = 0  # triggers with no new event
    refused: int = 0  # events whose run could not start (recorded as refused events)
    unavailable: int = 0  # triggers whose source could not be watched
    hashed: int = 0  # objects whose bytes were read


@dataclass
class Found:
    """What one trigger's pass found: its events handled, and what it records."""

    events: int = 0
    seen: list[SeenObject] = field(default_factory=list)  # objects: new fingerprints to record
    more: bool = False  # a bound was reached: the rest wait for the next pass, due at once


def run_key(trigger: str, event_key: str) -> str:
    """The idempotency key of the run an event starts: one per (trigger, event) in a
    namespace, within the key's 200 characters (a long pair is hashed)."""
    key = f"trigger:{trigger}:{event_key}"
    if len(key) <= 200:
        return key
    digest = hashlib.sha256(f"{trigger}\0{event_key}".encode()).hexdigest()
    return f"trigger:sha256-{digest}"


@dataclass(frozen=True, slots=True)
class Begun:
    """An event's start as recorded: its run (created now, or found: the event came before),
    or why none."""

    run_id: int | None
    created: bool
    reason: str | None
    seen: int  # deliveries of the event recorded, this one included


def start_event(
    conn: psycopg.Connection[Any],
    *,
    namespace: str,
    trigger: str,
    definition: str,
    version: int | None,
    event_key: str,
    run_input: Callable[[], dict[str, Any]],
) -> Begun:
    """The event's run, under ``run_key(trigger, event_key)``, and the event recorded beside
    it, in the caller's transaction. ``run_input`` builds the input (InputInvalid: refused).
    A refused start — the input, the schemas, the definition gone — is recorded as a refused
    event with the reason: the same event would be refused again, and a trigger fixed
    meanwhile starts a run at the next one (a webhook's sender may send it again)."""
    started = start_refusable(
        conn,
        namespace=namespace,
        definition=definition,
        version=version,
        key=run_key(trigger, event_key),
        run_input=run_input,
    )
    reason = started if isinstance(started, str) else None
    run_id = None if isinstance(started, str) else started.run_id
    recorded = trigger_sql.record_event(
        conn, trigger, event_key, run_id=run_id, reason=reason, namespace=namespace
    )
    created = not isinstance(started, str) and started.created
    return Begun(run_id, created, reason, recorded.seen)


def start_refusable(
    conn: psycopg.Connection[Any],
    *,
    namespace: str,
    definition: str,
    version: int | None,
    key: str,
    run_input: Callable[[], dict[str, Any]],
) -> StartedRun | str:
    """A trigger's run under ``key``, in a savepoint of the caller's transaction; or the
    reason it was refused (the input, the schemas, the definition gone), nothing written, for
    the caller to record. Whatever workers are alive: the fleet may be scaled to zero, and
    the backlog wakes it."""
    try:
        with conn.transaction():
            return start_run(
                conn,
                definition,
                version=version,
                input=validate_input(run_input()),
                idempotency_key=key,
                queue_anyway=True,
                namespace=namespace,
            )
    except (InputInvalid, NotFound) as exc:
        return str(exc)


def start_watched(
    conn: psycopg.Connection[Any],
    trigger: DueTrigger,
    event_key: str,
    event_input: dict[str, Any],
    counts: PassCounts,
) -> None:
    """A watched trigger's event started (start_event), counted."""
    begun = start_event(
        conn,
        namespace=trigger.namespace,
        trigger=trigger.name,
        definition=trigger.definition,
        version=trigger.version,
        event_key=event_key,
        run_input=lambda: {**trigger.input, **event_input},
    )
    if begun.run_id is None:
        counts.refused += 1
    else:
        counts.started += 1
