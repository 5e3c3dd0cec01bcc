"""The chart's webhook endpoint (charts/rara/templates/triggers.yaml): off by default; when on,
the rara-triggers Deployment running `rara triggers serve` on every address, with probes, a
Service, the database URL from a Secret (its own login when given), the webhooks' Secrets
mounted under RARA_SECRETS_DIR where rara.secrets.resolve reads them, valid Kubernetes
objects."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.test_chart import KUBE_VERSION, by_kind, env_of, helm, refused, render

__all__ = ["helm"]  # the fixture, used by name below


def _triggers(docs: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    (deployment,) = [
        d for d in by_kind(docs, "Deployment") if d["metadata"]["name"] == "rara-triggers"
    ]
    (service,) = [d for d in by_kind(docs, "Service") if d["metadata"]["name"] == "rara-triggers"]
    return deployment, service


def test_off_by_default(helm: Path) -> None:
    names = [d["metadata"]["name"] for d in render(helm)]
    assert "rara-triggers" not in names


def test_on_it_serves_every_address_with_probes_and_the_runtimes_secret(helm: Path) -> None:
    docs = render(helm, "--set", "triggers.enabled=true")
    deployment, service = _triggers(docs)
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["args"] == [
        "triggers",
        "serve",
        "--host=0.0.0.0",
        "--port=8090",
        "--pool-size=8",
    ]
    env = env_of(container)
    assert env["DATABASE_URL"]["valueFrom"]["secretKeyRef"] == {
        "name": "rara-database",
        "key": "url",
    }
    assert env["RARA_SECRETS_DIR"]["value"] == "/var/run/rara/secrets"
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert container["ports"] == [{"name": "http", "containerPort": 8090}]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert pod["automountServiceAccountToken"] is False
    assert deployment["spec"]["replicas"] == 2
    assert service["spec"]["ports"] == [{"name": "http", "port": 80, "targetPort": "http"}]
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    kv = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate not installed")
    for doc in (deployment, service):
        kv.validate(doc, KUBE_VERSION, strict=True)


def test_webhook_secrets_are_mounted_where_secret_refs_are_resolved(helm: Path) -> None:
    docs = render(
        helm,
        "--set",
        "triggers.enabled=true",
        "--set",
        "triggers.secrets={docs-hook,github-hook}",
        "--set",
        "triggers.database.existingSecret=triggers-login",
        "--set",
        "triggers.port=9000",
    )
    deployment, _ = _triggers(docs)
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounted = {
        volumes[name]["secret"]["secretName"]: mount["mountPath"]
        for name, mount in mounts.items()
        if "secret" in volumes[name]
    }
    assert mounted == {
        "docs-hook": "/var/run/rara/secrets/docs-hook",
        "github-hook": "/var/run/rara/secrets/github-hook",
    }
    assert all(m.get("readOnly") for n, m in mounts.items() if "secret" in volumes[n])
    assert env_of(container)["DATABASE_URL"]["valueFrom"]["secretKeyRef"] == {
        "name": "triggers-login",
        "key": "url",
    }
    assert "--port=9000" in container["args"]
    assert container["ports"] == [{"name": "http", "containerPort": 9000}]
    kv = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate not installed")
    kv.validate(deployment, KUBE_VERSION, strict=True)


def test_a_secret_name_kubernetes_refuses_is_refused(helm: Path) -> None:
    assert "/triggers/secrets/0" in refused(
        helm, "--set", "triggers.enabled=true", "--set", "triggers.secrets={Docs_Hook}"
    )
