"""The chart against a real API server: every rendered manifest passes a server-side dry
run, and the operator runs under the chart's own ServiceAccount and Role — the proof that the
RBAC is sufficient (least privilege is pinned in tests/test_chart.py)."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml
from kubernetes import client, dynamic
from kubernetes.client.exceptions import ApiException

from rara.operator.peering import Peering
from rara.runs import cancel_run, start_run
from tests.support.definitions import apply

from .apiserver import KubeFixture, write_kubeconfig
from .test_operator import (
    STEPS,
    Objects,
    Operator,
    condition,
    delete_workflow_runs,
    deployment,
    events_of,
    eventually,
    measure,
)
from .test_operator_crds import rara_crds

pytestmark = pytest.mark.k8s
__all__ = ["rara_crds"]

ROOT = Path(__file__).resolve().parents[2]
KUBE_VERSION = "1.37.0"


def render(namespace: str, *args: str) -> list[dict[str, Any]]:
    done = subprocess.run(
        ["bash", str(ROOT / ".ci" / "go-tool.sh"), "helm"],
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"helm could not be built by .ci/go-tool.sh: {done.stderr[-300:]}")
    helm = done.stdout.strip().splitlines()[-1]
    out = subprocess.run(
        [
            helm,
            "template",
            "rara",
            str(ROOT / "charts" / "rara"),
            "--namespace",
            namespace,
            "--kube-version",
            KUBE_VERSION,
            "--set",
            "database.url=postgresql://db/rara",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def create(api: client.ApiClient, namespace: str, doc: dict[str, Any], *, dry_run: bool) -> None:
    resource = dynamic.DynamicClient(api).resources.get(
        api_version=doc["apiVersion"], kind=doc["kind"]
    )
    kwargs: dict[str, Any] = {"dry_run": "All"} if dry_run else {}
    if resource.namespaced:
        resource.create(body=doc, namespace=namespace, field_validation="Strict", **kwargs)
    else:
        resource.create(body=doc, field_validation="Strict", **kwargs)


@pytest.mark.parametrize(
    "variant",
    [
        [],
        ["--set", "operator.clusterWide=true"],
        ["--set", "triggers.enabled=true", "--set", "triggers.secrets={docs-hook}"],
    ],
    ids=["namespaced", "cluster-wide", "triggers"],
)
def test_rendered_chart_passes_server_side_dry_run(
    kube_api: KubeFixture, rara_crds: None, namespace: str, variant: list[str]
) -> None:
    docs = render(namespace, *variant)
    refused = []
    for doc in docs:
        try:
            create(kube_api.api_client, namespace, doc, dry_run=True)
        except ApiException as exc:
            refused.append(f"{doc['kind']}/{doc['metadata']['name']}: {exc.status} {exc.body}")
    assert not refused, "\n".join(refused)
    assert {d["kind"] for d in docs} >= {
        "Deployment",
        "ClusterRole" if "operator.clusterWide=true" in variant else "Role",
        "Job",
        "WorkerPool",
        "PodDisruptionBudget",
        "Service",
    }
    if "triggers.enabled=true" in variant:  # the webhook endpoint went through the dry run too
        assert ("Deployment", "rara-triggers") in {(d["kind"], d["metadata"]["name"]) for d in docs}


def service_account_kubeconfig(kube: KubeFixture, namespace: str, sa: str, path: Path) -> Path:
    token = client.CoreV1Api(kube.api_client).create_namespaced_service_account_token(
        sa,
        namespace,
        client.AuthenticationV1TokenRequest(
            spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=3600)
        ),
    )
    # Server and CA from the admin kubeconfig: works for the local and an external server.
    doc = yaml.safe_load(kube.kubeconfig.read_text())
    cluster = doc["clusters"][0]["cluster"]
    if "certificate-authority" not in cluster:
        pytest.skip("the kubeconfig has no CA file to reuse")
    return write_kubeconfig(
        path,
        cluster["server"],
        Path(cluster["certificate-authority"]),
        token=token.status.token,
        name="rara-operator",
    )


def test_operator_runs_with_the_charts_rbac(
    kube_api: KubeFixture,
    rara_crds: None,
    namespace: str,
    database_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    role_url: Callable[[str], str],
) -> None:
    docs = render(namespace, "--set", "executor.enabled=false")
    for doc in docs:
        if doc["kind"] in ("ServiceAccount", "Role", "RoleBinding", "KopfPeering"):
            create(kube_api.api_client, namespace, doc, dry_run=False)
    (sa,) = [d["metadata"]["name"] for d in docs if d["kind"] == "ServiceAccount"]
    kubeconfig = service_account_kubeconfig(kube_api, namespace, sa, tmp_path / "kubeconfig")
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))

    objects = Objects(kube_api, namespace)  # the test itself acts as admin
    apps = client.AppsV1Api(kube_api.api_client)
    apps.create_namespaced_deployment(namespace, deployment("workers", 0))
    with psycopg.connect(database_url, autocommit=True) as db:
        apply(db, "fan", [{"key": "a", "capability": "demo.fan@1"}])
        start_run(db, "fan", queue_anyway=True)

    # The chart's RBAC, its login, peered as the chart's replicas are (docs/operator.md).
    (peering,) = [d["metadata"]["name"] for d in docs if d["kind"] == "KopfPeering"]
    op = Operator(kube_api, namespace, role_url("rara_operator"), Peering(peering))
    op.start()
    try:
        started = time.monotonic()
        objects.create("workflowdefinitions", "WorkflowDefinition", "rag", {"steps": STEPS})
        eventually(
            lambda: (
                condition(objects.status("workflowdefinitions", "rag"), "Ready").get("status")
                == "True"
            ),
            what="Ready under the chart's Role",
        )
        measure(f"Ready under the chart's RBAC after {time.monotonic() - started:.2f}s")
        entries = client.CustomObjectsApi(kube_api.api_client).get_namespaced_custom_object(
            "kopf.dev", "v1", namespace, "kopfpeerings", peering
        )["status"]
        assert len(entries) == 1, entries  # its keep-alive, renewed under the chart's Role
        objects.create(
            "workerpools",
            "WorkerPool",
            "workers",
            {"deploymentName": "workers", "capabilities": ["demo.fan@1"]},
        )
        eventually(
            lambda: apps.read_namespaced_deployment_scale("workers", namespace).spec.replicas == 1,
            what="scaled under the chart's Role",
        )
        # Events from the create handler (kopf's client) and from the status sync (rara's).
        uid = objects.create("workflowruns", "WorkflowRun", "nightly", {"definition": "rag"})[
            "metadata"
        ]["uid"]
        run_id = eventually(
            lambda: objects.status("workflowruns", "nightly").get("runId"),
            what="run started under the chart's Role",
        )
        with psycopg.connect(database_url, autocommit=True) as db:
            cancel_run(db, run_id)
        eventually(
            lambda: (
                events_of(kube_api, namespace, uid)
                == [("Normal", "Accepted"), ("Normal", "Cancelled")]
            ),
            what="Events posted under the chart's Role",
        )
        delete_workflow_runs(objects.api, namespace)
        objects.delete("workflowdefinitions", "rag")
        eventually(
            lambda: objects.get("workflowdefinitions", "rag") is None,
            what="finalizer released under the chart's Role",
        )
    finally:
        op.stop()
