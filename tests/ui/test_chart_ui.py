"""The chart's dashboard (charts/rara/templates/ui.yaml): off by default; when on, a
Deployment with probes and a Service, the database URL from a Secret, read-only unless told,
settings as RARA_UI_* variables (each one an option of `rara ui`), valid Kubernetes objects."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.test_chart import KUBE_VERSION, by_kind, env_of, helm, refused, render

__all__ = ["helm"]  # the fixture, used by name below


def _ui(docs: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    (deployment,) = [
        d for d in by_kind(docs, "Deployment") if d["metadata"]["name"].endswith("-ui")
    ]
    (service,) = [d for d in by_kind(docs, "Service") if d["metadata"]["name"].endswith("-ui")]
    return deployment, service


def test_off_by_default(helm: Path) -> None:
    names = [d["metadata"]["name"] for d in render(helm)]
    assert not [n for n in names if n.endswith("-ui")]


def test_on_read_only_with_the_runtimes_secret(helm: Path) -> None:
    docs = render(helm, "--set", "ui.enabled=true")
    deployment, service = _ui(docs)
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    env = env_of(container)
    assert container["args"] == ["ui"]
    assert env["RARA_UI_READ_ONLY"]["value"] == "true"
    assert env["RARA_UI_DATABASE_URL"]["valueFrom"]["secretKeyRef"] == {
        "name": "rara-database",
        "key": "url",
    }
    assert "RARA_UI_TOKEN_FILE" not in env
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert service["spec"]["ports"][0]["targetPort"] == "http"
    kv = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate not installed")
    for doc in (deployment, service):
        kv.validate(doc, KUBE_VERSION, strict=True)


def test_actions_with_a_token_file_and_a_read_mostly_role(helm: Path) -> None:
    from typer.main import get_command

    from rara.cli.main import app

    docs = render(
        helm,
        "--set",
        "ui.enabled=true",
        "--set",
        "ui.readOnly=false",
        "--set",
        "ui.auth.existingSecret=ui-token",
        "--set",
        "ui.database.existingSecret=pg-reader",
        "--set",
        "ui.auth.header=X-User",
    )
    deployment, _ = _ui(docs)
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    env = env_of(container)
    assert env["RARA_UI_READ_ONLY"]["value"] == "false"
    assert env["RARA_UI_DATABASE_URL"]["valueFrom"]["secretKeyRef"]["name"] == "pg-reader"
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert env["RARA_UI_TOKEN_FILE"]["value"].startswith(mounts["ui-token"])
    # Every variable the chart sets is one `rara ui` reads (RARA_ARTIFACTS: the shared one).
    command = get_command(app).commands["ui"]  # type: ignore[attr-defined]
    read = {"RARA_ARTIFACTS"}
    for param in command.params:
        names = param.envvar if isinstance(param.envvar, list) else [param.envvar]
        read |= {n for n in names if n}
    assert set(env) <= read, set(env) - read


def test_one_replica_with_actions_and_the_session_lifetime(helm: Path) -> None:
    """Sessions live in one process's memory: with actions on, a second replica is refused
    (it would refuse the first one's logins); read-only, replicas are free."""
    actions = [
        "--set",
        "ui.enabled=true",
        "--set",
        "ui.readOnly=false",
        "--set",
        "ui.auth.existingSecret=ui-token",
    ]
    refusal = refused(helm, *actions, "--set", "ui.replicas=2")
    assert "ui.replicas must be 0 or 1 while ui.readOnly is false" in refusal
    deployment, _ = _ui(render(helm, *actions, "--set", "ui.sessionSeconds=3600"))
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert env_of(container)["RARA_UI_SESSION_SECONDS"]["value"] == "3600"
    assert deployment["spec"]["replicas"] == 1
    deployment, _ = _ui(render(helm, "--set", "ui.enabled=true", "--set", "ui.replicas=3"))
    assert deployment["spec"]["replicas"] == 3


def test_user_roles_need_the_proxy_header(helm: Path) -> None:
    """ui.userRoles: each request as the role the proxy's header names; without the header
    there is no user, so the chart refuses it, naming both values."""
    on = ["--set", "ui.enabled=true", "--set", "ui.userRoles=true"]
    assert "ui.userRoles needs ui.auth.header" in refused(helm, *on)
    deployment, _ = _ui(render(helm, *on, "--set", "ui.auth.header=X-Forwarded-User"))
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    env = env_of(container)
    assert env["RARA_UI_USER_ROLES"]["value"] == "true"
    assert env["RARA_UI_AUTH_HEADER"]["value"] == "X-Forwarded-User"
    deployment, _ = _ui(render(helm, "--set", "ui.enabled=true"))
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert "RARA_UI_USER_ROLES" not in env_of(container)
