"""The CRDs on a real API server: they install, and the API server's verdict on a corpus of
documents agrees with the pydantic models' (tests/test_crd_schema.py compares the schemas;
this compares behaviour, CEL rules and list types included)."""

from __future__ import annotations

import copy
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from pydantic import BaseModel, ValidationError

from rara.definitions.parse import definition_from_object
from rara.errors import DefinitionInvalid
from rara.operator.models import WorkerPoolSpec, WorkflowRunSpec
from rara.triggers.model import TriggerSpec
from tests.test_examples import PLURALS, example_documents

from .apiserver import KubeFixture

pytestmark = pytest.mark.k8s

CRDS = Path(__file__).resolve().parents[2] / "crds"
GROUP, VERSION = "rara.dev", "v1alpha1"


def apply_crds(api: client.ApiClient, deadline_s: float = 60.0) -> None:
    """Create or replace rara's CRDs and wait until the API server serves them."""
    ext = client.ApiextensionsV1Api(api)
    names = []
    for path in sorted(CRDS.glob("*.yaml")):
        body = yaml.safe_load(path.read_text())
        names.append(body["metadata"]["name"])
        try:
            ext.create_custom_resource_definition(body)
        except ApiException as exc:
            if exc.status != 409:
                raise
            current = ext.read_custom_resource_definition(body["metadata"]["name"])
            body["metadata"]["resourceVersion"] = current.metadata.resource_version
            ext.replace_custom_resource_definition(body["metadata"]["name"], body)
    deadline = time.monotonic() + deadline_s
    for name in names:
        while True:
            conds = ext.read_custom_resource_definition(name).status.conditions or []
            if any(c.type == "Established" and c.status == "True" for c in conds):
                break
            assert time.monotonic() < deadline, f"CRD {name} not Established"
            time.sleep(0.05)


@pytest.fixture(scope="session")
def rara_crds(kube_api: KubeFixture) -> None:
    apply_crds(kube_api.api_client)


def server_accepts(
    api: client.ApiClient, namespace: str, plural: str, doc: dict[str, Any]
) -> tuple[bool, str]:
    """Server-side dry run with strict field validation (what `kubectl apply` does)."""
    try:
        client.CustomObjectsApi(api).create_namespaced_custom_object(
            GROUP, VERSION, namespace, plural, doc, dry_run="All", field_validation="Strict"
        )
    except ApiException as exc:
        if exc.status in (400, 422):
            return False, str(exc.body)
        raise
    return True, ""


def model_accepts(plural: str, doc: dict[str, Any]) -> tuple[bool, str]:
    try:
        if plural == "workflowdefinitions":
            definition_from_object(doc)
        else:
            model: type[BaseModel] = {
                "workflowruns": WorkflowRunSpec,
                "workerpools": WorkerPoolSpec,
                "workflowtriggers": TriggerSpec,
            }[plural]
            model.model_validate(doc["spec"])
    except (DefinitionInvalid, ValidationError) as exc:
        return False, str(exc)
    return True, ""


def definition(steps: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "WorkflowDefinition",
        "metadata": {"name": "corpus"},
        "spec": {"steps": steps},
    }


def step(key: str, **fields: Any) -> dict[str, Any]:
    return {"key": key, "capability": "demo.echo@1", **fields}


FULL_STEP = step(
    "adapt",
    executor="grpc",
    dependsOn=["a"],
    timeout="1h30m",
    heartbeatTimeout="500ms",
    priority=-1000,
    retry={"maxAttempts": 5, "initialDelay": "1s", "maxDelay": "1m", "backoffCoefficient": 1.5},
    resources={"gpu": 1, "cpu": "500m", "memory": "2Gi"},
    input={"nested": {"any": ["json", 1, True]}},
    secrets={"token": {"name": "hf", "key": "token"}},
)

