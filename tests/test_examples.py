"""The manifests in examples/ are what the README tells people to `kubectl apply` and `kubectl
create`: each is checked here, without a cluster, as the API server and the operator would.

- every document against its CRD's openAPIV3Schema (crds/);
- a WorkflowDefinition through rara's own parser (what the operator and `rara definitions
  apply` use);
- a WorkflowRun through the operator's model, naming a definition of examples/, with an input
  its steps' inputSchema accept (what starting the run checks; a refused input would be the
  condition Accepted=False, SpecInvalid).

tests/k8s/test_operator_crds.py sends the same documents to a real API server.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from jsonschema import Draft4Validator
from pydantic import ValidationError

from rara.definitions.inputs import check_run_input
from rara.definitions.model import WorkflowDefinition
from rara.definitions.parse import definition_from_object
from rara.errors import InputInvalid
from rara.operator.models import WorkflowRunSpec
from rara.schedules.model import schedule_from_object

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
# Each kind's plural: its CRD's file in crds/ and its resource path on the API server.
PLURALS = {
    "WorkflowDefinition": "workflowdefinitions",
    "WorkflowRun": "workflowruns",
    "WorkflowSchedule": "workflowschedules",
    "WorkflowTrigger": "workflowtriggers",
    "WorkerPool": "workerpools",
}


def example_documents() -> list[tuple[str, dict[str, Any]]]:
    return [
        (path.name, doc)
        for path in EXAMPLES
        for doc in yaml.safe_load_all(path.read_text())
        if doc is not None
    ]


def crd_schema(kind: str) -> dict[str, Any]:
    crd = yaml.safe_load((ROOT / "crds" / f"{PLURALS[kind]}.yaml").read_text())
    (version,) = crd["spec"]["versions"]
    return dict(version["schema"]["openAPIV3Schema"])


def definitions() -> dict[str, WorkflowDefinition]:
    found = [
        definition_from_object(doc)
        for _, doc in example_documents()
        if doc["kind"] == "WorkflowDefinition"
    ]
    return {d.metadata.name: d for d in found}


def schema_problems(doc: dict[str, Any]) -> list[str]:
    """What the CRD's schema refuses in ``doc`` (OpenAPI v3's schema is JSON Schema draft 4
    plus keywords, such as nullable and x-kubernetes-*, that a draft-4 validator ignores)."""
    errors = Draft4Validator(crd_schema(doc["kind"])).iter_errors(doc)
    return [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in errors]


def run_problems(doc: dict[str, Any]) -> list[str]:
    """What would stop the operator from starting this WorkflowRun's run."""
    spec = WorkflowRunSpec.model_validate(doc["spec"])
    definition = definitions().get(spec.definition)
    if definition is None:
        return [f"spec.definition: no WorkflowDefinition {spec.definition!r} in examples/"]
    schemas = [(s.key, s.input_schema) for s in definition.spec.steps if s.input_schema is not None]
    check_run_input(spec.input, schemas)
    return []


DOCUMENTS = example_documents()


def test_examples_hold_a_workflow_run() -> None:
    assert "rag-refresh-run.yaml" in {
        name for name, doc in DOCUMENTS if doc["kind"] == "WorkflowRun"
    }


@pytest.mark.parametrize(("name", "doc"), DOCUMENTS, ids=[name for name, _ in DOCUMENTS])
def test_example_matches_its_crd(name: str, doc: dict[str, Any]) -> None:
    assert doc["apiVersion"] == "rara.dev/v1alpha1"
    assert doc["kind"] in PLURALS, f"{name}: no CRD for kind {doc['kind']!r}"
    metadata = doc["metadata"]
    assert "name" in metadata or "generateName" in metadata, f"{name}: the API server needs one"
    assert schema_problems(doc) == []


@pytest.mark.parametrize(("name", "doc"), DOCUMENTS, ids=[name for name, _ in DOCUMENTS])
def test_example_is_accepted_by_rara(name: str, doc: dict[str, Any]) -> None:
    if doc["kind"] == "WorkflowDefinition":
        definition_from_object(doc)
    elif doc["kind"] == "WorkflowRun":
        assert run_problems(doc) == []
    elif doc["kind"] == "WorkflowSchedule":
        spec = schedule_from_object(doc).spec
        # Its input is what a run of its definition would take.
        assert run_problems({"spec": {"definition": spec.definition, "input": spec.input}}) == []


def test_the_checks_refuse_a_bad_run() -> None:
    """Each check above fails on a broken copy of the run example, so a pass means something."""
    (run,) = [doc for name, doc in DOCUMENTS if name == "rag-refresh-run.yaml"]
    bad_name = {**run, "spec": {**run["spec"], "definition": "Rag_Refresh"}}
    assert any(p.startswith("spec.definition:") for p in schema_problems(bad_name))
    unknown = {**run, "spec": {**run["spec"], "definition": "no-such-pipeline"}}
    assert run_problems(unknown) == [
        "spec.definition: no WorkflowDefinition 'no-such-pipeline' in examples/"
    ]
    with pytest.raises(InputInvalid, match=r"input\.limit: 0 is less than the minimum of 1"):
        run_problems({**run, "spec": {**run["spec"], "input": {"limit": 0}}})
    with pytest.raises(ValidationError, match="inputs"):
        run_problems({**run, "spec": {**run["spec"], "inputs": {"limit": 20}}})
