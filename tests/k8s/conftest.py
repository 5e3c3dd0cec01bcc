"""Fixtures for tests that need a real Kubernetes API server (marker: ``k8s``).

``kube_api`` (session): a local etcd + kube-apiserver (binaries from ``.ci/k8s-binaries.sh``)
or, with ``RARA_TEST_KUBECONFIG`` set, an existing cluster. Skips with the reason when
neither is available.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Iterator

import pytest
from kubernetes import client, config

from .apiserver import KubeFixture, KubeUnavailable, kube_api_from_env


@pytest.fixture(scope="session")
def kube_api() -> Iterator[KubeFixture]:
    with contextlib.ExitStack() as stack:
        try:
            api = stack.enter_context(kube_api_from_env())
        except KubeUnavailable as exc:
            pytest.skip(str(exc))
        api_client = config.new_client_from_config(config_file=str(api.kubeconfig))
        stack.callback(api_client.close)
        yield KubeFixture(kubeconfig=api.kubeconfig, api_client=api_client, info=api)


@pytest.fixture
def namespace(kube_api: KubeFixture) -> Iterator[str]:
    """A fresh namespace per test; deleted afterwards (without waiting: a bare API server
    has no namespace controller, so it stays Terminating, which is harmless)."""
    with fresh_namespace(kube_api) as name:
        yield name


@pytest.fixture
def other_namespace(kube_api: KubeFixture) -> Iterator[str]:
    """A second fresh namespace, as ``namespace``: for what must stay apart between two."""
    with fresh_namespace(kube_api) as name:
        yield name


@contextlib.contextmanager
def fresh_namespace(kube_api: KubeFixture) -> Iterator[str]:
    core = client.CoreV1Api(kube_api.api_client)
    name = f"rara-test-{secrets.token_hex(4)}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    try:
        yield name
    finally:
        core.delete_namespace(name)
