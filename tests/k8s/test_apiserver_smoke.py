"""Smoke tests: the API server fixture is real (CRDs, custom resources, scale, RBAC)."""

from __future__ import annotations

import secrets
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from .apiserver import KubeFixture

pytestmark = pytest.mark.k8s

T = TypeVar("T")


def eventually(fn: Callable[[], T], *, timeout: float = 30.0, what: str = "condition") -> T:
    """Call fn until it returns a truthy value (or stops raising 404/409), bounded in time."""
    deadline = time.monotonic() + timeout
    delay = 0.05
    while True:
        try:
            result = fn()
            if result:
                return result
        except ApiException as exc:
            if exc.status not in (404, 409) or time.monotonic() >= deadline:
                raise
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what} not reached within {timeout}s")
        time.sleep(delay)
        delay = min(delay * 2, 0.5)


def wait_established(ext: client.ApiextensionsV1Api, name: str) -> None:
    def established() -> bool:
        crd = ext.read_custom_resource_definition(name)
        conds = (crd.status and crd.status.conditions) or []
        return any(c.type == "Established" and c.status == "True" for c in conds)

    eventually(established, what=f"CRD {name} Established")


def test_server_identity(kube_api: KubeFixture) -> None:
    version = client.VersionApi(kube_api.api_client).get_code()
    assert version.major == "1"
    if kube_api.external:
        return
    assert version.git_version.startswith("v1.")
    review = client.AuthenticationV1Api(kube_api.api_client).create_self_subject_review(
        client.V1SelfSubjectReview()
    )
    user = review.status.user_info
    assert user.username == "rara-admin"
    assert "system:masters" in user.groups


@pytest.fixture
def widget_crd(kube_api: KubeFixture) -> Iterator[tuple[str, str, str]]:
    ext = client.ApiextensionsV1Api(kube_api.api_client)
    group = f"smoke{secrets.token_hex(3)}.rara.dev"  # unique: CRDs are cluster-scoped
    name = f"widgets.{group}"
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": name},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [
                {
                    "name": "v1alpha1",
                    "served": True,
                    "storage": True,
                    "subresources": {
                        "status": {},
                        "scale": {
                            "specReplicasPath": ".spec.replicas",
                            "statusReplicasPath": ".status.replicas",
                        },
                    },
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {
                                    "type": "object",
                                    "required": ["size"],
                                    "properties": {
                                        "size": {"type": "integer", "minimum": 1},
                                        "replicas": {"type": "integer", "minimum": 0},
                                    },
                                },
                                "status": {
                                    "type": "object",
                                    "properties": {"replicas": {"type": "integer"}},
                                },
                            },
                        }
                    },
                }
            ],
        },
    }
    ext.create_custom_resource_definition(crd)
    try:
        wait_established(ext, name)
        yield group, "v1alpha1", "widgets"
    finally:
        ext.delete_custom_resource_definition(name)


def test_crd_and_custom_resource(
    kube_api: KubeFixture, widget_crd: tuple[str, str, str], namespace: str
) -> None:
    group, version, plural = widget_crd
    co = client.CustomObjectsApi(kube_api.api_client)
    body = {
        "apiVersion": f"{group}/{version}",
        "kind": "Widget",
        "metadata": {"name": "w1"},
        "spec": {"size": 2},
    }
    eventually(lambda: co.create_namespaced_custom_object(group, version, namespace, plural, body))

    got = co.get_namespaced_custom_object(group, version, namespace, plural, "w1")
    assert got["spec"] == {"size": 2}

    patched = co.patch_namespaced_custom_object(
        group, version, namespace, plural, "w1", {"spec": {"size": 5, "replicas": 1}}
    )
    assert patched["spec"] == {"size": 5, "replicas": 1}
    assert patched["metadata"]["generation"] == 2

    # the status subresource is separate from the main resource (as kopf expects)
    co.patch_namespaced_custom_object_status(
        group, version, namespace, plural, "w1", {"status": {"replicas": 1}}
    )
    scale = co.patch_namespaced_custom_object_scale(
        group, version, namespace, plural, "w1", {"spec": {"replicas": 4}}
    )
    assert scale["spec"]["replicas"] == 4
    assert scale["status"]["replicas"] == 1

    # the structural schema is enforced by the server
    bad = {**body, "metadata": {"name": "w2"}, "spec": {"size": 0}}
    with pytest.raises(ApiException) as err:
        co.create_namespaced_custom_object(group, version, namespace, plural, bad)
    assert err.value.status == 422

    listed = co.list_namespaced_custom_object(group, version, namespace, plural)
    assert [i["metadata"]["name"] for i in listed["items"]] == ["w1"]


