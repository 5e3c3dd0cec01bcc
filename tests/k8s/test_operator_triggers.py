"""WorkflowTrigger through the operator against a real API server: the spec becomes a trigger
in PostgreSQL, a change and spec.suspend reach it, the status mirrors the deliveries the
webhook judged, an invalid spec or an input the definition refuses is reported naming its
field (with a Warning Event) and nothing is stored, and deleting the resource deletes the
trigger while the runs it started stay."""

from __future__ import annotations

import time
from typing import Any

import psycopg
import pytest

from rara.pg import triggers as trigger_sql
from rara.triggers.webhook_events import Outcome, accept
from tests.support.definitions import apply, noop_definition
from tests.triggers.conftest import delivery, resolve_test_secret

from .apiserver import KubeFixture
from .test_operator import (
    Objects,
    Operator,
    condition,
    db,
    events_of,
    eventually,
    objects,
    operator,
)
from .test_operator_crds import rara_crds

pytestmark = pytest.mark.k8s
__all__ = ["db", "objects", "operator", "rara_crds"]  # fixtures, used by name

PLURAL, KIND = "workflowtriggers", "WorkflowTrigger"
WEBHOOK = {"secretRef": {"name": "docs-hook"}}  # the tests' secret (tests/triggers/conftest.py)


def _deliver(db: psycopg.Connection[Any], namespace: str, name: str, delivery_id: str) -> Outcome:
    """One signed delivery judged as `rara triggers serve` judges it."""
    signed = delivery({"doc": delivery_id}, delivery_id, trigger=name, namespace=namespace)
    return accept(db, signed, now=time.time(), secret_of=resolve_test_secret)


def _stored(db: psycopg.Connection[Any], namespace: str, name: str) -> trigger_sql.TriggerRow:
    return eventually(
        lambda: trigger_sql.get(db, name, namespace=namespace), what=f"trigger {name} stored"
    )


def _delete(objects: Objects, name: str) -> None:
    objects.delete(PLURAL, name)
    eventually(lambda: objects.get(PLURAL, name) is None, what=f"{name} deleted")


def test_a_trigger_resource_is_stored_changed_suspended_mirrored_and_deleted(
    operator: Operator, objects: Objects, db: psycopg.Connection[Any], namespace: str
) -> None:
    noop_definition(db, namespace=namespace)
    objects.create(PLURAL, KIND, "docs-landed", {"definition": "noop", "webhook": WEBHOOK})
    stored = _stored(db, namespace, "docs-landed")
    assert (stored.kind, stored.suspended, stored.config["toleranceSeconds"]) == (
        "webhook",
        False,
        300,
    )
    ready = eventually(
        lambda: condition(objects.status(PLURAL, "docs-landed"), "Ready"), what="Ready"
    )
    assert (ready["status"], ready["reason"]) == ("True", "Applied")

    objects.patch(PLURAL, "docs-landed", {"spec": {"webhook": {"toleranceSeconds": 60}}})
    eventually(
        lambda: (
            trigger_sql.get(db, "docs-landed", namespace=namespace).config[  # type: ignore[union-attr]
                "toleranceSeconds"
            ]
            == 60
        ),
        what="the changed tolerance stored",
    )

    first = _deliver(db, namespace, "docs-landed", "d-1")
    assert (first.status, first.created) == (201, True)
    status = eventually(
        lambda: (s := objects.status(PLURAL, "docs-landed")).get("events") == 1 and s,
        what="the delivery mirrored into the status",
    )
    assert status["kind"] == "webhook"
    assert (status["lastOutcome"], status["lastRunId"]) == ("started", first.run_id)
    assert status["lastRunStatus"] == "pending"  # no worker here
    assert status["lastEventTime"].endswith("Z")

    objects.patch(PLURAL, "docs-landed", {"spec": {"suspend": True}})
    eventually(
        lambda: trigger_sql.get(db, "docs-landed", namespace=namespace).suspended,  # type: ignore[union-attr]
        what="the trigger paused",
    )
    paused = _deliver(db, namespace, "docs-landed", "d-2")
    assert paused.status == 409
    objects.patch(PLURAL, "docs-landed", {"spec": {"suspend": False}})
    eventually(
        lambda: not trigger_sql.get(db, "docs-landed", namespace=namespace).suspended,  # type: ignore[union-attr]
        what="the trigger resumed",
    )
    assert _deliver(db, namespace, "docs-landed", "d-2").status == 201

    _delete(objects, "docs-landed")
    assert trigger_sql.get(db, "docs-landed", namespace=namespace) is None
    runs = db.execute("SELECT count(*) FROM rara_runs WHERE namespace = %s", (namespace,))
    assert runs.fetchone() == (2,)  # the trigger's runs stay


def test_a_trigger_without_a_kind_of_event_is_reported_and_stored_nowhere(
    operator: Operator,
    objects: Objects,
    db: psycopg.Connection[Any],
    namespace: str,
    kube_api: KubeFixture,
) -> None:
    created = objects.create(PLURAL, KIND, "no-kind", {"definition": "noop"})
    status = eventually(
        lambda: (s := objects.status(PLURAL, "no-kind")).get("conditions") and s,
        what="the Ready condition",
    )
    ready = condition(status, "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "SpecInvalid")
    assert "a trigger names one kind of event: spec.webhook" in ready["message"]
    uid = created["metadata"]["uid"]
    eventually(
        lambda: ("Warning", "SpecInvalid") in events_of(kube_api, namespace, uid),
        what="the Warning Event",
    )
    assert trigger_sql.get(db, "no-kind", namespace=namespace) is None
    _delete(objects, "no-kind")


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
        {"definition": "collect", "input": {"limit": -1}, "webhook": WEBHOOK},
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
    assert trigger_sql.get(db, "bad-input", namespace=namespace) is None
    _delete(objects, "bad-input")