# (id, document, both accept?) — every case where model and API server must agree.
DEFINITIONS = [
    ("minimal", definition([step("a")]), True),
    ("every field", definition([step("a"), FULL_STEP]), True),
    ("null optional fields", definition([step("a", timeout=None, resources={"cpu": None})]), True),
    ("no steps", definition([]), False),
    ("bad capability", definition([step("a", capability="Echo")]), False),
    ("capability without major", definition([step("a", capability="demo.echo")]), False),
    ("bad key", definition([step("A_")]), False),
    ("unknown executor", definition([step("a", executor="docker")]), False),
    ("bad duration", definition([step("a", timeout="5 minutes")]), False),
    ("integer duration", definition([step("a", timeout=300)]), False),
    ("priority too high", definition([step("a", priority=1001)]), False),
    ("gpu negative", definition([step("a", resources={"gpu": -1})]), False),
    ("bad memory", definition([step("a", resources={"memory": "2GB"})]), False),
    ("coefficient below 1", definition([step("a", retry={"backoffCoefficient": 0.5})]), False),
    ("attempts zero", definition([step("a", retry={"maxAttempts": 0})]), False),
    ("secret without name", definition([step("a", secrets={"t": {"key": "k"}})]), False),
    ("duplicate step key", definition([step("a"), step("a")]), False),
    ("dependency listed twice", definition([step("a"), step("b", dependsOn=["a", "a"])]), False),
    ("unknown field", definition([step("a", retries=3)]), False),
]

# Only the model can judge these (a graph property, a relation between two durations): the
# API server stores them, the operator reports them as Invalid.
MODEL_ONLY = [
    ("depends on itself", definition([step("a", dependsOn=["a"])])),
    ("unknown dependency", definition([step("a", dependsOn=["zzz"])])),
    ("cycle", definition([step("a", dependsOn=["b"]), step("b", dependsOn=["a"])])),
    (
        "maxDelay below initialDelay",
        definition([step("a", retry={"initialDelay": "1m", "maxDelay": "1s"})]),
    ),
]


def run(spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "WorkflowRun",
        "metadata": {"name": "corpus"},
        "spec": spec,
    }


def pool(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "WorkerPool",
        "metadata": {"name": "corpus"},
        "spec": {"deploymentName": "workers", "capabilities": ["demo.echo@1"], **spec},
    }


def trigger(**webhook: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "WorkflowTrigger",
        "metadata": {"name": "corpus"},
        "spec": {"definition": "rag", "webhook": {"secretRef": {"name": "hook"}, **webhook}},
    }


OTHERS = [
    ("run minimal", "workflowruns", run({"definition": "rag-refresh"}), True),
    (
        "run full",
        "workflowruns",
        run({"definition": "rag", "version": 2, "input": {"q": [1, {"x": None}]}}),
        True,
    ),
    ("run version 0", "workflowruns", run({"definition": "rag", "version": 0}), False),
    ("run bad name", "workflowruns", run({"definition": "Rag"}), False),
    ("run no definition", "workflowruns", run({"input": {}}), False),
    ("pool minimal", "workerpools", pool(), True),
    (
        "pool full",
        "workerpools",
        pool(minReplicas=1, maxReplicas=3, targetBacklogPerReplica=5, cooldownSeconds=0),
        True,
    ),
    ("pool max below min", "workerpools", pool(minReplicas=3, maxReplicas=2), False),
    ("pool max below default min", "workerpools", pool(maxReplicas=0), True),
    ("pool min above default max", "workerpools", pool(minReplicas=11), False),
    ("pool no capabilities", "workerpools", pool(capabilities=[]), False),
    ("pool bad capability", "workerpools", pool(capabilities=["gpu"]), False),
    ("pool target zero", "workerpools", pool(targetBacklogPerReplica=0), False),
    ("trigger minimal", "workflowtriggers", trigger(), True),
    (
        "trigger full",
        "workflowtriggers",
        trigger(
            secretRef={"name": "hook", "key": "hmac"},
            toleranceSeconds=60,
            maxBodyBytes=1024,
            inputFrom={"doc": "/doc/id"},
        ),
        True,
    ),
    ("trigger tolerance zero", "workflowtriggers", trigger(toleranceSeconds=0), False),
    ("trigger body too large", "workflowtriggers", trigger(maxBodyBytes=2 << 20), False),
    ("trigger bad secret name", "workflowtriggers", trigger(secretRef={"name": "Hook"}), False),
    ("trigger pointer not text", "workflowtriggers", trigger(inputFrom={"doc": 1}), False),
]


