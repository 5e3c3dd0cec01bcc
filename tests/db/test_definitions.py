"""Definitions: validation names the problem, versions are immutable and content-addressed."""

from __future__ import annotations

import copy
import textwrap
from typing import Any

import psycopg
import pytest

from rara.definitions.parse import canonical_spec, definition_from_object, load_definition
from rara.definitions.registry import apply_definition
from rara.errors import DefinitionInvalid
from tests.support.definitions import definition

GOOD = textwrap.dedent("""
    apiVersion: rara.dev/v1alpha1
    kind: WorkflowDefinition
    metadata: {name: rag-refresh}
    spec:
      steps:
        - key: collect
          capability: corpus.collect@1
          executor: inprocess
          timeout: 5m
          retry: {maxAttempts: 5, initialDelay: 1s, maxDelay: 1m, backoffCoefficient: 2}
        - key: adapt
          dependsOn: [collect]
          capability: adapt.lora@1
          executor: grpc
          resources: {gpu: 1}
          heartbeatTimeout: 30s
""")

# Same spec, other formatting: flow style, other key order, other spelling of equal durations.
REFORMATTED = textwrap.dedent("""
    kind: WorkflowDefinition
    apiVersion: "rara.dev/v1alpha1"
    metadata:
      name: rag-refresh
    spec: {steps: [
      {capability: corpus.collect@1, key: collect, timeout: 300s,
       retry: {backoffCoefficient: 2.0, maxDelay: 60s, initialDelay: 1000ms, maxAttempts: 5}},
      {key: adapt, capability: adapt.lora@1, executor: grpc, dependsOn: [collect],
       heartbeatTimeout: 30s, resources: {gpu: 1}}]}
""")


def _step(**fields: Any) -> dict[str, Any]:
    return {"key": "a", "capability": "x@1", **fields}


# (document, words the error must contain)
MALFORMED: list[tuple[Any, list[str]]] = [
    (
        definition("w", [_step(), _step(key="b", dependsOn=["nope"])]),
        ["'b'", "unknown step 'nope'"],
    ),
    (
        definition("w", [_step(dependsOn=["b"]), _step(key="b", dependsOn=["a"])]),
        ["cycle", "a -> b -> a"],
    ),
    (definition("w", [_step(), _step()]), ["duplicate step key 'a'"]),
    (definition("w", [_step(capability="corpus.collect")]), ["step 'a'", "capability", "pattern"]),
    (definition("w", [_step(capability="Corpus@x")]), ["capability"]),
    (definition("w", [_step(timeout="5 minutes")]), ["step 'a'", "timeout", "not a duration"]),
    (definition("w", [_step(timeout=30)]), ["timeout", "duration string"]),
    (
        definition("w", [_step(retry={"maxAttempts": 0})]),
        ["retry.maxAttempts", "greater than or equal to 1"],
    ),
    (definition("w", [_step(executor="docker")]), ["executor", "'inprocess' or 'grpc'"]),
    (definition("w", [_step(dependsOn=["a"])]), ["depends on itself"]),
    (definition("w", []), ["spec.steps", "at least 1"]),
    (definition("w", [_step(retyr={"maxAttempts": 2})]), ["step 'a'", "retyr", "Extra inputs"]),
    (definition("w", [_step(key="Bad Key")]), ["key", "pattern"]),
    (definition("W_bad", [_step()]), ["metadata.name"]),
    ({**definition("w", [_step()]), "apiVersion": "rara.dev/v2"}, ["apiVersion"]),
    (
        definition("w", [_step(retry={"initialDelay": "1m", "maxDelay": "1s"})]),
        ["maxDelay must be >= initialDelay"],
    ),
    (definition("w", [_step(resources={"gpu": -1})]), ["resources.gpu"]),
    ("just a string", ["must be a mapping"]),
]


@pytest.mark.parametrize(("doc", "words"), MALFORMED, ids=[str(i) for i in range(len(MALFORMED))])
def test_malformed_definition_rejected_and_nothing_written(
    conn: psycopg.Connection[Any], doc: Any, words: list[str]
) -> None:
    with pytest.raises(DefinitionInvalid) as info:
        apply_definition(conn, definition_from_object(copy.deepcopy(doc)))
    message = str(info.value)
    for word in words:
        assert word in message, f"{word!r} not in {message!r}"
    assert conn.execute("SELECT count(*) FROM rara_definition_versions").fetchone() == (0,)
    assert conn.execute("SELECT count(*) FROM rara_definitions").fetchone() == (0,)


def test_not_yaml_rejected() -> None:
    with pytest.raises(DefinitionInvalid, match="not valid YAML"):
        load_definition("spec: [unclosed")
    with pytest.raises(DefinitionInvalid, match="exactly one YAML document"):
        load_definition(GOOD + "\n---\n" + GOOD)


def test_same_spec_same_version_and_reformatted_same_digest(conn: psycopg.Connection[Any]) -> None:
    first = apply_definition(conn, load_definition(GOOD))
    again = apply_definition(conn, load_definition(REFORMATTED))
    assert (first.version, first.created) == (1, True)
    assert (again.version, again.digest, again.created) == (1, first.digest, False)
    assert canonical_spec(load_definition(GOOD).spec) == canonical_spec(
        load_definition(REFORMATTED).spec
    )

    changed = apply_definition(conn, load_definition(GOOD.replace("timeout: 5m", "timeout: 6m")))
    assert (changed.version, changed.created) == (2, True)
    assert changed.digest != first.digest
    back = apply_definition(conn, load_definition(GOOD))
    assert (back.version, back.created) == (1, False)


def test_versions_are_immutable_in_the_database(conn: psycopg.Connection[Any]) -> None:
    apply_definition(conn, load_definition(GOOD))
    for statement in (
        "UPDATE rara_definition_versions SET spec = '{}'",
        "UPDATE rara_definition_versions SET version = 7",
        "DELETE FROM rara_definition_versions",
        "TRUNCATE rara_definition_versions CASCADE",
    ):
        with pytest.raises(psycopg.errors.IntegrityConstraintViolation, match="immutable"):
            conn.execute(statement)
    assert conn.execute("SELECT count(*) FROM rara_definition_versions").fetchone() == (1,)
