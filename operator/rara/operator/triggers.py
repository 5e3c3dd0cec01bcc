"""WorkflowTrigger handlers: the spec becomes a trigger in PostgreSQL, and a timer mirrors the
trigger's state (events given, the last one's time and outcome, its run) into the status. The
events themselves are judged by the serving process (``rara triggers serve``; the chart's
rara-triggers Deployment), not by the operator: a trigger stored here is served by any
replica of it at once.

An invalid spec is reported in the status (condition Ready False, SpecInvalid, the message
naming the field, and an Event) and nothing is written to PostgreSQL, as for a
WorkflowSchedule; so is a constant input that the definition's input schemas refuse
(spec.input, checked at apply). ``spec.suspend`` is part of the applied spec: true pauses the
trigger, false resumes it. Deleting the resource deletes the trigger and its events; the runs
it started stay.

A resource's Kubernetes namespace is its rara namespace (rara.namespaces), as for schedules.
"""

from __future__ import annotations

from typing import Any

import kopf
import psycopg

from rara.errors import TriggerInvalid
from rara.namespaces import qualified
from rara.operator import conditions, stored
from rara.operator.models import document_of, namespace_of
from rara.operator.runtime import connection
from rara.pg.triggers import TriggerSummary
from rara.triggers import manage
from rara.triggers.model import trigger_from_object


def reconcile_trigger(
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
    patch.status["observedGeneration"] = generation
    try:
        trigger = trigger_from_object(document_of(body, name))
        with connection(memo) as conn:  # refuses a constant input the definition refuses
            applied = manage.apply_trigger(conn, trigger, namespace=namespace)
            summary = _summary(conn, name, namespace)
    except TriggerInvalid as exc:
        stored.refuse_spec(
            body,
            status,
            patch,
            logger,
            what=f"trigger {where}",
            problems=exc.problems,
            generation=generation,
        )
        return
    stored.report_applied(
        status,
        patch,
        logger,
        noun="trigger",
        where=where,
        applied=applied,
        generation=generation,
        mirrored=mirrored_status(summary),
    )


def delete_trigger(
    name: str, namespace: str | None, memo: kopf.Memo, logger: kopf.Logger, **_: Any
) -> None:
    namespace = namespace_of(namespace)
    stored.delete_stored(
        memo,
        logger,
        what=f"trigger {qualified(namespace, name)}",
        delete=lambda conn: manage.delete_trigger(conn, name, namespace=namespace),
    )


def sync_status(
    name: str,
    namespace: str | None,
    status: kopf.Status,
    patch: kopf.Patch,
    memo: kopf.Memo,
    **_: Any,
) -> None:
    """The timer: the trigger's state into the status, patched only when it changed."""
    namespace = namespace_of(namespace)
    with connection(memo) as conn:
        summary = _summary(conn, name, namespace)
    stored.patch_changed(status, patch, mirrored_status(summary))


def mirrored_status(summary: TriggerSummary | None) -> dict[str, Any] | None:
    if summary is None:
        return None
    return {
        "kind": summary.kind,
        "events": summary.events,
        "lastEventTime": conditions.rfc3339(summary.last_event_at),
        "lastOutcome": summary.last_outcome,
        "lastRunId": summary.last_run_id,
        "lastRunStatus": summary.last_run_status,
    }


def _summary(conn: psycopg.Connection[Any], name: str, namespace: str) -> TriggerSummary | None:
    """The trigger's line of ``rara triggers list`` (its event counts are kept there)."""
    return manage.trigger_summary(conn, name, namespace=namespace)
