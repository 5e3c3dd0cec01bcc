"""A WorkflowRun's spec.paused (docs/operator.md, "Pausing a WorkflowRun"), against a real API
server and PostgreSQL: created paused, its run starts paused (phase Paused, its steps held);
the field set false resumes it, true again pauses it."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from tests.support.definitions import apply

from .apiserver import KubeFixture
from .test_operator import Objects, Operator, db, events_of, eventually, objects, operator
from .test_operator_crds import rara_crds

pytestmark = pytest.mark.k8s
__all__ = ["db", "objects", "operator", "rara_crds"]  # fixtures, used by name


def _held(db: psycopg.Connection[Any], run_id: int) -> tuple[bool, bool]:
    """(the run is paused, its ready step is held)"""
    row = db.execute(
        "SELECT r.paused_at IS NOT NULL, s.available_at = 'infinity' FROM rara_runs r"
        " JOIN rara_steps s ON s.run_id = r.id WHERE r.id = %s",
        (run_id,),
    ).fetchone()
    assert row is not None
    return row[0], row[1]


def test_spec_paused_pauses_and_resumes_the_run(
    operator: Operator,
    objects: Objects,
    db: psycopg.Connection[Any],
    namespace: str,
    kube_api: KubeFixture,
) -> None:
    # No worker serves test.noop here: the run stays Pending unless paused.
    apply(db, "pausable", [{"key": "a", "capability": "test.noop@1"}], namespace=namespace)
    created = objects.create(
        "workflowruns", "WorkflowRun", "nightly", {"definition": "pausable", "paused": True}
    )

    def phase(wanted: str) -> dict[str, Any]:
        return eventually(
            lambda: (s := objects.status("workflowruns", "nightly")).get("phase") == wanted and s,
            what=f"phase {wanted}",
        )

    run_id = int(phase("Paused")["runId"])
    assert _held(db, run_id) == (True, True)
    objects.patch("workflowruns", "nightly", {"spec": {"paused": False}})
    phase("Pending")
    assert _held(db, run_id) == (False, False)
    objects.patch("workflowruns", "nightly", {"spec": {"paused": True}})
    phase("Paused")
    assert _held(db, run_id) == (True, True)
    assert ("Normal", "Paused") in events_of(kube_api, namespace, created["metadata"]["uid"])
