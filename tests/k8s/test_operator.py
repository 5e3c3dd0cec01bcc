"""The operator end to end: kopf in-process (KopfRunner) against a real API server, with the
test's own PostgreSQL database. Every wait is on a condition with a deadline."""

from __future__ import annotations

import asyncio
import gc
import json
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import kopf
import psycopg
import pytest
from kopf.testing import KopfRunner
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from rara.operator.app import build_registry
from rara.operator.peering import Peering
from rara.operator.runtime import OperatorConfig
from rara.runs import cancel_run, start_run
from rara.states import AttemptOutcome, StepStatus
from rara.worker.store import end_many
from rara.worker.vocabulary import Ending, Fence, LeasedStep
from tests.support.definitions import apply
from tests.support.leasing import lease_now

from .apiserver import KubeFixture
from .test_operator_crds import GROUP, VERSION, rara_crds

pytestmark = pytest.mark.k8s
__all__ = ["rara_crds"]  # a fixture, used by name

T = TypeVar("T")
MERGE = "application/merge-patch+json"
DEADLINE = 30.0


async def _complete(dsn: str, step: LeasedStep, worker: str, result: Any) -> bool:
    """The attempt's success on the path the worker's batcher takes (``end_many``)."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        ending = Ending(
            Fence(step.id, worker, step.lease_token),
            step.run_id,
            AttemptOutcome.SUCCEEDED,
            result=result,
        )
        return await end_many(conn, [ending]) == [StepStatus.SUCCEEDED]


async def _fail(dsn: str, step: LeasedStep, worker: str) -> bool:
    """The attempt's failure, not retryable, on the worker's path (``end_many``)."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        ending = Ending(
            Fence(step.id, worker, step.lease_token),
            step.run_id,
            AttemptOutcome.FAILED,
            error={"message": "boom"},
            retryable=False,
        )
        return await end_many(conn, [ending]) == [StepStatus.FAILED]


def measure(line: str) -> None:
    """Report a timing on the real stdout: KopfRunner's click runner swaps sys.stdout."""
    if sys.__stdout__ is not None:
        sys.__stdout__.write(f"\n[measure] {line}\n")


def eventually(fn: Callable[[], T], *, timeout: float = DEADLINE, what: str) -> T:
    deadline = time.monotonic() + timeout
    delay = 0.02
    while True:
        value = fn()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(delay)
        delay = min(delay * 1.5, 0.25)


class Operator:
    """Start and stop the operator (kopf's KopfRunner in a thread) for one namespace, or
    for every namespace when ``namespace`` is None (the chart's clusterWide mode)."""

    def __init__(
        self,
        kube: KubeFixture,
        namespace: str | None,
        database_url: str,
        peering: Peering | None = None,
    ) -> None:
        self.config = OperatorConfig(
            database_url=database_url,
            namespaces=() if namespace is None else (namespace,),
            run_sync_interval=0.3,
            scale_interval=0.3,
            peering=peering,
        )
        self.namespace = namespace
        self._runner: KopfRunner | None = None

    def start(self) -> None:
        registry = build_registry(self.config)
        started = threading.Event()

        def signal_started(**_: Any) -> None:
            started.set()

        # After rara's own startup handler: a test that stops the operator mid-start would
        # race kopf's cleanup against the startup thread and leak the database pool.
        kopf.on.startup(registry=registry)(signal_started)
        served = ["--all-namespaces"] if self.namespace is None else ["--namespace", self.namespace]
        self._runner = KopfRunner(["run", "--standalone", *served], registry=registry, timeout=30)
        self._runner.__enter__()
        assert started.wait(DEADLINE), "operator did not start"

    def stop(self) -> None:
        runner, self._runner = self._runner, None
        if runner is None:
            return
        runner.__exit__(None, None, None)
        exit_code, output = runner.exit_code, runner.output
        del runner
        # kopf leaves its aiohttp sessions to the garbage collector when an in-process
        # operator stops (a real one exits). Collect them now, their "unclosed" warnings
        # ignored, rather than let them fail whichever later test the GC happens to run in.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)
            gc.collect()
        assert exit_code == 0, output


