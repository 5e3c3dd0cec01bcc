"""Spec models of the operator's own resources (WorkflowRun, WorkerPool).

They mirror ``crds/workflowruns.yaml`` and ``crds/workerpools.yaml`` field for field
(tests/test_crd_schema.py compares them), so a spec the API server accepted parses here, and
the operator never trusts a spec it did not validate itself (``--validate=false`` exists).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

import kopf
from pydantic import BaseModel, ConfigDict, Field, model_validator

from rara.definitions.model import CAPABILITY_PATTERN, NAME_PATTERN

GROUP = "rara.dev"
VERSION = "v1alpha1"

Capability = Annotated[str, Field(pattern=CAPABILITY_PATTERN)]


def document_of(body: Mapping[str, Any], name: str) -> dict[str, Any]:
    """The document rara validates from a resource's body: its kind and spec under its name,
    without what the API server adds (uid, status, managed fields)."""
    return {
        "apiVersion": body.get("apiVersion"),
        "kind": body.get("kind"),
        "metadata": {"name": name},
        "spec": dict(body.get("spec") or {}),
    }


def namespace_of(namespace: str | None) -> str:
    """The rara namespace of a resource: its Kubernetes namespace (rara.namespaces). kopf
    types it optional for cluster-scoped resources; rara's CRDs are all namespaced."""
    if namespace is None:
        raise kopf.PermanentError("a rara resource without a namespace: the CRD is namespaced")
    return namespace


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class WorkflowRunSpec(_Spec):
    """Start one run of a definition; the resource's uid is the run's idempotency key."""

    definition: str = Field(pattern=NAME_PATTERN)
    version: int | None = Field(default=None, ge=1)  # None: the latest version
    input: dict[str, Any] = Field(default_factory=dict)
    # Resume from failure (docs/step-cache.md, "Resume"): a new run of this rara run's version
    # and input that reuses every step that succeeded in it. version and input, when given,
    # must be that run's.
    resume_from: int | None = Field(default=None, ge=1, alias="resumeFrom")
    # The one field that may change (rara.pauses): hold the run's steps not yet leased.
    paused: bool = False


class WorkerPoolSpec(_Spec):
    """A Deployment whose replicas follow the backlog of the capabilities it serves."""

    deployment_name: str = Field(alias="deploymentName", pattern=NAME_PATTERN)
    capabilities: list[Capability] = Field(min_length=1, max_length=100)
    min_replicas: int = Field(default=0, ge=0, le=1000, alias="minReplicas")
    max_replicas: int = Field(default=10, ge=0, le=1000, alias="maxReplicas")
    target_backlog_per_replica: int = Field(
        default=10, ge=1, le=1_000_000, alias="targetBacklogPerReplica"
    )
    cooldown_seconds: int = Field(default=300, ge=0, le=86_400, alias="cooldownSeconds")

    @model_validator(mode="after")
    def _bounds_ordered(self) -> WorkerPoolSpec:
        if self.max_replicas < self.min_replicas:
            raise ValueError("maxReplicas must be >= minReplicas")
        return self
