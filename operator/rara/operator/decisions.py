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

from typing import Any

import kopf
import psycopg
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rara import waits
from rara.errors import NotFound, WaitRefused
from rara.operator.runtime import connection
from rara.pg.waits import Decided, Signalled

RETRY_SECONDS = 5.0
# What the database says of a step whose dependencies still run: not an error, not yet.
NOT_YET = "blocked on its dependencies"


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


def _refused(body: kopf.Body, what: str, exc: Exception) -> dict[str, Any]:
    message = str(exc)
    kopf.warn(body, reason="Refused", message=f"{what}: {message}")
    return {"accepted": False, "message": message}


def _signalled(entry: SignalEntry, sent: Signalled) -> dict[str, Any]:
    return {
        "name": entry.name,
        "accepted": sent.accepted,  # False: its key was taken before (nothing changed)
        "step": sent.step_key,
        "sentAt": sent.sent_at.isoformat(),
    }


def _decided(entry: ApprovalEntry, decided: Decided) -> dict[str, Any]:
    return {
        "step": entry.step,
        "accepted": True,
        "decision": decided.decision,
        "decidedBy": decided.decided_by,
        "decidedAt": decided.decided_at.isoformat(),
        "recorded": decided.recorded,  # False: the same decision was made before
    }


def apply_signals(
    body: kopf.Body, status: kopf.Status, patch: kopf.Patch, memo: kopf.Memo, **_: Any
) -> None:
    """Send each signal of ``signals`` once, in order (its key: its own, else its name)."""
    entries = list(body.get("signals") or [])
    done = list(status.get("signals") or [])
    if len(done) >= len(entries):
        return
    run_id = _run_id(status)
    waiting = False
    with connection(memo) as conn:
        for raw in entries[len(done) :]:
            try:
                entry = SignalEntry.model_validate(dict(raw))
                sent = waits.signal(conn, run_id, entry.name, entry.payload, entry.key)
                done.append(_signalled(entry, sent))
            except WaitRefused as exc:
                if NOT_YET in str(exc):
                    waiting = True  # in order: the later ones wait too
                    break
                done.append({"name": dict(raw).get("name"), **_refused(body, "signal", exc)})
            except (ValidationError, NotFound) as exc:
                done.append({"name": dict(raw).get("name"), **_refused(body, "signal", exc)})
    patch.status["signals"] = done
    if waiting:
        raise kopf.TemporaryError("a signalled step is not waiting yet", delay=RETRY_SECONDS)


def apply_approvals(
    body: kopf.Body, status: kopf.Status, patch: kopf.Patch, memo: kopf.Memo, **_: Any
) -> None:
    """Record each decision of ``approvals`` once, in order, as its ``by``."""
    entries = list(body.get("approvals") or [])
    done = list(status.get("approvals") or [])
    if len(done) >= len(entries):
        return
    run_id = _run_id(status)
    waiting = False
    with connection(memo) as conn:
        for raw in entries[len(done) :]:
            step = dict(raw).get("step")
            try:
                entry = ApprovalEntry.model_validate(dict(raw))
                decided = waits.decide(
                    conn,
                    run_id,
                    entry.step,
                    approve=entry.decision == "approve",
                    reason=entry.reason,
                    identity=entry.by,
                )
                done.append(_decided(entry, decided))
            except WaitRefused as exc:
                if NOT_YET in str(exc):
                    waiting = True
                    break
                done.append({"step": step, **_refused(body, "approval", exc)})
            except (ValidationError, NotFound, psycopg.errors.InsufficientPrivilege) as exc:
                done.append({"step": step, **_refused(body, "approval", exc)})
    patch.status["approvals"] = done
    if waiting:
        raise kopf.TemporaryError("the approval step is not waiting yet", delay=RETRY_SECONDS)
