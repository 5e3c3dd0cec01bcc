"""The CRDs' OpenAPI schemas say what the pydantic models say.

Both sides are reduced to one normal form (types, properties, required, patterns, enums,
bounds, nullability, item and map-value schemas) and compared whole, so a field added,
renamed, loosened or tightened on one side only fails here. What OpenAPI cannot express
(unknown dependsOn targets, cycles, maxDelay >= initialDelay) stays in the model; the operator
reports it as the Invalid condition. The API server's own verdicts on a corpus of documents
are compared with the model's in tests/k8s/test_operator_crds.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import core_schema

from rara.definitions import durations
from rara.definitions.model import WorkflowSpec
from rara.operator.models import WorkerPoolSpec, WorkflowRunSpec
from rara.schedules.model import ScheduleSpec
from rara.triggers.model import TriggerSpec

CRDS = Path(__file__).resolve().parents[1] / "crds"
KEYWORDS = ("type", "pattern", "enum", "minimum", "maximum", "minItems", "maxItems")


class _Schema(GenerateJsonSchema):
    """Durations are strings in YAML; pydantic only sees the int they parse into."""

    def function_before_schema(
        self, schema: core_schema.BeforeValidatorFunctionSchema
    ) -> JsonSchemaValue:
        if schema["function"].get("function") is durations.parse_duration_ms:
            return {"type": "string", "pattern": durations._WHOLE.pattern}
        return super().function_before_schema(schema)


def crd(name: str) -> dict[str, Any]:
    return dict(yaml.safe_load((CRDS / f"{name}.yaml").read_text()))


def crd_version(name: str) -> dict[str, Any]:
    (version,) = crd(name)["spec"]["versions"]
    return dict(version)


def crd_spec_schema(name: str) -> dict[str, Any]:
    return dict(crd_version(name)["schema"]["openAPIV3Schema"]["properties"]["spec"])


def from_pydantic(model: type[BaseModel], *, defaults: bool) -> dict[str, Any]:
    schema = model.model_json_schema(by_alias=True, mode="validation", schema_generator=_Schema)
    return _normal(schema, schema.get("$defs", {}), defaults=defaults)


def from_crd(schema: dict[str, Any], *, defaults: bool) -> dict[str, Any]:
    return _normal(schema, {}, defaults=defaults)


def _normal(node: dict[str, Any], defs: dict[str, Any], *, defaults: bool) -> dict[str, Any]:
    if "$ref" in node:
        node = {
            **defs[node["$ref"].rsplit("/", 1)[1]],
            **{k: v for k, v in node.items() if k != "$ref"},
        }
    out: dict[str, Any] = {}
    if "anyOf" in node:  # pydantic's Optional[X]: X or null
        options = [o for o in node["anyOf"] if o.get("type") != "null"]
        assert len(options) == 1, node
        assert len(node["anyOf"]) == 2, node
        inner = _normal(options[0], defs, defaults=False)
        out.update(inner, nullable=True)
    elif node.get("nullable"):
        out["nullable"] = True
    for key in KEYWORDS:
        if key in node:
            out[key] = node[key]
    if "properties" in node:
        out["properties"] = {
            name: _normal(sub, defs, defaults=defaults) for name, sub in node["properties"].items()
        }
        out["required"] = sorted(node.get("required", []))
    if "items" in node:
        out["items"] = _normal(node["items"], defs, defaults=defaults)
    extra = node.get("additionalProperties")
    if extra is True or node.get("x-kubernetes-preserve-unknown-fields"):
        out["free"] = True  # any JSON object
    elif isinstance(extra, dict):
        out["values"] = _normal(extra, defs, defaults=defaults)
    # additionalProperties: false (extra="forbid") has no OpenAPI twin: the API server prunes
    # unknown fields, or refuses them under kubectl's default --validate=strict.
    if defaults and "default" in node and not isinstance(node["default"], (dict, list)):
        out["default"] = node["default"]
    if (
        node.get("type") == "object"
        and "properties" not in node
        and "free" not in out
        and "values" not in out
    ):
        out["free"] = True
    return out


def _drop_none_defaults(node: Any) -> Any:
    if isinstance(node, dict):
        return {
            k: _drop_none_defaults(v) for k, v in node.items() if not (k == "default" and v is None)
        }
    return node


@pytest.mark.parametrize(
    ("crd_name", "model", "defaults"),
    [
        # Definitions: no defaults in the CRD on purpose (the stored object stays as written;
        # rara fills defaults into the canonical form it hashes).
        ("workflowdefinitions", WorkflowSpec, False),
        ("workflowruns", WorkflowRunSpec, False),
        ("workflowschedules", ScheduleSpec, False),
        ("workflowtriggers", TriggerSpec, False),
        # Pools: the CRD defaults so `kubectl get` shows them; they must equal the model's.
        ("workerpools", WorkerPoolSpec, True),
    ],
)
def test_spec_schema_matches_model(crd_name: str, model: type[BaseModel], defaults: bool) -> None:
    expected = _drop_none_defaults(from_pydantic(model, defaults=defaults))
    actual = from_crd(crd_spec_schema(crd_name), defaults=defaults)
    assert actual == expected


def _walk(node: Any) -> list[dict[str, Any]]:
    found = []
    if isinstance(node, dict):
        found.append(node)
        for value in node.values():
            found.extend(_walk(value))
    elif isinstance(node, list):
        for value in node:
            found.extend(_walk(value))
    return found


def test_definition_crd_declares_no_defaults() -> None:
    assert not [n for n in _walk(crd_spec_schema("workflowdefinitions")) if "default" in n]


def test_comparison_notices_a_difference() -> None:
    """The normal form is not so coarse that anything compares equal."""
    schema = crd_spec_schema("workflowdefinitions")
    step = schema["properties"]["steps"]["items"]
    step["properties"]["capability"]["pattern"] = "^.*$"
    assert from_crd(schema, defaults=False) != from_pydantic(WorkflowSpec, defaults=False)


def test_uniqueness_the_model_checks_is_enforced_by_the_api_server_too() -> None:
    steps = crd_spec_schema("workflowdefinitions")["properties"]["steps"]
    assert steps["x-kubernetes-list-type"] == "map"  # duplicate step keys refused
    assert steps["x-kubernetes-list-map-keys"] == ["key"]
    depends_on = steps["items"]["properties"]["dependsOn"]
    assert depends_on["x-kubernetes-list-type"] == "set"  # a dependency listed twice refused


@pytest.mark.parametrize(
    ("crd_name", "kind", "columns"),
    [
        ("workflowdefinitions", "WorkflowDefinition", {"Version", "Digest", "Ready", "Age"}),
        ("workflowruns", "WorkflowRun", {"Phase", "Done/Total", "Age"}),
        ("workerpools", "WorkerPool", {"Deployment", "Desired", "Backlog", "Age"}),
        ("workflowschedules", "WorkflowSchedule", {"Schedule", "Next", "Last Run", "Age"}),
        (
            "workflowtriggers",
            "WorkflowTrigger",
            {"Definition", "Kind", "Paused", "Last Event", "Ready"},
        ),
    ],
)
def test_crd_shape(crd_name: str, kind: str, columns: set[str]) -> None:
    doc = crd(crd_name)
    assert doc["metadata"]["name"] == f"{crd_name}.rara.dev"
    assert doc["spec"]["group"] == "rara.dev"
    assert doc["spec"]["names"]["kind"] == kind
    version = crd_version(crd_name)
    assert version["name"] == "v1alpha1"
    assert version["served"]
    assert version["storage"]
    assert version["subresources"] == {"status": {}}
    assert columns <= {c["name"] for c in version["additionalPrinterColumns"]}


def undocumented(node: dict[str, Any], path: str) -> list[str]:
    """The paths of the properties under ``node`` without a description (what `kubectl
    explain` shows for a field). The top-level metadata is the exception: the API server
    refuses anything there but its type, and explains it with ObjectMeta's own text."""
    found = []
    for name, sub in node.get("properties", {}).items():
        where = f"{path}.{name}"
        if "." not in path and name == "metadata":
            continue
        if not str(sub.get("description", "")).strip():
            found.append(where)
        found.extend(undocumented(sub, where))
    for key in ("items", "additionalProperties"):
        if isinstance(node.get(key), dict):
            found.extend(undocumented(node[key], f"{path}[]"))
    return found


@pytest.mark.parametrize("path", sorted(CRDS.glob("*.yaml")), ids=lambda p: p.stem)
def test_every_field_is_described(path: Path) -> None:
    """`kubectl explain <kind>.<field>` has something to say about every field."""
    for version in yaml.safe_load(path.read_text())["spec"]["versions"]:
        schema = version["schema"]["openAPIV3Schema"]
        assert schema.get("description"), f"{path.name}: the kind itself has no description"
        assert undocumented(schema, version["name"]) == []


def test_undocumented_fields_are_found() -> None:
    schema = crd_version("workflowruns")["schema"]["openAPIV3Schema"]
    del schema["properties"]["spec"]["properties"]["input"]["description"]
    conditions = schema["properties"]["status"]["properties"]["conditions"]
    del conditions["items"]["properties"]["reason"]["description"]
    assert undocumented(schema, "v1alpha1") == [
        "v1alpha1.spec.input",
        "v1alpha1.status.conditions[].reason",
    ]
