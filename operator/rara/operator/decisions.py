"""Signals and approval decisions made with kubectl (docs/waits.md, "On Kubernetes").

A WorkflowRun's spec is immutable; beside it, two append-only lists take what people and
systems add later: ``signals`` ({name, key?, payload?}) and ``approvals`` ({step, decision:
approve|reject, reason?, by}). The CRD refuses a change to an entry already there; the chart's
ValidatingAdmissionPolicy refuses an approval whose ``by`` is not the user who adds it, so the
name recorded is the API server's authenticated user (RBAC on ``patch workflowruns`` says who
may add at all). The operator hands each entry to the database (rara_run_signal,
rara_approval_decide with ``by`` as the identity), where each counts once whatever is retried,
and mirrors the outcome per entry in ``status.signals`` / ``status.approvals``.

An entry for a step that is not waiting yet (its dependencies still run) is retried every
``RETRY_SECONDS``; one the database refuses for good (decided the other way, not an approver,
no such step) is mirrored with the refusal and an Event, and not retried.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import kopf
import psycopg
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rara import waits
from rara.errors import NotFound, WaitNotYet, WaitRefused
from rara.operator.runtime import connection

RETRY_SECONDS = 5.0


class _Entry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SignalEntry(_Entry):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
    key: str | None = Field(default=None, min_length=1, max_length=200)
    payload: Any = None


class ApprovalEntry(_Entry):
    step: str = Field(pattern=r"^[a-z0-9]([a-z0-9_-]{0,61}[a-z0-9])?$")
    decision: str = Field(pattern=r"^(approve|reject)$")
    reason: str | None = Field(default=None, max_length=2000)
    by: str = Field(min_length=1, max_length=200)


def _run_id(status: kopf.Status) -> int:
    run_id = status.get("runId")
    if not run_id:  # the create handler has not started it yet
        raise kopf.TemporaryError("the run has not started yet", delay=RETRY_SECONDS)
    return int(run_id)


def _signal(conn: psycopg.Connection[Any], run_id: int, raw: dict[str, Any]) -> dict[str, Any]:
    entry = SignalEntry.model_validate(raw)
    sent = waits.signal(conn, run_id, entry.name, entry.payload, entry.key)
    return {
        "name": entry.name,
        "accepted": sent.accepted,  # False: its key was taken before (nothing changed)
        "step": sent.step_key,
        "sentAt": sent.sent_at.isoformat(),
    }


def _decide(conn: psycopg.Connection[Any], run_id: int, raw: dict[str, Any]) -> dict[str, Any]:
    entry = ApprovalEntry.model_validate(raw)
    decided = waits.decide(
        conn,
        run_id,
        entry.step,
        approve=entry.decision == "approve",
        reason=entry.reason,
        identity=entry.by,
    )
    return {
        "step": entry.step,
        "accepted": True,
        "decision": decided.decision,
        "decidedBy": decided.decided_by,
        "decidedAt": decided.decided_at.isoformat(),
        "recorded": decided.recorded,  # False: the same decision was made before
    }


Apply = Callable[[psycopg.Connection[Any], int, dict[str, Any]], dict[str, Any]]


def _apply_entries(
    field: str, named: str, apply: Apply, body: kopf.Body, status: kopf.Status,
    patch: kopf.Patch, memo: kopf.Memo,
) -> None:  # fmt: skip
    """Hand each entry of ``body[field]`` not yet in ``status[field]`` to ``apply``, in order,
    and mirror what each did. An entry for a step that does not wait yet stops the pass (the
    later ones wait too) and is tried again in RETRY_SECONDS; one refused for good is
    mirrored with the refusal (``named``: the entry's field that names it) and a Warning."""
    entries = list(body.get(field) or [])
    done = list(status.get(field) or [])
    if len(done) >= len(entries):
        return
    run_id = _run_id(status)
    not_yet = False
    with connection(memo) as conn:
        for raw in entries[len(done) :]:
            try:
                done.append(apply(conn, run_id, dict(raw)))
            except WaitNotYet:
                not_yet = True
                break
            except (
                ValidationError, NotFound, WaitRefused, psycopg.errors.InsufficientPrivilege
            ) as exc:  # fmt: skip
                kopf.warn(body, reason="Refused", message=f"{field}: {exc}")
                done.append({named: dict(raw).get(named), "accepted": False, "message": str(exc)})
    patch.status[field] = done
    if not_yet:
        raise kopf.TemporaryError(f"{field}: a step is not waiting yet", delay=RETRY_SECONDS)


def apply_signals(
    body: kopf.Body, status: kopf.Status, patch: kopf.Patch, memo: kopf.Memo, **_: Any
) -> None:
    """Send each signal of ``signals`` once, in order (its key: its own, else its name)."""
    _apply_entries("signals", "name", _signal, body, status, patch, memo)


def apply_approvals(
    body: kopf.Body, status: kopf.Status, patch: kopf.Patch, memo: kopf.Memo, **_: Any
) -> None:
    """Record each decision of ``approvals`` once, in order, as its ``by``."""
    _apply_entries("approvals", "step", _decide, body, status, patch, memo)
