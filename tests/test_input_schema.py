"""Steps declare the run input they read (``inputSchema``); the schema is checked when the
definition is applied, the input when a run starts, and errors name the field and the step."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from rara import runs
from rara.definitions.inputs import check_run_input
from rara.definitions.parse import canonical_spec, definition_from_object
from rara.errors import DefinitionInvalid, InputInvalid
from rara.runs import start_run
from tests.support.definitions import apply

LIMIT = {"type": "object", "properties": {"limit": {"type": "integer", "minimum": 1}}}


def document(**step: Any) -> dict[str, Any]:
    return {
        "apiVersion": "rara.dev/v1alpha1",
        "kind": "WorkflowDefinition",
        "metadata": {"name": "w"},
        "spec": {"steps": [{"key": "collect", "capability": "corpus.collect@1", **step}]},
    }


def test_an_invalid_schema_is_refused_naming_the_step() -> None:
    with pytest.raises(DefinitionInvalid) as caught:
        definition_from_object(document(inputSchema={"type": "integr"}))
    (problem,) = caught.value.problems
    assert problem.startswith(
        "spec.steps[0] (step 'collect').inputSchema: not a valid JSON Schema at type:"
    ), problem


def test_run_input_is_checked_against_each_declared_schema() -> None:
    check_run_input({"limit": 5}, [("collect", LIMIT)])
    check_run_input({}, [("collect", LIMIT)])  # nothing required
    with pytest.raises(InputInvalid) as caught:
        check_run_input({"limit": -1}, [("collect", LIMIT)])
    assert str(caught.value) == (
        "run input refused: input.limit: -1 is less than the minimum of 1 (input of step 'collect')"
    )
    paths = {
        "type": "object",
        "properties": {"paths": {"type": "array", "items": {"type": "string"}}},
    }
    with pytest.raises(
        InputInvalid,
        match=r"input\.paths\[1\]: 3 is not of type 'string' "
        r"\(input of step 'load'\)",
    ):
        check_run_input({"paths": ["a", 3]}, [("collect", LIMIT), ("load", paths)])


def test_a_schema_may_only_refer_within_itself() -> None:
    local = {"$defs": {"n": {"type": "integer"}}, "properties": {"limit": {"$ref": "#/$defs/n"}}}
    definition_from_object(document(inputSchema=local))
    with pytest.raises(InputInvalid, match=r"input\.limit: 'x' is not of type 'integer'"):
        check_run_input({"limit": "x"}, [("collect", local)])
    remote = {"properties": {"limit": {"$ref": "https://example.invalid/n.json"}}}
    with pytest.raises(
        DefinitionInvalid,
        match=r"inputSchema: properties\.limit\.\$ref: only "
        r"references within the schema",
    ):
        definition_from_object(document(inputSchema=remote))


def test_specs_without_a_schema_keep_their_digest() -> None:
    """A field added to the format must not re-version every definition applied before it."""
    plain = definition_from_object(document()).spec
    assert "inputSchema" not in canonical_spec(plain)["steps"][0]
    declared = definition_from_object(document(inputSchema=LIMIT)).spec
    assert canonical_spec(declared)["steps"][0]["inputSchema"] == LIMIT
    assert canonical_spec(plain) != canonical_spec(declared)


def test_kubernetes_status_is_accepted_and_ignored() -> None:
    with_status = definition_from_object({**document(), "status": {"version": 3}})
    assert with_status.spec == definition_from_object(document()).spec


def test_a_run_whose_input_a_step_refuses_never_starts(conn: psycopg.Connection[Any]) -> None:
    apply(
        conn, "typed", [{"key": "collect", "capability": "corpus.collect@1", "inputSchema": LIMIT}]
    )
    for attempt in range(2):  # a process that has not seen the spec yet, then one that has
        if attempt == 0:
            runs._INPUT_SCHEMAS.clear()
            runs._DIGEST_HINTS.clear()
        with pytest.raises(
            InputInvalid,
            match=r"input\.limit: -1 is less than the minimum of 1 "
            r"\(input of step 'collect'\)",
        ):
            start_run(conn, "typed", input={"limit": -1}, queue_anyway=True)
    row = conn.execute("SELECT count(*) FROM rara_runs").fetchone()
    assert row == (0,), "nothing was written"
    assert start_run(conn, "typed", input={"limit": 3}, queue_anyway=True).created
