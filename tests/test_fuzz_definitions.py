"""Property-based fuzzing of definitions: never a crash — a valid version or a clear error."""

from __future__ import annotations

import contextlib
import copy
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rara.definitions.model import WorkflowDefinition
from rara.definitions.parse import canonical_spec, definition_from_object, load_definition
from rara.errors import DefinitionInvalid

json_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**6), 10**6),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30),
)
json_any = st.recursive(
    json_leaf,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=12,
)

keys = st.sampled_from(["a", "b", "c", "collect", "x-1", "A", "", "a b", "a" * 70])
step = st.fixed_dictionaries(
    {
        "key": keys,
        "capability": st.sampled_from(["x@1", "corpus.collect@1", "x", "X@1", "@1", "x@"]),
    },
    optional={
        "executor": st.sampled_from(["inprocess", "grpc", "docker", 3]),
        "dependsOn": st.lists(keys, max_size=3),
        "timeout": st.sampled_from(["5m", "30s", "1h30m", "0s", "5 min", 5, None, "500ms"]),
        "heartbeatTimeout": st.sampled_from(["30s", "-1s", "1x"]),
        "retry": st.fixed_dictionaries(
            {},
            optional={
                "maxAttempts": st.integers(-2, 2000),
                "initialDelay": st.sampled_from(["1s", "1m", "x"]),
                "maxDelay": st.sampled_from(["1s", "1m", "2h"]),
                "backoffCoefficient": st.floats(-1, 200),
            },
        ),
        "resources": st.fixed_dictionaries(
            {}, optional={"gpu": st.integers(-1, 100), "memory": st.sampled_from(["1Gi", "lots"])}
        ),
        "input": json_any,
        "priority": st.integers(-5000, 5000),
        "unknownField": json_any,
    },
)
document = st.fixed_dictionaries(
    {
        "apiVersion": st.sampled_from(["rara.dev/v1alpha1", "rara.dev/v1alpha1", "v1"]),
        "kind": st.sampled_from(["WorkflowDefinition", "WorkflowDefinition", "Pod"]),
        "metadata": st.one_of(
            st.fixed_dictionaries({"name": st.sampled_from(["rag", "r.a-g", "Bad", ""])}), json_any
        ),
        "spec": st.one_of(st.fixed_dictionaries({"steps": st.lists(step, max_size=5)}), json_any),
    }
)


def _outcome(doc: Any) -> WorkflowDefinition | DefinitionInvalid:
    try:
        return definition_from_object(doc)
    except DefinitionInvalid as exc:
        error = exc
    # every problem is a sentence that starts with where it is ("spec.steps[0] ...: ...")
    assert error.problems
    assert all(isinstance(p, str) and ":" in p for p in error.problems)
    return error


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(document)
def test_structured_definitions_never_crash(doc: dict[str, Any]) -> None:
    result = _outcome(copy.deepcopy(doc))
    if isinstance(result, WorkflowDefinition):
        # valid ones survive a round trip through their canonical form (what the database
        # stores and hashes)
        again = definition_from_object(
            {**doc, "spec": result.spec.model_dump(mode="json", by_alias=True)}
        )
        assert canonical_spec(again.spec) == canonical_spec(result.spec)


@settings(max_examples=700, deadline=None)
@given(json_any)
def test_arbitrary_json_never_crashes(doc: Any) -> None:
    _outcome(doc)


@settings(max_examples=500, deadline=None)
@given(st.text(max_size=300))
def test_arbitrary_text_never_crashes(text: str) -> None:
    with contextlib.suppress(DefinitionInvalid):
        load_definition(text)
