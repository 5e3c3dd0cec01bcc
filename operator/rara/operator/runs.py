"""WorkflowRun handlers: start the run once, mirror its state into the status, and cancel it
when the resource is deleted. The status is mirrored later, for all WorkflowRuns at once, by
rara.operator.runsync.

The resource's Kubernetes namespace is its run's rara namespace (rara.namespaces): the run is
of that namespace's definition, and ``resumeFrom`` refuses a run of another namespace. The
resource's uid is the idempotency key (unique in the namespace), so a retried or resumed
handler (operator restart, lost status patch) finds the run it already started instead of
starting another.
queue_anyway: workers may be scaled to zero, and the WorkerPool scaler starts them *because*
steps wait; refusing the run for lack of a live worker would deadlock that.

Before a run exists the phase says why: Waiting (no such definition yet: retried) or Refused
(invalid spec or input: final), with status.reason and a Warning Event. An accepted run gets
a Normal Event here, and each later phase one from the sync; a started run is Waiting again
while only a gate, a signal or a timer can move it on (reason ApprovalPending, SignalPending
or Timer; the message says which).

Deleting a WorkflowRun stops its work, as deleting an Argo Workflow does: the delete handler
is not optional, so kopf keeps its finalizer on the resource and the API server waits for the
cancel (docs/operator.md, "Deleting a WorkflowRun").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import kopf
import psycopg
from pydantic import ValidationError

from rara import waits
from rara.errors import InputInvalid, NotFound, ResumeRefused
from rara.namespaces import qualified
from rara.operator import conditions
from rara.operator.models import WorkflowRunSpec, namespace_of
from rara.operator.refusals import MAX_MESSAGE
from rara.operator.runtime import connection
from rara.pauses import set_paused
from rara.pg import runs as pg_runs
from rara.runs import StartedRun, cancel_run, resume_run, run_id_by_key, start_run

NOT_FOUND_RETRY_SECONDS = 10.0  # the definition may be applied in the same `kubectl apply`
# Phases before a run exists (the others are the run's own, rara.states.RunStatus):
WAITING = "Waiting"  # no such definition (or version) yet: retried
REFUSED = "Refused"  # invalid spec or input: only a new WorkflowRun can fix it
TERMINAL = {"Succeeded", "Failed", "Cancelled"}  # the run ended: nothing to cancel
SETTLED = TERMINAL | {REFUSED}  # nothing (more) to mirror


def idempotency_key(uid: str) -> str:
    return f"k8s:{uid}"


def start_workflow_run(
    body: kopf.Body,
    spec: kopf.Spec,
    uid: str,
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
    try:
        run_spec = WorkflowRunSpec.model_validate(dict(spec))
        with connection(memo) as conn:
            # One transaction: a run created paused is never leasable unpaused.
            with conn.transaction():
                if run_spec.resume_from is not None:
                    started = _resume(conn, run_spec, spec, uid, namespace)
                else:
                    started = start_run(
                        conn,
                        run_spec.definition,
                        version=run_spec.version,
                        input=run_spec.input,
                        idempotency_key=idempotency_key(uid),
                        queue_anyway=True,
                        namespace=namespace,
                    )
                if run_spec.paused and started.created:  # later: rara.operator.pausing's
                    set_paused(conn, started.run_id, True)
            mirrored = refresh_status(conn, started.run_id, status, patch)
    except (ValidationError, InputInvalid, ResumeRefused) as exc:
        # Not retried: only a new WorkflowRun (the spec is immutable) can fix it.
        reason = (
            "SpecInvalid"
            if isinstance(exc, ValidationError)
            else "InputInvalid"
            if isinstance(exc, InputInvalid)
            else "ResumeRefused"
        )
        _not_accepted(body, patch, status, REFUSED, reason, str(exc), generation)
        return
    except NotFound as exc:
        _not_accepted(body, patch, status, WAITING, "DefinitionNotFound", str(exc), generation)
        raise kopf.TemporaryError(str(exc), delay=NOT_FOUND_RETRY_SECONDS) from exc
    logger.info(
        f"run {qualified(namespace, name)} is rara run {started.run_id}"
        + ("" if started.created else " (already started)")
    )
    patch.status["observedGeneration"] = generation
    for key in ("reason", "message"):  # a Waiting one's, now past, unless the run waits
        if key not in patch.status:
            patch.status[key] = None
    _accepted(patch, status, True, "RunStarted", f"rara run {started.run_id}", generation)
    if started.created and mirrored:  # not again when a resumed handler finds its run
        kopf.info(
            body,
            reason="Accepted",
            message=f"rara run {started.run_id} of "
            f"{run_spec.definition} version {mirrored['version']} created",
        )


def _resume(
    conn: psycopg.Connection[Any],
    run_spec: WorkflowRunSpec,
    spec: kopf.Spec,
    uid: str,
    namespace: str,
) -> StartedRun:
    """``resumeFrom``: the resumed run, under the resource's idempotency key. An input the
    spec does not give is the resumed run's (the model's default ``{}`` is not a wish).
    The resumed run is in the old run's namespace (rara_run_resume), so a run of another
    namespace is refused: a WorkflowRun must not start work, or reuse results, of a namespace
    it does not live in (the run ids are global, and a team could guess another's)."""
    assert run_spec.resume_from is not None
    old = pg_runs.get(conn, run_spec.resume_from)
    if old is not None and old.namespace != namespace:
        raise ResumeRefused(
            f"run {run_spec.resume_from} is in namespace {old.namespace!r}, not {namespace!r}: "
            "a WorkflowRun resumes only a run of its own namespace"
        )
    try:
        resumed = resume_run(
            conn,
            run_spec.resume_from,
            definition=run_spec.definition,
            version=run_spec.version,
            input=run_spec.input if "input" in spec else None,
            idempotency_key=idempotency_key(uid),
        )
    except NotFound as exc:  # the run to resume will not appear later: refused for good
        raise ResumeRefused(str(exc)) from None
    return StartedRun(resumed.run_id, resumed.created)


def cancel_workflow_run(
    status: kopf.Status,
    uid: str,
    name: str,
    namespace: str | None,
    memo: kopf.Memo,
    logger: kopf.Logger,
    **_: Any,
) -> None:
    """On delete: cancel the rara run unless it has ended. A database error raises, and kopf
    retries with the finalizer kept: the resource goes only once its run is stopped."""
    namespace = namespace_of(namespace)
    if status.get("phase") in TERMINAL:
        return  # ended: nothing to stop, no database call
    with connection(memo) as conn:
        run_id = status.get("runId")
        if run_id is None:
            # Never started, or started with its status patch lost: the key says which.
            run_id = run_id_by_key(conn, idempotency_key(uid), namespace=namespace)
            if run_id is None:
                logger.info(
                    f"run {qualified(namespace, name)} never started a rara run: nothing to cancel"
                )
                return
        try:
            cancelled = cancel_run(conn, int(run_id))
        except NotFound:  # deleted from PostgreSQL by hand
            logger.info(f"run {qualified(namespace, name)}: rara run {run_id} no longer exists")
            return
    logger.info(
        f"run {qualified(namespace, name)}: rara run {run_id} "
        + ("cancelled" if cancelled else "had already ended")
    )


def refresh_status(
    conn: Any, run_id: int, status: kopf.Status, patch: kopf.Patch
) -> dict[str, Any] | None:
    """The create handler's first mirror of its run (later ones are rara.operator.runsync's);
    what it mirrored, None when the run is gone."""
    rows = pg_runs.status_many(conn, [run_id])
    if not rows:  # deleted from PostgreSQL by hand: nothing left to mirror
        return None
    mirrored = mirrored_status(rows[0])
    for key, value in changed_status(status, mirrored).items():
        patch.status[key] = value
    return mirrored


# Why a started run is Waiting (rara_run_phase: no step ready or running, a wait open), by
# the first kind of wait found in this order: a person's decision is what `kubectl get` most
# needs to show.
WAIT_REASONS = (("approval", "ApprovalPending"), ("signal", "SignalPending"), ("timer", "Timer"))


def mirrored_status(run: pg_runs.RunStatusRow) -> dict[str, Any]:
    """What a WorkflowRun's status mirrors of its run. Its phase is the run's as people read
    it (rara_run_phase): Waiting, with reason ApprovalPending, SignalPending or Timer and
    the message "waiting for approval of gate release", while only a wait can move it on."""
    phase = run.phase or run.status.value
    kinds = {w.get("kind") for w in run.waiting_for or []} if phase == "waiting" else set()
    reason = next((why for kind, why in WAIT_REASONS if kind in kinds), None)
    return {
        "runId": run.id,
        "phase": phase.capitalize(),
        "reason": reason,
        "message": waits.run_phase_text(phase, run.waiting_for) if reason else None,
        "version": run.version,
        "stepsDone": run.done,
        "stepsTotal": run.total,
        "progress": f"{run.done}/{run.total}",
        "startedAt": conditions.rfc3339(run.started_at),
        "finishedAt": conditions.rfc3339(run.finished_at),
    }


def phase_event(phase: str, status: Mapping[str, Any]) -> tuple[str, str, str] | None:
    """The Event (type, reason, message) for a run that reached ``phase``; None for Pending,
    which the create handler's Accepted Event already told. Waiting (a started run's: the
    pre-run Waiting has no run to mirror) says what it waits for."""
    run = f"rara run {status.get('runId')}"
    done = f"{status.get('progress')} steps succeeded"
    return {
        "Running": ("Normal", "Running", f"{run} is running: a worker leased its first step"),
        "Waiting": ("Normal", "Waiting", f"{run} is {status.get('message') or 'waiting'}"),
        "Paused": ("Normal", "Paused", f"{run} is paused: its steps not yet running are held"),
        "Succeeded": ("Normal", "Succeeded", f"{run} succeeded: {done}"),
        "Failed": (
            "Warning",
            "Failed",
            f"{run} failed ({done}; `rara runs show {status.get('runId')} --attempts` says why)",
        ),
        "Cancelled": ("Normal", "Cancelled", f"{run} was cancelled ({done})"),
    }.get(phase)


def changed_status(status: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of ``new`` that ``status`` lacks or differs in: an unchanged status must not
    cost an API write per tick."""
    return {key: value for key, value in new.items() if status.get(key) != value}


def _not_accepted(
    body: kopf.Body,
    patch: kopf.Patch,
    status: kopf.Status,
    phase: str,
    reason: str,
    message: str,
    generation: int | None,
) -> None:
    """No run (yet): the phase and reason `kubectl get` shows, and a Warning Event the first
    time (a retry or a resume after a restart finds the same reason and stays quiet)."""
    message = message[:MAX_MESSAGE]
    if status.get("reason") != reason:
        kopf.warn(body, reason=reason, message=message)
    patch.status["observedGeneration"] = generation
    patch.status["phase"] = phase
    patch.status["reason"] = reason
    patch.status["message"] = message
    _accepted(patch, status, False, reason, message, generation)


def _accepted(
    patch: kopf.Patch,
    status: kopf.Status,
    ok: bool,
    reason: str,
    message: str,
    generation: int | None,
) -> None:
    patch.status["conditions"] = conditions.merge(
        status.get("conditions"), conditions.condition("Accepted", ok, reason, message, generation)
    )