@pytest.mark.parametrize(("case", "doc", "valid"), DEFINITIONS, ids=[c[0] for c in DEFINITIONS])
def test_definition_verdicts_agree(
    kube_api: KubeFixture,
    rara_crds: None,
    namespace: str,
    case: str,
    doc: dict[str, Any],
    valid: bool,
) -> None:
    server, why_server = server_accepts(
        kube_api.api_client, namespace, "workflowdefinitions", copy.deepcopy(doc)
    )
    model, why_model = model_accepts("workflowdefinitions", doc)
    assert (server, model) == (valid, valid), (why_server, why_model)


@pytest.mark.parametrize(("case", "doc"), MODEL_ONLY, ids=[c[0] for c in MODEL_ONLY])
def test_model_only_checks(
    kube_api: KubeFixture, rara_crds: None, namespace: str, case: str, doc: dict[str, Any]
) -> None:
    assert server_accepts(kube_api.api_client, namespace, "workflowdefinitions", doc)[0]
    assert not model_accepts("workflowdefinitions", doc)[0]


@pytest.mark.parametrize(("case", "plural", "doc", "valid"), OTHERS, ids=[c[0] for c in OTHERS])
def test_run_pool_and_trigger_verdicts_agree(
    kube_api: KubeFixture,
    rara_crds: None,
    namespace: str,
    case: str,
    plural: str,
    doc: dict[str, Any],
    valid: bool,
) -> None:
    server, why_server = server_accepts(kube_api.api_client, namespace, plural, copy.deepcopy(doc))
    model, why_model = model_accepts(plural, doc)
    assert (server, model) == (valid, valid), (why_server, why_model)


def test_run_spec_is_immutable(kube_api: KubeFixture, rara_crds: None, namespace: str) -> None:
    api = client.CustomObjectsApi(kube_api.api_client)
    api.create_namespaced_custom_object(
        GROUP, VERSION, namespace, "workflowruns", run({"definition": "rag", "input": {"a": 1}})
    )
    with pytest.raises(ApiException) as err:
        api.patch_namespaced_custom_object(
            GROUP,
            VERSION,
            namespace,
            "workflowruns",
            "corpus",
            {"spec": {"input": {"a": 2}}},
            _content_type="application/merge-patch+json",
        )
    assert err.value.status == 422
    assert "immutable" in str(err.value.body)
    # Nor may a field be added or removed; but paused may change (rara.operator.pausing).
    for change in ({"version": 2}, {"input": None}):
        with pytest.raises(ApiException) as err:
            api.patch_namespaced_custom_object(
                GROUP, VERSION, namespace, "workflowruns", "corpus", {"spec": change},
                _content_type="application/merge-patch+json",
            )  # fmt: skip
        assert err.value.status == 422, change
    for paused in (True, False):
        patched = api.patch_namespaced_custom_object(
            GROUP, VERSION, namespace, "workflowruns", "corpus", {"spec": {"paused": paused}},
            _content_type="application/merge-patch+json",
        )  # fmt: skip
        assert patched["spec"] == {"definition": "rag", "input": {"a": 1}, "paused": paused}


def test_pool_defaults_are_the_models(
    kube_api: KubeFixture, rara_crds: None, namespace: str
) -> None:
    api = client.CustomObjectsApi(kube_api.api_client)
    stored = api.create_namespaced_custom_object(GROUP, VERSION, namespace, "workerpools", pool())
    assert (
        stored["spec"]
        == WorkerPoolSpec.model_validate(stored["spec"]).model_dump(by_alias=True)
        == WorkerPoolSpec.model_validate(pool()["spec"]).model_dump(by_alias=True)
    )


EXAMPLES = example_documents()


@pytest.mark.parametrize(("name", "doc"), EXAMPLES, ids=[name for name, _ in EXAMPLES])
def test_examples_are_accepted(
    kube_api: KubeFixture, rara_crds: None, namespace: str, name: str, doc: dict[str, Any]
) -> None:
    """What the README has people `kubectl apply` and `kubectl create` (examples/), under
    strict field validation: an unknown field is refused, not pruned."""
    accepted, why = server_accepts(
        kube_api.api_client, namespace, PLURALS[doc["kind"]], copy.deepcopy(doc)
    )
    assert accepted, why