def _deployment(name: str, replicas: int) -> client.V1Deployment:
    labels = {"app.kubernetes.io/name": name}
    return client.V1Deployment(
        metadata=client.V1ObjectMeta(name=name, labels=labels),
        spec=client.V1DeploymentSpec(
            replicas=replicas,
            selector=client.V1LabelSelector(match_labels=labels),
            template=client.V1PodTemplateSpec(
                metadata=client.V1ObjectMeta(labels=labels),
                spec=client.V1PodSpec(
                    containers=[client.V1Container(name="worker", image="example.invalid/w:1")]
                ),
            ),
        ),
    )


def test_deployment_scale_subresource(kube_api: KubeFixture, namespace: str) -> None:
    apps = client.AppsV1Api(kube_api.api_client)
    apps.create_namespaced_deployment(namespace, _deployment("rara-worker", 1))

    scale = apps.patch_namespaced_deployment_scale(
        "rara-worker", namespace, {"spec": {"replicas": 3}}
    )
    assert scale.spec.replicas == 3
    assert apps.read_namespaced_deployment("rara-worker", namespace).spec.replicas == 3

    # read-modify-write through the scale subresource (optimistic concurrency), down to zero
    current = apps.read_namespaced_deployment_scale("rara-worker", namespace)
    current.spec.replicas = 0
    apps.replace_namespaced_deployment_scale("rara-worker", namespace, current)
    assert apps.read_namespaced_deployment("rara-worker", namespace).spec.replicas == 0

    # a stale resourceVersion is refused: the operator must re-read and retry
    with pytest.raises(ApiException) as err:
        apps.replace_namespaced_deployment_scale("rara-worker", namespace, current)
    assert err.value.status == 409


def _client_with_token(kube_api: KubeFixture, token: str) -> client.ApiClient:
    base = kube_api.api_client.configuration
    cfg = client.Configuration()
    cfg.host = base.host
    cfg.ssl_ca_cert = base.ssl_ca_cert
    cfg.verify_ssl = base.verify_ssl
    cfg.api_key = {"authorization": f"Bearer {token}"}
    return client.ApiClient(cfg)


def test_rbac_is_enforced_for_service_accounts(kube_api: KubeFixture, namespace: str) -> None:
    core = client.CoreV1Api(kube_api.api_client)
    rbac = client.RbacAuthorizationV1Api(kube_api.api_client)
    core.create_namespaced_service_account(
        namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="scaler"))
    )
    token = core.create_namespaced_service_account_token(
        "scaler",
        namespace,
        client.AuthenticationV1TokenRequest(
            spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=600)
        ),
    ).status.token
    client.AppsV1Api(kube_api.api_client).create_namespaced_deployment(
        namespace, _deployment("pool", 0)
    )

    sa_client = _client_with_token(kube_api, token)
    try:
        sa_apps = client.AppsV1Api(sa_client)
        with pytest.raises(ApiException) as err:
            sa_apps.patch_namespaced_deployment_scale("pool", namespace, {"spec": {"replicas": 2}})
        assert err.value.status == 403

        rbac.create_namespaced_role(
            namespace,
            client.V1Role(
                metadata=client.V1ObjectMeta(name="scale-deployments"),
                rules=[
                    client.V1PolicyRule(
                        api_groups=["apps"],
                        resources=["deployments/scale"],
                        verbs=["get", "patch", "update"],
                    )
                ],
            ),
        )
        rbac.create_namespaced_role_binding(
            namespace,
            client.V1RoleBinding(
                metadata=client.V1ObjectMeta(name="scaler"),
                role_ref=client.V1RoleRef(
                    api_group="rbac.authorization.k8s.io", kind="Role", name="scale-deployments"
                ),
                subjects=[
                    client.RbacV1Subject(kind="ServiceAccount", name="scaler", namespace=namespace)
                ],
            ),
        )
        scale = eventually(  # RBAC caches are updated asynchronously
            lambda: _try_scale(sa_apps, namespace), what="RBAC grant to take effect"
        )
        assert scale.spec.replicas == 2
        # least privilege: scaling does not imply reading the Deployment itself
        with pytest.raises(ApiException) as err:
            sa_apps.read_namespaced_deployment("pool", namespace)
        assert err.value.status == 403
    finally:
        sa_client.close()


def _try_scale(apps: client.AppsV1Api, namespace: str) -> Any:
    try:
        return apps.patch_namespaced_deployment_scale("pool", namespace, {"spec": {"replicas": 2}})
    except ApiException as exc:
        if exc.status == 403:
            return None
        raise


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed")
def test_kubeconfig_works_with_kubectl(kube_api: KubeFixture) -> None:
    out = subprocess.run(
        ["kubectl", "--kubeconfig", str(kube_api.kubeconfig), "get", "--raw", "/readyz"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert out.strip() == "ok"
