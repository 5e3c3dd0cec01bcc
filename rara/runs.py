"""Starting and cancelling runs, and the parent aggregation that follows step changes."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from rara.definitions.parse import spec_from_object
from rara.errors import CapabilityUnavailable, InputInvalid, NotFound
from rara.pg.queries import sync_queries
from rara.secrets import refuse_credentials

MAX_INPUT_BYTES = 256 * 1024
LIVE_WORKER_SECONDS = 30.0


@dataclass(frozen=True)
class StartedRun:
    run_id: int
    created: bool  # False: the idempotency key matched an existing run


def validate_input(value: Any) -> dict[str, Any]:
    """Run input is a JSON object of bounded size."""
    if not isinstance(value, dict):
        raise InputInvalid(f"run input must be a JSON object, got {type(value).__name__}")
    try:
        encoded = json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InputInvalid(f"run input is not JSON-serialisable: {exc}") from exc
    if len(encoded) > MAX_INPUT_BYTES:
        raise InputInvalid(f"run input is {len(encoded)} bytes; the limit is {MAX_INPUT_BYTES}")
    refuse_credentials(value, "run input")
    return value


def start_run(
    conn: psycopg.Connection[Any],
    definition: str,
    *,
    version: int | None = None,
    input: dict[str, Any] | None = None,
    idempotency_key: str | None = None,
    queue_anyway: bool = False,
) -> StartedRun:
    """Create a run and its steps in one transaction; the same idempotency key → the same run."""
    q = sync_queries()
    run_input = validate_input({} if input is None else input)
    if idempotency_key is not None and not (0 < len(idempotency_key) <= 200):
        raise InputInvalid("idempotency key must be 1..200 characters")
    with conn.transaction():
        row = q.definition_version_get(conn, name=definition, version=version)
        if row is None:
            what = f"{definition} version {version}" if version else definition
            raise NotFound(f"no workflow definition {what}")
        version_id, spec_json, retired_at = row[0], row[4], row[6]
        if retired_at is not None and version is None:
            raise NotFound(f"workflow definition {definition} is retired")
        spec = spec_from_object(spec_json)
        if not queue_anyway:
            served = {r[0] for r in q.capabilities_served(conn, alive_seconds=LIVE_WORKER_SECONDS)}
            missing = {s.capability for s in spec.steps} - served
            if missing:
                raise CapabilityUnavailable(missing)
        inserted = q.run_insert(
            conn,
            definition_version_id=version_id,
            input=Jsonb(run_input),
            idempotency_key=idempotency_key,
        )
        if inserted is None:
            return StartedRun(q.run_by_key(conn, idempotency_key=idempotency_key), created=False)
        run_id = inserted[0]
        steps = [
            {
                "key": s.key,
                "depends_on": s.depends_on,
                "capability": s.capability,
                "executor": s.executor,
                "priority": s.priority,
                "payload": {
                    "input": s.input,
                    "secrets": {k: v.model_dump() for k, v in s.secrets.items()},
                },
                "max_attempts": s.retry.max_attempts,
                "retry_initial_ms": s.retry.initial_delay,
                "retry_max_ms": s.retry.max_delay,
                "retry_coefficient": s.retry.backoff_coefficient,
                "timeout_ms": s.timeout,
                "heartbeat_timeout_ms": s.heartbeat_timeout,
            }
            for s in spec.steps
        ]
        q.steps_insert(conn, run_id=run_id, steps=Jsonb(steps))
        return StartedRun(run_id, created=True)


def cancel_run(conn: psycopg.Connection[Any], run_id: int) -> bool:
    """Cancel waiting steps now; flag running ones (NOTIFY + heartbeat answer tell their worker).
    Returns False when the run had already ended."""
    for attempt in range(3):
        try:
            return _cancel_once(conn, run_id)
        except psycopg.errors.DeadlockDetected:
            # A step of an unusual graph (a dependant with a lower id than its dependency)
            # can still cross lock orders with a completion; PostgreSQL aborted us: try again.
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


def _cancel_once(conn: psycopg.Connection[Any], run_id: int) -> bool:
    q = sync_queries()
    with conn.transaction():
        if q.run_get(conn, run_id=run_id) is None:
            raise NotFound(f"no run {run_id}")
        q.run_steps_lock(conn, run_id=run_id)
        if q.run_cancel_request(conn, run_id=run_id) is None:
            return False
        q.run_cancel_waiting_steps(conn, run_id=run_id)
        list(q.run_cancel_running_steps(conn, run_id=run_id))
        list(q.runs_refresh(conn, run_ids=[run_id]))  # the run row is ours already: no lock
        return True