@pytest.fixture
def operator(
    kube_api: KubeFixture,
    rara_crds: None,
    namespace: str,
    role_url: Callable[[str], str],
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Operator]:
    monkeypatch.setenv("KUBECONFIG", str(kube_api.kubeconfig))  # kopf's own login reads it
    # Its own login, as the chart gives it (docs/least-privilege.md): it registers, starts,
    # cancels and reads, and nothing else.
    op = Operator(kube_api, namespace, role_url("rara_operator"))
    op.start()
    try:
        yield op
        # This test's WorkflowRuns, deleted while their operator can still release them:
        # left with its finalizer, one would keep a real cluster's namespace Terminating.
        delete_workflow_runs(client.CustomObjectsApi(kube_api.api_client), namespace)
    finally:
        op.stop()


def delete_workflow_runs(api: client.CustomObjectsApi, namespace: str) -> None:
    def names() -> list[str]:
        listed = api.list_namespaced_custom_object(GROUP, VERSION, namespace, "workflowruns")
        return [o["metadata"]["name"] for o in listed["items"]]

    for name in names():
        api.delete_namespaced_custom_object(GROUP, VERSION, namespace, "workflowruns", name)
    eventually(lambda: not names(), what="WorkflowRuns deleted")


@pytest.fixture
def db(database_url: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(database_url, autocommit=True) as conn:
        yield conn


class Objects:
    def __init__(self, kube: KubeFixture, namespace: str) -> None:
        self.api = client.CustomObjectsApi(kube.api_client)
        self.namespace = namespace

    def create(self, plural: str, kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": kind,
            "metadata": {"name": name},
            "spec": spec,
        }
        return dict(
            self.api.create_namespaced_custom_object(GROUP, VERSION, self.namespace, plural, body)
        )

    def get(self, plural: str, name: str) -> dict[str, Any] | None:
        try:
            return dict(
                self.api.get_namespaced_custom_object(GROUP, VERSION, self.namespace, plural, name)
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def patch(self, plural: str, name: str, body: dict[str, Any]) -> None:
        self.api.patch_namespaced_custom_object(
            GROUP, VERSION, self.namespace, plural, name, body, _content_type=MERGE
        )

    def delete(self, plural: str, name: str) -> None:
        self.api.delete_namespaced_custom_object(GROUP, VERSION, self.namespace, plural, name)

    def status(self, plural: str, name: str) -> dict[str, Any]:
        return dict((self.get(plural, name) or {}).get("status") or {})


@pytest.fixture
def objects(kube_api: KubeFixture, namespace: str) -> Objects:
    return Objects(kube_api, namespace)


def condition(status: dict[str, Any], type_: str) -> dict[str, Any]:
    return next((c for c in status.get("conditions", []) if c["type"] == type_), {})


def attempts(objects: Objects, plural: str, name: str) -> int:
    """How often kopf has run a handler still being retried (its progress annotation)."""
    annotations = (objects.get(plural, name) or {}).get("metadata", {}).get("annotations", {})
    return max(
        (
            json.loads(value).get("retries", 0)
            for key, value in annotations.items()
            if key.startswith("operator.rara.dev/") and "start_workflow_run" in key
        ),
        default=0,
    )


TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"


def columns(kube: KubeFixture, namespace: str, plural: str, name: str) -> dict[str, Any]:
    """What `kubectl get` prints for the object: the API server's Table, by column name."""
    table = client.CustomObjectsApi(kube.api_client).get_namespaced_custom_object(
        GROUP, VERSION, namespace, plural, name, _headers={"Accept": TABLE}
    )
    (row,) = table["rows"]
    return {
        c["name"]: cell for c, cell in zip(table["columnDefinitions"], row["cells"], strict=True)
    }


def events_of(kube: KubeFixture, namespace: str, uid: str) -> list[tuple[str, str]]:
    """The Events on one object, as (type, reason), as `kubectl describe` finds them."""
    listed = client.CoreV1Api(kube.api_client).list_namespaced_event(
        namespace, field_selector=f"involvedObject.uid={uid}"
    )
    return sorted((e.type, e.reason) for e in listed.items)


def versions(db: psycopg.Connection[Any], name: str) -> list[tuple[int, str]]:
    return [
        (r[0], r[1])
        for r in db.execute(
            "SELECT version, digest FROM rara_definition_versions WHERE name = %s ORDER BY version",
            (name,),
        )
    ]


STEPS = [
    {"key": "collect", "capability": "demo.collect@1"},
    {"key": "index", "capability": "demo.index@1", "dependsOn": ["collect"]},
]
WFD = ("workflowdefinitions", "WorkflowDefinition")
WFR = ("workflowruns", "WorkflowRun")


def test_definition_lifecycle(
    operator: Operator, objects: Objects, db: psycopg.Connection[Any]
) -> None:
    created = time.monotonic()
    objects.create(*WFD, "rag", {"steps": STEPS})
    status = eventually(
        lambda: (
            (s := objects.status("workflowdefinitions", "rag"))
            and condition(s, "Ready").get("status") == "True"
            and s
        ),
        what="definition Ready",
    )
    ready_after = time.monotonic() - created
    measure(f"WorkflowDefinition create -> Ready: {ready_after:.3f}s")
    assert status["version"] == 1
    assert status["observedGeneration"] == 1
    assert condition(status, "Invalid")["status"] == "False"
    assert versions(db, "rag") == [(1, status["digest"])]

    # A change that is not to the spec (a label) reaches the handler and changes nothing.
    objects.patch("workflowdefinitions", "rag", {"metadata": {"labels": {"team": "search"}}})
    eventually(
        lambda: (
            (objects.get("workflowdefinitions", "rag") or {})
            .get("metadata", {})
            .get("annotations", {})
            .get("operator.rara.dev/last-handled-configuration", "")
            .count("search")
        ),
        what="label change handled",
    )
    assert versions(db, "rag") == [(1, status["digest"])]

    # A changed spec is version 2.
    objects.patch(
        "workflowdefinitions",
        "rag",
        {
            "spec": {
                "steps": [
                    *STEPS,
                    {"key": "eval", "capability": "demo.eval@1", "dependsOn": ["index"]},
                ]
            }
        },
    )
    status = eventually(
        lambda: (
            (s := objects.status("workflowdefinitions", "rag")).get("observedGeneration") == 2 and s
        ),
        what="generation 2 handled",
    )
    assert status["version"] == 2
    assert [v for v, _ in versions(db, "rag")] == [1, 2]

    # Invalid (only the model can tell): Invalid names step and field; nothing written.
    bad = [
        {"key": "a", "capability": "demo.a@1", "retry": {"initialDelay": "1m", "maxDelay": "1s"}}
    ]
    objects.patch("workflowdefinitions", "rag", {"spec": {"steps": bad}})
    status = eventually(
        lambda: (
            (s := objects.status("workflowdefinitions", "rag")).get("observedGeneration") == 3 and s
        ),
        what="invalid spec handled",
    )
    invalid = condition(status, "Invalid")
    assert invalid["status"] == "True"
    assert "spec.steps[0] (step 'a').retry" in invalid["message"]
    assert "maxDelay must be >= initialDelay" in invalid["message"]
    assert condition(status, "Ready")["status"] == "False"
    assert [v for v, _ in versions(db, "rag")] == [1, 2]

    # Delete: the name is retired, its versions stay.
    objects.delete("workflowdefinitions", "rag")
    eventually(
        lambda: objects.get("workflowdefinitions", "rag") is None,
        what="definition deleted (finalizer released)",
    )
    retired = db.execute("SELECT retired_at FROM rara_definitions WHERE name = 'rag'").fetchone()
    assert retired is not None
    assert retired[0] is not None
    assert [v for v, _ in versions(db, "rag")] == [1, 2]


def test_same_spec_again_is_the_same_version(
    operator: Operator, objects: Objects, db: psycopg.Connection[Any], namespace: str
) -> None:
    """A definition already registered (by `rara definitions apply`) is found, not re-added;
    and a restarted operator resuming it writes nothing."""
    applied = apply(db, "pre", STEPS, namespace=namespace)
    objects.create(*WFD, "pre", {"steps": STEPS})
    status = eventually(
        lambda: (s := objects.status("workflowdefinitions", "pre")).get("version") and s,
        what="definition handled",
    )
    assert (status["version"], status["digest"]) == (applied.version, applied.digest)
    operator.stop()
    operator.start()  # on.resume runs the handler again for the same generation
    assert versions(db, "pre") == [(1, applied.digest)]


def runs_count(db: psycopg.Connection[Any]) -> int:
    row = db.execute("SELECT count(*) FROM rara_runs").fetchone()
    assert row is not None
    return int(row[0])


def test_workflow_run_is_started_once_and_mirrored(
    operator: Operator, objects: Objects, db: psycopg.Connection[Any], namespace: str
) -> None:
    apply(db, "rag", STEPS, namespace=namespace)
    body = objects.create(
        "workflowruns", "WorkflowRun", "nightly", {"definition": "rag", "input": {"corpus": "wiki"}}
    )
    status = eventually(
        lambda: (s := objects.status("workflowruns", "nightly")).get("runId") and s,
        what="run started",
    )
    assert status["phase"] == "Pending"
    assert status["progress"] == "0/2"
    assert condition(status, "Accepted")["status"] == "True"
    run_id = status["runId"]
    key = db.execute(
        "SELECT idempotency_key, input FROM rara_runs WHERE id = %s", (run_id,)
    ).fetchone()
    assert key == (f"k8s:{body['metadata']['uid']}", {"corpus": "wiki"})

    # A worker leases and finishes the first step: the status follows.
    (leased,) = lease_now(db, ["demo.collect@1"], worker="w1", limit=1, lease_seconds=60)
    eventually(
        lambda: objects.status("workflowruns", "nightly").get("phase") == "Running",
        what="phase Running",
    )
    assert asyncio.run(_complete(db.info.dsn, leased, "w1", {}))
    eventually(
        lambda: objects.status("workflowruns", "nightly").get("progress") == "1/2",
        what="progress 1/2",
    )

    # Restart: the resumed handler finds the run by the uid; still one run.
    operator.stop()
    operator.start()
    cancel_run(db, run_id)
    status = eventually(
        lambda: (s := objects.status("workflowruns", "nightly")).get("phase") == "Cancelled" and s,
        what="phase Cancelled",
    )
    assert status["finishedAt"]
    assert runs_count(db) == 1


def test_run_waits_for_its_definition(
    operator: Operator,
    objects: Objects,
    db: psycopg.Connection[Any],
    kube_api: KubeFixture,
    namespace: str,
) -> None:
    uid = objects.create("workflowruns", "WorkflowRun", "early", {"definition": "later"})[
        "metadata"
    ]["uid"]
    eventually(
        lambda: (
            condition(objects.status("workflowruns", "early"), "Accepted").get("reason")
            == "DefinitionNotFound"
        ),
        what="DefinitionNotFound reported",
    )
    assert runs_count(db) == 0
    shown = columns(kube_api, namespace, "workflowruns", "early")
    assert (shown["Phase"], shown["Reason"]) == ("Waiting", "DefinitionNotFound")
    # The message names the namespace the definition is missing from.
    message = objects.status("workflowruns", "early")["message"]
    assert f"no workflow definition {namespace}/later" in message
    # Retried every 10 s, with the same reason: no second Warning.
    eventually(
        lambda: attempts(objects, "workflowruns", "early") >= 2, timeout=60, what="a second attempt"
    )
    eventually(lambda: events_of(kube_api, namespace, uid), what="the Warning Event")
    assert events_of(kube_api, namespace, uid) == [("Warning", "DefinitionNotFound")]
    objects.create(*WFD, "later", {"steps": STEPS})
    status = eventually(
        lambda: (s := objects.status("workflowruns", "early")).get("runId") and s,
        timeout=60,
        what="run started once the definition exists",
    )
    assert runs_count(db) == 1
    # The reason goes once the run exists.
    assert (status["phase"], "reason" in status, "message" in status) == ("Pending", False, False)
    assert columns(kube_api, namespace, "workflowruns", "early")["Reason"] is None
    eventually(
        lambda: ("Normal", "Accepted") in events_of(kube_api, namespace, uid),
        what="the Accepted Event",
    )
    assert events_of(kube_api, namespace, uid) == [
        ("Normal", "Accepted"),
        ("Warning", "DefinitionNotFound"),
    ]


def test_refused_run_says_why(
    operator: Operator,
    objects: Objects,
    db: psycopg.Connection[Any],
    kube_api: KubeFixture,
    namespace: str,
) -> None:
    """Input its steps' inputSchema refuses: Refused, for good, in `kubectl get` and as a
    Warning Event."""
    needs_corpus = {"type": "object", "required": ["corpus"]}
    apply(
        db,
        "strict",
        [{"key": "collect", "capability": "demo.collect@1", "inputSchema": needs_corpus}],
        namespace=namespace,
    )
    uid = objects.create(
        "workflowruns", "WorkflowRun", "bad", {"definition": "strict", "input": {"limit": 3}}
    )["metadata"]["uid"]
    status = eventually(
        lambda: (s := objects.status("workflowruns", "bad")).get("phase") and s,
        what="the refusal reported",
    )
    assert (status["phase"], status["reason"]) == ("Refused", "InputInvalid")
    assert "corpus" in status["message"]
    accepted = condition(status, "Accepted")
    assert (accepted["status"], accepted["reason"]) == ("False", "InputInvalid")
    shown = columns(kube_api, namespace, "workflowruns", "bad")
    assert (shown["Phase"], shown["Reason"], shown["Done/Total"]) == (
        "Refused",
        "InputInvalid",
        None,
    )
    eventually(
        lambda: events_of(kube_api, namespace, uid) == [("Warning", "InputInvalid")],
        what="the Warning Event",
    )
    assert runs_count(db) == 0


def test_resume_from_resumes_a_failed_run_or_says_why_not(
    operator: Operator, objects: Objects, db: psycopg.Connection[Any], namespace: str
) -> None:
    """spec.resumeFrom: a new run that reuses what succeeded in the old one; an input other
    than the old run's is refused for good (docs/step-cache.md, "Resume")."""
    apply(db, "rag", STEPS, namespace=namespace)
    old = start_run(
        db, "rag", input={"corpus": "wiki"}, queue_anyway=True, namespace=namespace
    ).run_id
    (leased,) = lease_now(db, ["demo.collect@1"], worker="w1", limit=1, lease_seconds=60)
    assert asyncio.run(_complete(db.info.dsn, leased, "w1", {"docs": 3}))
    cancel_run(db, old)  # collect succeeded, index never ran

    objects.create(*WFR, "again", {"definition": "rag", "resumeFrom": old})
    status = eventually(
        lambda: (s := objects.status("workflowruns", "again")).get("runId") and s,
        what="resumed run started",
    )
    rows = dict(
        db.execute(
            "SELECT key, jsonb_build_array(status, result, reused_from ->> 'run')"
            " FROM rara_steps WHERE run_id = %s",
            (status["runId"],),
        ).fetchall()
    )
    assert rows == {"collect": ["succeeded", {"docs": 3}, str(old)], "index": ["ready", None, None]}

    objects.create(*WFR, "other", {"definition": "rag", "resumeFrom": old, "input": {"x": 1}})
    status = eventually(
        lambda: (s := objects.status("workflowruns", "other")).get("phase") and s,
        what="the refusal reported",
    )
    assert (status["phase"], status["reason"]) == ("Refused", "ResumeRefused")
    assert "another input" in status["message"]
    assert runs_count(db) == 2


def test_run_phases_are_columns_and_events(
    operator: Operator,
    objects: Objects,
    db: psycopg.Connection[Any],
    kube_api: KubeFixture,
    namespace: str,
) -> None:
    only = [{"key": "only", "capability": "demo.one@1", "retry": {"maxAttempts": 1}}]
    apply(db, "one", only, namespace=namespace)
    uids = {
        name: objects.create("workflowruns", "WorkflowRun", name, {"definition": "one"})[
            "metadata"
        ]["uid"]
        for name in ("good", "doomed")
    }
    run_ids = {
        name: eventually(
            lambda n=name: objects.status("workflowruns", n).get("runId"),
            what=f"run {name} started",
        )
        for name in uids
    }
    leased = {
        step.run_id: step
        for step in lease_now(db, ["demo.one@1"], worker="w1", limit=2, lease_seconds=60)
    }
    assert set(leased) == set(run_ids.values())
    for name in uids:  # seen Running before it ends, so the Running Event is certain
        eventually(
            lambda n=name: objects.status("workflowruns", n).get("phase") == "Running",
            what=f"{name} Running",
        )

    assert asyncio.run(_complete(db.info.dsn, leased[run_ids["good"]], "w1", {}))
    assert asyncio.run(_fail(db.info.dsn, leased[run_ids["doomed"]], "w1"))
    for name, phase, progress in (("good", "Succeeded", "1/1"), ("doomed", "Failed", "0/1")):
        eventually(
            lambda n=name, p=phase: objects.status("workflowruns", n).get("phase") == p,
            what=f"{name} {phase}",
        )
        shown = columns(kube_api, namespace, "workflowruns", name)
        assert (shown["Phase"], shown["Done/Total"], shown["Reason"]) == (phase, progress, None)

    expected = {
        "good": [("Normal", "Accepted"), ("Normal", "Running"), ("Normal", "Succeeded")],
        "doomed": [("Normal", "Accepted"), ("Normal", "Running"), ("Warning", "Failed")],
    }
    for name, uid in uids.items():
        eventually(
            lambda u=uid, n=name: events_of(kube_api, namespace, u) == expected[n],
            what=f"{name}'s Events {expected[name]}",
        )


def deployment(name: str, replicas: int) -> client.V1Deployment:
    labels = {"app": name}
    return client.V1Deployment(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1DeploymentSpec(
            replicas=replicas,
            selector=client.V1LabelSelector(match_labels=labels),
            template=client.V1PodTemplateSpec(
                metadata=client.V1ObjectMeta(labels=labels),
                spec=client.V1PodSpec(containers=[client.V1Container(name="w", image="w")]),
            ),
        ),
    )


def test_pool_scales_with_backlog(
    operator: Operator,
    objects: Objects,
    kube_api: KubeFixture,
    namespace: str,
    db: psycopg.Connection[Any],
) -> None:
    apps = client.AppsV1Api(kube_api.api_client)
    apps.create_namespaced_deployment(namespace, deployment("workers", 0))
    cooldown = 2
    objects.create(
        "workerpools",
        "WorkerPool",
        "workers",
        {
            "deploymentName": "workers",
            "capabilities": ["demo.fan@1"],
            "minReplicas": 0,
            "maxReplicas": 4,
            "targetBacklogPerReplica": 2,
            "cooldownSeconds": cooldown,
        },
    )

    def replicas() -> int:
        return int(apps.read_namespaced_deployment_scale("workers", namespace).spec.replicas or 0)

    eventually(
        lambda: objects.status("workerpools", "workers").get("lastDecision"), what="first decision"
    )
    assert replicas() == 0

    fan = [{"key": f"s{i}", "capability": "demo.fan@1"} for i in range(3)]
    apply(db, "fan", fan)
    runs = [start_run(db, "fan", queue_anyway=True).run_id for _ in range(2)]  # 6 ready steps
    t_backlog = time.monotonic()
    eventually(lambda: replicas() == 3, what="scale up to ceil(6/2) = 3")
    measure(f"backlog 6 -> 3 replicas after {time.monotonic() - t_backlog:.2f}s")
    # The status patch follows the scale patch (kopf applies it after the handler returns).
    status = eventually(
        lambda: (s := objects.status("workerpools", "workers")).get("replicas") == 3 and s,
        what="scale-up recorded",
    )
    assert (status["backlog"], status["desiredReplicas"]) == (6, 3)
    assert status["lastScaleTime"]
    measure(f"scale-up decision: {status['lastDecision']}")

    # Idle: held for the cooldown (the window is visible in the status), then zero.
    for run_id in runs:
        cancel_run(db, run_id)
    t_idle = time.monotonic()
    held = eventually(
        lambda: (s := objects.status("workerpools", "workers")).get("scaleDownSince") and s,
        what="cooldown window opened",
    )
    assert held["replicas"] == 3
    assert "cooldown" in held["lastDecision"]
    measure(f"idle decision: {held['lastDecision']}")
    eventually(lambda: replicas() == 0, what="scale to zero after the cooldown")
    waited = time.monotonic() - t_idle
    measure(f"backlog 0 -> 0 replicas after {waited:.2f}s (cooldown {cooldown}s)")
    assert waited >= cooldown
    final = eventually(
        lambda: (s := objects.status("workerpools", "workers")).get("replicas") == 0 and s,
        what="scale-down recorded",
    )
    assert final["desiredReplicas"] == 0
    assert final.get("scaleDownSince") is None
    measure(f"scale-down decision: {final['lastDecision']}")


def test_pool_without_deployment_says_so(operator: Operator, objects: Objects) -> None:
    objects.create(
        "workerpools",
        "WorkerPool",
        "ghost",
        {"deploymentName": "missing", "capabilities": ["demo.x@1"]},
    )
    eventually(
        lambda: "not found" in objects.status("workerpools", "ghost").get("lastDecision", ""),
        what="missing Deployment reported",
    )
