"""WorkflowSchedule through the operator against a real API server: the spec becomes a
schedule in PostgreSQL, the operator's firing loop fires it once per tick, the status mirrors
the next tick and the last run, an invalid spec is reported naming its field, and deleting
the resource deletes the schedule."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from rara.pg import schedules as schedule_sql
from tests.support.definitions import apply, noop_definition

from .test_operator import Objects, Operator, condition, db, eventually, objects, operator
from .test_operator_crds import rara_crds

pytestmark = pytest.mark.k8s
__all__ = ["db", "objects", "operator", "rara_crds"]  # fixtures, used by name

PLURAL, KIND = "workflowschedules", "WorkflowSchedule"


def _delete(objects: Objects, name: str) -> None:
    objects.delete(PLURAL, name)
    eventually(lambda: objects.get(PLURAL, name) is None, what=f"{name} deleted")


def test_a_schedule_resource_fires_once_per_tick_and_mirrors_its_status(
    operator: Operator, objects: Objects, db: psycopg.Connection[Any], namespace: str
) -> None:
    noop_definition(db, namespace=namespace)
    objects.create(
        PLURAL,
        KIND,
        "every-second",
        {"definition": "noop", "schedule": "* * * * * *", "successfulRunsHistoryLimit": 100},
    )
    eventually(
        lambda: schedule_sql.get(db, "every-second", namespace=namespace),
        what="the schedule stored",
    )
    # The operator's own firing loop starts runs, one per tick.
    eventually(
        lambda: db.execute("SELECT count(*) FROM rara_runs").fetchone()[0] >= 3,  # type: ignore[index]
        what="three ticks fired",
    )
    status = eventually(
        lambda: (s := objects.status(PLURAL, "every-second")).get("lastRunId") and s,
        what="the last run in the status",
    )
    assert status["nextTick"] > status["lastTick"]
    assert condition(status, "Ready")["reason"] == "Applied"
    keys = db.execute("SELECT count(*), count(DISTINCT idempotency_key) FROM rara_runs").fetchone()
    assert keys is not None
    assert keys[0] == keys[1]
    _delete(objects, "every-second")
    assert schedule_sql.get(db, "every-second", namespace=namespace) is None


def test_an_invalid_schedule_is_reported_and_stored_nowhere(
    operator: Operator, objects: Objects, db: psycopg.Connection[Any], namespace: str
) -> None:
    objects.create(
        PLURAL,
        KIND,
        "bad-zone",
        {"definition": "noop", "schedule": "0 2 * * *", "timeZone": "Europe/Atlantis"},
    )
    status = eventually(
        lambda: (s := objects.status(PLURAL, "bad-zone")).get("conditions") and s,
        what="the Ready condition",
    )
    ready = condition(status, "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "SpecInvalid")
    assert "spec.timeZone: 'Europe/Atlantis' is not an IANA time zone" in ready["message"]
    assert schedule_sql.get(db, "bad-zone", namespace=namespace) is None
    _delete(objects, "bad-zone")


def test_an_input_the_definition_refuses_is_reported_and_stored_nowhere(
    operator: Operator, objects: Objects, db: psycopg.Connection[Any], namespace: str
) -> None:
    limit = {"type": "object", "properties": {"limit": {"type": "integer", "minimum": 1}}}
    steps = [{"key": "collect", "capability": "bench.noop@1", "inputSchema": limit}]
    apply(db, "collect", steps, namespace=namespace)
    objects.create(
        PLURAL,
        KIND,
        "bad-input",
        {"definition": "collect", "schedule": "0 2 * * *", "input": {"limit": -1}},
    )
    status = eventually(
        lambda: (s := objects.status(PLURAL, "bad-input")).get("conditions") and s,
        what="the Ready condition",
    )
    ready = condition(status, "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "SpecInvalid")
    assert ready["message"] == (
        "spec.input: run input refused: input.limit: -1 is less than the minimum of 1 "
        "(input of step 'collect')"
    )
    assert schedule_sql.get(db, "bad-input", namespace=namespace) is None
    _delete(objects, "bad-input")
