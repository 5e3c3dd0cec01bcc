"""Kubernetes namespaces are rara namespaces (issue 34; docs/operator.md, "Namespaces"): an
operator serving every namespace (the chart's clusterWide mode) keeps one name in two
namespaces apart, for definitions, runs, schedules and triggers, against the real API server
and the test's own PostgreSQL. Every wait is on a condition with a deadline."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from kubernetes import client

from rara.operator.settings import OperatorSettings
from rara.pg import definitions as definition_sql
from rara.pg import runs as run_sql
from rara.pg import schedules as schedule_sql
from rara.pg import triggers as trigger_sql
from rara.runs import cancel_run

from .apiserver import KubeFixture
from .test_operator import (
    STEPS,
    WFD,
    WFR,
    Objects,
    Operator,
    condition,
    db,
    delete_workflow_runs,
    eventually,
)
from .test_operator_crds import rara_crds

pytestmark = pytest.mark.k8s
__all__ = ["db", "rara_crds"]  # fixtures, used by name

DEFINITIONS, RUNS, SCHEDULES = "workflowdefinitions", "workflowruns", "workflowschedules"
TRIGGERS = "workflowtriggers"
CHANGED = [*STEPS, {"key": "eval", "capability": "demo.eval@1", "dependsOn": ["index"]}]


@pytest.fixture
def cluster_operator(
    kube_api: KubeFixture,
    rara_crds: None,
    namespace: str,
    other_namespace: str,
    role_url: Callable[[str], str],
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Operator]:
    """One operator for every namespace, as ``rara operator --all-namespaces`` (what the
    chart's rbac.clusterWide sets) serves them."""
    assert OperatorSettings(all_namespaces=True).served_namespaces() == ()
    monkeypatch.setenv("KUBECONFIG", str(kube_api.kubeconfig))
    op = Operator(kube_api, None, role_url("rara_operator"))
    op.start()
    try:
        yield op
        api = client.CustomObjectsApi(kube_api.api_client)
        for served in (namespace, other_namespace):  # released while their operator runs
            delete_workflow_runs(api, served)
    finally:
        op.stop()


def ready(objects: Objects, name: str, generation: int) -> dict[str, Any]:
    """The WorkflowDefinition's status once ``generation`` of it is registered."""
    return eventually(
        lambda: (
            (s := objects.status(DEFINITIONS, name)).get("observedGeneration") == generation
            and condition(s, "Ready").get("status") == "True"
            and s
        ),
        what=f"{objects.namespace}/{name} generation {generation} Ready",
    )


def started(objects: Objects, name: str) -> int:
    return int(
        eventually(
            lambda: objects.status(RUNS, name).get("runId"),
            what=f"{objects.namespace}/{name} started",
        )
    )


def _one_in_each(
    db: psycopg.Connection[Any],
    teams: tuple[Objects, Objects],
    plural: str,
    kind: str,
    spec: dict[str, Any],
    stored: Callable[..., Any],
) -> None:
    """The same resource ``nightly`` in both teams' namespaces is stored once in each;
    deleting team A's leaves team B's."""
    for team in teams:
        team.create(plural, kind, "nightly", spec)
    for team in teams:
        row = eventually(
            lambda t=team: stored(db, "nightly", namespace=t.namespace),
            what=f"{team.namespace}/nightly ({kind}) stored",
        )
        assert row.namespace == team.namespace
    for i, team in enumerate(teams):
        team.delete(plural, "nightly")
        eventually(lambda t=team: t.get(plural, "nightly") is None, what=f"{kind} deleted")
        assert stored(db, "nightly", namespace=team.namespace) is None
        for other in teams[i + 1 :]:
            assert stored(db, "nightly", namespace=other.namespace) is not None


def test_one_name_in_two_namespaces_is_two_of_everything(
    cluster_operator: Operator,
    kube_api: KubeFixture,
    namespace: str,
    other_namespace: str,
    db: psycopg.Connection[Any],
) -> None:
    team_a, team_b = Objects(kube_api, namespace), Objects(kube_api, other_namespace)

    # The same WorkflowDefinition in both: two histories, each at version 1.
    for team in (team_a, team_b):
        team.create(*WFD, "rag", {"steps": STEPS})
    for team in (team_a, team_b):
        assert ready(team, "rag", 1)["version"] == 1
        row = definition_sql.version_get(db, "rag", namespace=team.namespace)
        assert row is not None
        assert (row.namespace, row.version, row.retired_at) == (team.namespace, 1, None)

    # A changed spec in one is version 2 there only.
    team_a.patch(DEFINITIONS, "rag", {"spec": {"steps": CHANGED}})
    assert ready(team_a, "rag", 2)["version"] == 2
    latest = {
        team.namespace: definition_sql.version_get(db, "rag", namespace=team.namespace)
        for team in (team_a, team_b)
    }
    assert {ns: row.version for ns, row in latest.items() if row} == {
        namespace: 2,
        other_namespace: 1,
    }
    assert team_b.status(DEFINITIONS, "rag")["version"] == 1

    # A WorkflowRun in each starts a run in its own namespace, of its own namespace's
    # definition (3 steps in team A's version 2, 2 in team B's version 1).
    uids = {
        team.namespace: team.create(*WFR, "nightly", {"definition": "rag"})["metadata"]["uid"]
        for team in (team_a, team_b)
    }
    for team, steps in ((team_a, 3), (team_b, 2)):
        run = run_sql.get(db, started(team, "nightly"))
        assert run is not None
        assert (run.namespace, run.idempotency_key) == (
            team.namespace,
            f"k8s:{uids[team.namespace]}",
        )
        assert team.status(RUNS, "nightly")["stepsTotal"] == steps

    # Team B's WorkflowRun may not resume team A's run, though a resume in team A would
    # (cancelled, same definition name): refused for good, naming both namespaces.
    team_a_run = int(team_a.status(RUNS, "nightly")["runId"])
    assert cancel_run(db, team_a_run)
    team_b.create(*WFR, "steal", {"definition": "rag", "resumeFrom": team_a_run})
    status = eventually(
        lambda: (s := team_b.status(RUNS, "steal")).get("phase") and s,
        what="the refusal reported",
    )
    assert (status["phase"], status["reason"]) == ("Refused", "ResumeRefused")
    assert status["message"] == (
        f"run {team_a_run} is in namespace {namespace!r}, not {other_namespace!r}: "
        "a WorkflowRun resumes only a run of its own namespace"
    )
    assert "runId" not in status
    assert len(run_sql.list_recent(db, None, 10, namespace=other_namespace)) == 1

    # The same WorkflowSchedule, and the same WorkflowTrigger, in both: two of each; deleting
    # one leaves the other.
    hook = {"secretRef": {"name": "docs-hook"}}
    for plural, kind, spec, stored in (
        (SCHEDULES, "WorkflowSchedule", {"schedule": "0 2 * * *"}, schedule_sql.get),
        (TRIGGERS, "WorkflowTrigger", {"webhook": hook}, trigger_sql.get),
    ):
        _one_in_each(db, (team_a, team_b), plural, kind, {"definition": "rag", **spec}, stored)

    # Deleting the definition in one namespace retires that one only.
    team_a.delete(DEFINITIONS, "rag")
    eventually(lambda: team_a.get(DEFINITIONS, "rag") is None, what="team A's definition gone")
    retired = definition_sql.version_get(db, "rag", namespace=namespace)
    kept = definition_sql.version_get(db, "rag", namespace=other_namespace)
    assert retired is not None
    assert kept is not None
    assert (retired.retired_at is not None, kept.retired_at) == (True, None)
    assert team_b.get(DEFINITIONS, "rag") is not None
