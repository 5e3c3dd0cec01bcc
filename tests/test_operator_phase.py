"""A WorkflowRun's phase is its run's as people read it (rara_run_phase): Waiting, with the
gate or signal named, while only a wait can move the run on; Running again once a step is."""

from __future__ import annotations

from typing import Any

import kopf
import psycopg
from prometheus_client import REGISTRY

from rara import waits
from rara.operator.pools import export_metrics
from rara.operator.runs import changed_status, mirrored_status, phase_event, refresh_status
from rara.pg import runs as pg_runs
from rara.runs import start_run
from tests.support.definitions import apply


def _mirrored(conn: psycopg.Connection[Any], run_id: int) -> dict[str, Any]:
    [row] = pg_runs.status_many(conn, [run_id])
    return mirrored_status(row)


def test_a_run_at_its_gate_is_a_waiting_workflow_run(conn: psycopg.Connection[Any]) -> None:
    apply(
        conn,
        "gated",
        [
            {"key": "release", "approval": {}},
            {"key": "publish", "capability": "test.noop@1", "dependsOn": ["release"]},
        ],
    )
    apply(conn, "sig", [{"key": "ready", "wait": {"signal": "go"}}])
    gated = start_run(conn, "gated", queue_anyway=True).run_id
    signalled = start_run(conn, "sig", queue_anyway=True).run_id
    status = _mirrored(conn, gated)
    assert (status["phase"], status["reason"], status["message"]) == (
        "Waiting",
        "ApprovalPending",
        "waiting for approval of gate release",
    )
    assert phase_event("Waiting", status) == (
        "Normal",
        "Waiting",
        f"rara run {gated} is waiting for approval of gate release",
    )
    signal = _mirrored(conn, signalled)
    assert (signal["phase"], signal["reason"]) == ("Waiting", "SignalPending")
    assert signal["message"] == "waiting for signal go (step ready)"
    # The create handler's first mirror keeps the wait's reason (it clears only the reasons
    # of a WorkflowRun that waited for its definition).
    patch = kopf.Patch()
    refresh_status(conn, gated, kopf.Status({"reason": "DefinitionNotFound"}), patch)
    assert patch["status"]["reason"] == "ApprovalPending"
    # Decided: the next step is ready, and the phase, reason and message change back.
    waits.decide(conn, gated, "release", approve=True)
    after = _mirrored(conn, gated)
    assert changed_status(status, after) == {
        "phase": "Running",
        "reason": None,
        "message": None,
        "startedAt": after["startedAt"],
        "stepsDone": 1,
        "progress": "1/2",
    }


def test_the_waiting_runs_are_a_gauge_by_what_they_wait_for(
    conn: psycopg.Connection[Any],
) -> None:
    apply(conn, "gated", [{"key": "release", "approval": {}}])
    apply(conn, "sig", [{"key": "ready", "wait": {"signal": "go"}}])
    apply(
        conn, "busy", [{"key": "work", "capability": "test.noop@1"}, {"key": "g", "approval": {}}]
    )
    for name in ("gated", "gated", "sig", "busy"):
        start_run(conn, name, queue_anyway=True)
    waiting = pg_runs.waiting_count(conn)
    assert waiting == {"approval": 2, "signal": 1, "timer": 0}  # busy has a step ready
    export_metrics([], waiting, [])
    assert REGISTRY.get_sample_value("rara_runs_waiting", {"kind": "approval"}) == 2
    assert REGISTRY.get_sample_value("rara_runs_waiting", {"kind": "timer"}) == 0
