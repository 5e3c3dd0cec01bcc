"""WorkerPool timer: read the backlog, decide (rara.operator.scaling), set the replicas.

Replicas are set through the Deployment's scale subresource, so the operator needs only
``deployments/scale`` get+patch, not the right to rewrite Deployments. Every decision, even
"hold", is recorded in the pool's status: why a pool is at N replicas is visible with
``kubectl get workerpools``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import kopf
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from rara import freshness, metrics
from rara.operator.models import WorkerPoolSpec
from rara.operator.runtime import connection, runtime_of
from rara.operator.scaling import Decision, Policy, Window, decide
from rara.pg import runs, steps

MERGE_PATCH = "application/merge-patch+json"


def scale_pool(
    body: kopf.Body,
    spec: kopf.Spec,
    name: str,
    namespace: str | None,
    meta: kopf.Meta,
    status: kopf.Status,
    patch: kopf.Patch,
    memo: kopf.Memo,
    logger: kopf.Logger,
    **_: Any,
) -> None:
    _record(patch, status, observedGeneration=meta.get("generation"))
    try:
        pool = WorkerPoolSpec.model_validate(dict(spec))
    except ValidationError as exc:
        _record(patch, status, lastDecision=f"invalid spec: {exc}"[:1000])
        return
    with connection(memo) as conn:
        rows = steps.backlog(conn)
        waiting = runs.waiting_count(conn)
        judged = freshness.freshness(conn, namespace=None)
    export_metrics(rows, waiting, judged)
    served = set(pool.capabilities)
    # A capability's concurrency limit caps what it adds: the lease would not run more, so
    # more replicas would idle (rara_capability_limits, docs/limits.md).
    backlog = sum(row.workable for row in rows if row.capability in served)

    if namespace is None:
        raise kopf.PermanentError("WorkerPool must be namespaced")
    apps = client.AppsV1Api(runtime_of(memo).kube)
    try:
        scale = apps.read_namespaced_deployment_scale(pool.deployment_name, namespace)
    except ApiException as exc:
        if exc.status == 404:
            _record(
                patch,
                status,
                backlog=backlog,
                lastDecision=f"deployment {pool.deployment_name} not found",
            )
            return
        raise kopf.TemporaryError(
            f"reading scale of {pool.deployment_name}: {exc.reason}", delay=10
        ) from exc
    current = int((scale.spec and scale.spec.replicas) or 0)
    now = datetime.now(UTC)
    decision = decide(
        _policy(pool), backlog=backlog, current=current, now=now, window=_window(status)
    )
    if decision.changes(current):
        apps.patch_namespaced_deployment_scale(
            pool.deployment_name,
            namespace,
            {"spec": {"replicas": decision.replicas}},
            _content_type=MERGE_PATCH,
        )
        message = (
            f"{pool.deployment_name}: {current} -> {decision.replicas} replicas ({decision.reason})"
        )
        logger.info(message)
        kopf.info(body, reason="Scaled", message=message)
        _record(patch, status, lastScaleTime=_stamp(now))
    _record(patch, status, **_fields(decision, backlog))


def export_metrics(
    rows: list[steps.Backlog], waiting: dict[str, int], judged: list[freshness.Freshness]
) -> None:
    """What the timer read, for dashboards and alerts: rara_backlog_steps per capability,
    rara_runs_waiting by what the runs wait for (an approval: a person is needed), and
    rara_stale / rara_freshness_age_seconds per declared freshness (cleared first: a retired
    definition's series goes)."""
    for row in rows:
        metrics.BACKLOG.labels(row.capability, "ready").set(row.ready)
        metrics.BACKLOG.labels(row.capability, "running").set(row.running)
    for kind, count in waiting.items():
        metrics.RUNS_WAITING.labels(kind).set(count)
    metrics.STALE.clear()
    metrics.FRESHNESS_AGE.clear()
    for f in judged:
        metrics.STALE.labels(f.namespace, f.kind, f.name).set(1 if f.stale else 0)
        metrics.FRESHNESS_AGE.labels(f.namespace, f.kind, f.name).set(f.age.total_seconds())


def _policy(pool: WorkerPoolSpec) -> Policy:
    return Policy(
        pool.min_replicas, pool.max_replicas, pool.target_backlog_per_replica, pool.cooldown_seconds
    )


def _fields(decision: Decision, backlog: int) -> dict[str, Any]:
    window = decision.window
    return {
        "backlog": backlog,
        "desiredReplicas": decision.desired,
        "replicas": decision.replicas,
        "lastDecision": decision.reason,
        "scaleDownSince": _stamp(window.since) if window else None,
        "scaleDownTo": window.peak if window else None,
    }


def _window(status: kopf.Status) -> Window | None:
    since, peak = status.get("scaleDownSince"), status.get("scaleDownTo")
    if not since or peak is None:
        return None
    return Window(datetime.fromisoformat(str(since).replace("Z", "+00:00")), int(peak))


def _record(patch: kopf.Patch, status: kopf.Status, **fields: Any) -> None:
    """Patch only changed fields: an idle pool must not write its status every tick."""
    for key, value in fields.items():
        if status.get(key) != value:
            patch.status[key] = value


def _stamp(moment: datetime) -> str:
    # Microseconds: truncating to the second would let a cooldown end up to 1s early.
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
