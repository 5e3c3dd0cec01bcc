"""The chart's webhook endpoint (charts/rara/templates/triggers.yaml): off by default; when on,
the rara-triggers Deployment running `rara triggers serve` on every address, with probes, a
Service, the database URL from a Secret (its own login when given), the webhooks' Secrets
mounted under RARA_SECRETS_DIR where rara.secrets.resolve reads them, valid Kubernetes
objects."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import psycopg
import pytest

from rara.triggers.manage import apply_trigger
from rara.triggers.model import trigger_from_object
from tests.support.definitions import noop_definition
from tests.support.ui import RARA, free_port
from tests.support.waiting import wait_until
from tests.test_chart import KUBE_VERSION, by_kind, env_of, helm, refused, render
from tests.triggers.conftest import SECRET, signed_headers, trigger_document

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


def test_the_rendered_command_serves_a_delivery_signed_with_a_mounted_secret(
    helm: Path, database_url: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    """The container as rendered, run here: its args and env (the secrets' directory moved
    under tmp_path, a Secret's key as the file the kubelet writes) take a signed delivery for
    a trigger whose secretRef names the listed Secret, and start its run."""
    port = free_port()
    docs = render(
        helm,
        "--set",
        "triggers.enabled=true",
        "--set",
        "triggers.secrets={docs-hook}",
        "--set",
        f"triggers.port={port}",
    )
    deployment, _ = _triggers(docs)
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    secrets_dir = env_of(container)["RARA_SECRETS_DIR"]["value"]
    (mount,) = [m for m in container["volumeMounts"] if m["mountPath"].startswith(secrets_dir)]
    key_file = tmp_path / Path(mount["mountPath"]).relative_to(secrets_dir) / "secret"
    key_file.parent.mkdir(parents=True)
    key_file.write_text(SECRET)
    noop_definition(conn)
    document = trigger_document(webhook={"secretRef": {"name": "docs-hook", "key": "secret"}})
    apply_trigger(conn, trigger_from_object(document))

    env = {k: v for k, v in os.environ.items() if not k.startswith("RARA_SECRET")}
    env.update(DATABASE_URL=database_url, RARA_SECRETS_DIR=str(tmp_path))
    log = tmp_path / "serve.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([RARA, *container["args"]], env=env, stdout=out, stderr=out)
    try:
        base = f"http://127.0.0.1:{port}"
        wait_until(lambda: _ready(base, proc, log), timeout=30, message="rara-triggers ready")
        body = json.dumps({"doc": "a.md"}).encode()
        request = urllib.request.Request(
            base + "/hooks/default/docs-landed",
            data=body,
            headers={"content-type": "application/json", **signed_headers(body, "k8s-1")},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=10) as answer:
            assert answer.status == 201, log.read_text(errors="replace")
            started = json.loads(answer.read())
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(10)
    assert (started["created"], started["deliveries"]) == (True, 1)
    row = conn.execute("SELECT idempotency_key FROM rara_runs WHERE id = %s", (started["run"],))
    assert row.fetchone() == ("trigger:docs-landed:k8s-1",)


def _ready(base: str, proc: subprocess.Popen[bytes], log: Path) -> bool:
    assert proc.poll() is None, f"rara triggers serve exited:\n{log.read_text(errors='replace')}"
    try:
        with urllib.request.urlopen(base + "/readyz", timeout=2) as answer:
            return bool(answer.status == 200)
    except (urllib.error.URLError, ConnectionError):
        return False
