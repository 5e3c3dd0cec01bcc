"""Signals and approval decisions with kubectl (docs/waits.md, "On Kubernetes"), against a real
API server and PostgreSQL: a WorkflowRun's `signals` and `approvals` lists are append-only, the
chart's ValidatingAdmissionPolicy makes an approval's `by` the requesting user, and the
operator records each entry once, mirrored in the status."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import psycopg
import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from rara.pg import waits as wait_sql
from tests.support.definitions import apply

from .apiserver import KubeFixture
from .test_operator import (
    MERGE,
    Objects,
    Operator,
    condition,
    db,
    eventually,
    objects,
    operator,
)
from .test_operator_chart import create, render
from .test_operator_crds import GROUP, VERSION, rara_crds

pytestmark = pytest.mark.k8s
__all__ = ["db", "objects", "operator", "rara_crds"]  # fixtures, used by name

GATED = [
    {"key": "ready", "wait": {"signal": "export-done"}},
    {"key": "gate", "dependsOn": ["ready"], "approval": {"show": ["ready.result.payload"]}},
]


def _me(api: client.ApiClient) -> str:
    review = client.AuthenticationV1Api(api).create_self_subject_review(
        client.V1SelfSubjectReview(api_version="authentication.k8s.io/v1", kind="SelfSubjectReview")
    )
    return str(review.status.user_info.username)


def _append(objects: Objects, name: str, field: str, entries: list[dict[str, Any]]) -> None:
    current = (objects.get("workflowruns", name) or {}).get(field) or []
    objects.patch("workflowruns", name, {field: [*current, *entries]})


def test_kubectl_signals_and_decides_a_run(
    operator: Operator, objects: Objects, db: psycopg.Connection[Any], namespace: str
) -> None:
    apply(db, "gated", GATED, namespace=namespace)
    objects.create("workflowruns", "WorkflowRun", "nightly", {"definition": "gated"})
    run_id = eventually(
        lambda: objects.status("workflowruns", "nightly").get("runId"), what="run started"
    )
    me = _me(objects.api.api_client)
    # Recorded as the user the API server authenticated, vouched for by the operator's login
    # (rara_operator is in rara_vouch: migration 0025).
    vouched = f"{me} via {urlsplit(operator.config.database_url).username}"
    # Decided before the gate waits: retried until it does (its dependency waits for a signal).
    _append(
        objects, "nightly", "approvals",
        [{"step": "gate", "decision": "approve", "by": me, "reason": "export looks right"}],
    )  # fmt: skip
    _append(objects, "nightly", "signals", [{"name": "export-done", "payload": {"rows": 12}}])
    signals = eventually(
        lambda: objects.status("workflowruns", "nightly").get("signals"), what="signal mirrored"
    )
    assert signals[0]["accepted"] is True
    assert signals[0]["step"] == "ready"
    approvals = eventually(
        lambda: objects.status("workflowruns", "nightly").get("approvals"),
        timeout=40,
        what="decision mirrored",
    )
    assert approvals[0]["decision"] == "approved"
    assert approvals[0]["decidedBy"] == vouched
    status = eventually(
        lambda: (s := objects.status("workflowruns", "nightly")).get("phase") == "Succeeded" and s,
        what="phase Succeeded",
    )
    assert condition(status, "Accepted")["status"] == "True"
    recorded = wait_sql.approval(db, int(run_id), "gate")
    assert recorded is not None
    assert (recorded.decision, recorded.decided_by) == ("approved", vouched)
    assert recorded.reason == "export looks right"
    assert recorded.evidence["shown"][0]["value"] == {"rows": 12}

    # A signal no step waits for: mirrored as refused, not retried; nothing else changes.
    _append(objects, "nightly", "signals", [{"name": "nope"}])
    signals = eventually(
        lambda: (
            (s := objects.status("workflowruns", "nightly").get("signals")) and len(s) == 2 and s
        ),
        what="refusal mirrored",
    )
    assert signals[1]["accepted"] is False
    assert "no step waits for signal nope" in signals[1]["message"]


def test_the_lists_are_append_only(
    kube_api: KubeFixture,
    rara_crds: None,
    objects: Objects,
    namespace: str,
) -> None:
    objects.create("workflowruns", "WorkflowRun", "run", {"definition": "gated"})
    _append(objects, "run", "signals", [{"name": "go", "key": "k1"}])
    with pytest.raises(ApiException) as refused:
        objects.patch("workflowruns", "run", {"signals": [{"name": "go", "key": "k2"}]})
    assert refused.value.status == 422
    assert "signals are append-only" in str(refused.value.body)


@pytest.fixture
def requester_policy(kube_api: KubeFixture, namespace: str) -> Iterator[None]:
    """The chart's policy, as `helm install` creates it (cluster-scoped: removed after)."""
    docs = [
        d
        for d in render(namespace)
        if d["kind"] in ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
    ]
    assert len(docs) == 2, "the chart renders the policy and its binding by default"
    for doc in docs:
        create(kube_api.api_client, namespace, doc, dry_run=False)
    try:
        yield
    finally:
        api = client.AdmissionregistrationV1Api(kube_api.api_client)
        for doc in docs:
            name = doc["metadata"]["name"]
            if doc["kind"] == "ValidatingAdmissionPolicyBinding":
                api.delete_validating_admission_policy_binding(name)
            else:
                api.delete_validating_admission_policy(name)


def test_an_approval_names_the_user_who_adds_it(
    kube_api: KubeFixture,
    rara_crds: None,
    requester_policy: None,
    objects: Objects,
    namespace: str,
) -> None:
    """Alice may patch WorkflowRuns (RBAC); the policy refuses her entry that says bob."""
    rbac = client.RbacAuthorizationV1Api(kube_api.api_client)
    rbac.create_namespaced_role(
        namespace,
        {
            "metadata": {"name": "approver"},
            "rules": [
                {"apiGroups": [GROUP], "resources": ["workflowruns"], "verbs": ["get", "patch"]}
            ],
        },
    )
    rbac.create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": "alice-approves"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "approver",
            },
            "subjects": [
                {"kind": "User", "name": "alice", "apiGroup": "rbac.authorization.k8s.io"}
            ],
        },
    )
    objects.create("workflowruns", "WorkflowRun", "gated", {"definition": "gated"})
    alice_client = copy.copy(kube_api.api_client.configuration)
    as_alice = client.ApiClient(alice_client)
    as_alice.set_default_header("Impersonate-User", "alice")
    api = client.CustomObjectsApi(as_alice)

    def add(by: str) -> None:
        api.patch_namespaced_custom_object(
            GROUP, VERSION, namespace, "workflowruns", "gated",
            {"approvals": [{"step": "gate", "decision": "approve", "by": by}]},
            _content_type=MERGE,
        )  # fmt: skip

    # The binding takes effect once the API server has compiled the policy.
    def refused_for_bob() -> str | None:
        try:
            add("bob")
        except ApiException as exc:
            return str(exc.body) if exc.status in (403, 422) else None
        # Accepted before the policy was in force: take it back as the owner, and try again.
        objects.patch("workflowruns", "gated", {"approvals": None})
        return None

    said = eventually(refused_for_bob, what="the policy in force")
    assert "an approval must name its author: by must be alice" in said
    add("alice")
    stored = objects.get("workflowruns", "gated") or {}
    assert stored["approvals"] == [{"step": "gate", "decision": "approve", "by": "alice"}]
