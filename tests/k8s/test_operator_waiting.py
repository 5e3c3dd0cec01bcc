"""A WorkflowRun at its gate says so (docs/operator.md, "What kubectl shows of a
WorkflowRun"), against a real API server and PostgreSQL: phase Waiting, reason
ApprovalPending, the gate named in its message; once decided, the run goes on and the reason
goes."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from rara import waits
from tests.support.definitions import apply

from .apiserver import KubeFixture
from .test_operator import Objects, Operator, db, events_of, eventually, objects, operator
from .test_operator_crds import rara_crds

pytestmark = pytest.mark.k8s
__all__ = ["db", "objects", "operator", "rara_crds"]  # fixtures, used by name


def test_a_workflow_run_at_its_gate_is_waiting(
    operator: Operator,
    objects: Objects,
    db: psycopg.Connection[Any],
    namespace: str,
    kube_api: KubeFixture,
) -> None:
    apply(db, "gated", [{"key": "release", "approval": {}}], namespace=namespace)
    created = objects.create("workflowruns", "WorkflowRun", "nightly", {"definition": "gated"})
    uid = created["metadata"]["uid"]
    status = eventually(
        lambda: (
            (s := objects.status("workflowruns", "nightly")).get("phase") == "Waiting"
            and s.get("runId")
            and s
        ),
        what="phase Waiting",
    )
    assert status["reason"] == "ApprovalPending"
    assert status["message"] == "waiting for approval of gate release"
    # Born at its gate, its first phase is the create handler's (with its Accepted Event):
    # the sync posts a Waiting Event only for a phase it changes (rara.operator.runsync).
    assert ("Normal", "Accepted") in events_of(kube_api, namespace, uid)
    waits.decide(db, int(status["runId"]), "release", approve=True)
    done = eventually(
        lambda: (s := objects.status("workflowruns", "nightly")).get("phase") == "Succeeded" and s,
        what="phase Succeeded",
    )
    assert ("reason" in done, "message" in done) == (False, False)
