"""Kubernetes Events the operator posts outside kopf's handlers.

kopf.info/kopf.warn work only inside a handler: kopf keeps its event queue in per-object
context variables. The WorkflowRun status sync (rara.operator.runsync) is one task for all
WorkflowRuns, not a handler, so it posts through the API client it patches with. Both paths
name the same component, so `kubectl describe` and `kubectl get events` show one source.
"""

from __future__ import annotations

import logging
import os
import socket
from datetime import UTC, datetime

from kubernetes.client import (
    CoreV1Api,
    CoreV1Event,
    V1EventSource,
    V1ObjectMeta,
    V1ObjectReference,
)
from kubernetes.client.exceptions import ApiException

COMPONENT = "rara-operator"
MAX_MESSAGE = 1024  # what kopf cuts its own Event messages to

log = logging.getLogger(__name__)


def instance() -> str:
    """Which replica posted: the pod's name (the chart's POD_ID), else the host's."""
    return os.environ.get("POD_ID") or socket.gethostname()


def post(api: CoreV1Api, ref: dict[str, str], type_: str, reason: str, message: str) -> None:
    """Post one Event on the object ``ref`` (apiVersion, kind, namespace, name, uid).
    Events are auxiliary: a refused post is logged, never raised."""
    now = datetime.now(UTC)
    event = CoreV1Event(
        metadata=V1ObjectMeta(generate_name=f"{ref['name']}.", namespace=ref["namespace"]),
        involved_object=V1ObjectReference(**ref),
        type=type_,
        reason=reason,
        message=message[:MAX_MESSAGE],
        source=V1EventSource(component=COMPONENT),  # the "From" of `kubectl describe`
        reporting_component=COMPONENT,
        reporting_instance=instance(),
        first_timestamp=now,
        last_timestamp=now,
        count=1,
    )
    try:
        api.create_namespaced_event(ref["namespace"], event)
    except ApiException as exc:
        log.warning(
            f"event {reason} on {ref['namespace']}/{ref['name']} not posted: "
            f"{exc.status} {exc.reason}"
        )
