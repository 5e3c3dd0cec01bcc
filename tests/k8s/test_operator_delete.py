"""Deleting a WorkflowRun stops its rara run (docs/operator.md, "Deleting a WorkflowRun"):
kopf in-process against the real API server and the test's own PostgreSQL. No worker serves
the steps, so a run stays pending until the delete cancels it. Every wait has a deadline."""

from __future__ import annotations

import time
from typing import Any

import psycopg
import pytest

from rara.operator.app import FINALIZER
from rara.operator.runs import idempotency_key
from rara.runs import cancel_run, start_run
from tests.support.definitions import apply

from .test_operator import (
    STEPS,
    WFD,
    Objects,
    Operator,
    condition,
    db,
    eventually,
    measure,
    objects,
    operator,
)
from .test_operator_crds import rara_crds

pytestmark = pytest.mark.k8s
__all__ = ["db", "objects", "operator", "rara_crds"]  # fixtures, used by name

RUNS = "workflowruns"
WFR = (RUNS, "WorkflowRun")


def run_state(db: psycopg.Connection[Any], run_id: int) -> tuple[str, list[str]]:
    run = db.execute("SELECT status FROM rara_runs WHERE id = %s", (run_id,)).fetchone()
    assert run is not None
    steps = db.execute(
        "SELECT status FROM rara_steps WHERE run_id = %s ORDER BY id", (run_id,)
    ).fetchall()
    return str(run[0]), [str(s[0]) for s in steps]


def started(objects: Objects, name: str) -> dict[str, Any]:
    return eventually(
        lambda: (s := objects.status(RUNS, name)).get("runId") and s, what=f"{name} started"
    )


def waiting_for_definition(objects: Objects, name: str) -> None:
    eventually(
        lambda: (
            condition(objects.status(RUNS, name), "Accepted").get("reason") == "DefinitionNotFound"
        ),
        what=f"{name} waiting for its definition",
    )


def test_deleting_a_pending_run_cancels_it(
    operator: Operator, objects: Objects, db: psycopg.Connection[Any]
) -> None:
    objects.create(*WFD, "rag", {"steps": STEPS})
    eventually(
        lambda: (
            condition(objects.status("workflowdefinitions", "rag"), "Ready").get("status") == "True"
        ),
        what="definition Ready",
    )
    objects.create(*WFR, "nightly", {"definition": "rag"})
    run_id = int(started(objects, "nightly")["runId"])
    body = objects.get(RUNS, "nightly")
    assert body is not None
    assert FINALIZER in body["metadata"].get("finalizers", [])
    assert run_state(db, run_id) == ("pending", ["ready", "blocked"])

    t0 = time.monotonic()
    objects.delete(RUNS, "nightly")
    eventually(lambda: objects.get(RUNS, "nightly") is None, what="WorkflowRun gone")
    measure(f"WorkflowRun delete -> gone, run cancelled: {time.monotonic() - t0:.3f}s")
    # The finalizer is released only after the cancel committed: no wait needed here.
    assert run_state(db, run_id) == ("cancelled", ["cancelled", "cancelled"])


def test_deleting_an_ended_run_touches_nothing(
    operator: Operator, objects: Objects, db: psycopg.Connection[Any], namespace: str
) -> None:
    apply(db, "rag", STEPS, namespace=namespace)
    objects.create(*WFR, "done", {"definition": "rag"})
    run_id = int(started(objects, "done")["runId"])
    cancel_run(db, run_id)
    eventually(
        lambda: objects.status(RUNS, "done").get("phase") == "Cancelled", what="phase Cancelled"
    )
    # The handler must not call the database for an ended run: were it to try to cancel,
    # it would now fail and kopf would retry, keeping the finalizer.
    db.execute("REVOKE EXECUTE ON FUNCTION rara_run_cancel(bigint) FROM rara_operator")
    t0 = time.monotonic()
    objects.delete(RUNS, "done")
    eventually(lambda: objects.get(RUNS, "done") is None, timeout=10, what="ended WorkflowRun gone")
    measure(f"ended WorkflowRun delete -> gone: {time.monotonic() - t0:.3f}s")


def test_deleting_a_run_whose_status_was_lost_finds_it_by_key(
    operator: Operator, objects: Objects, db: psycopg.Connection[Any], namespace: str
) -> None:
    # The definition does not exist yet: the create handler reports it and retries in 10 s,
    # so no runId reaches the status while the test works.
    never = objects.create(*WFR, "never", {"definition": "later"})
    lost = objects.create(*WFR, "lost", {"definition": "later"})
    for name in ("never", "lost"):
        waiting_for_definition(objects, name)
    # Never started: deletes at once.
    objects.delete(RUNS, "never")
    eventually(lambda: objects.get(RUNS, "never") is None, timeout=10, what="never gone")
    assert db.execute(
        "SELECT count(*) FROM rara_runs WHERE idempotency_key = %s",
        (idempotency_key(never["metadata"]["uid"]),),
    ).fetchone() == (0,)

    # Started under its key, the status patch lost (here: started beside the operator).
    apply(db, "later", STEPS, namespace=namespace)
    run_id = start_run(
        db,
        "later",
        idempotency_key=idempotency_key(lost["metadata"]["uid"]),
        queue_anyway=True,
        namespace=namespace,
    ).run_id
    assert "runId" not in objects.status(RUNS, "lost")
    objects.delete(RUNS, "lost")
    eventually(lambda: objects.get(RUNS, "lost") is None, what="lost gone")
    assert run_state(db, run_id) == ("cancelled", ["cancelled", "cancelled"])
