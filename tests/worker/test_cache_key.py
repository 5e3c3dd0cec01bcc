"""The step cache's key (rara.cache, computed for a leased step by rara.worker.cache): every
part of what goes into a step changes it, and nothing else does."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rara.artifacts.ref import ArtifactRef
from rara.cache import changed_parts
from rara.definitions.parse import load_definition
from rara.errors import DefinitionInvalid
from rara.worker.cache import key_of
from rara.worker.vocabulary import LeasedStep

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=6,
)
_names = st.text("abcxyz", min_size=1, max_size=4)
_digests = st.binary(min_size=32, max_size=32).map(lambda b: "sha256:" + b.hex())


@st.composite
def _steps(draw: Any) -> LeasedStep:
    upstream = draw(
        st.lists(st.tuples(_names, _names, _digests), max_size=3, unique_by=lambda u: u[:2])
    )
    return LeasedStep(
        id=draw(st.integers(1, 10**6)),
        run_id=draw(st.integers(1, 10**6)),
        key=draw(_names),
        capability=draw(st.sampled_from(["corpus.clean@1", "corpus.clean@2", "index.build@1"])),
        executor=draw(st.sampled_from(["inprocess", "grpc"])),
        payload={
            "input": draw(st.dictionaries(_names, _json, max_size=3)),
            "secrets": draw(st.dictionaries(_names, st.fixed_dictionaries({"name": _names}))),
            "cache": {"ttl_ms": draw(st.none() | st.integers(1, 10**6))},
        },
        attempt=draw(st.integers(1, 5)),
        max_attempts=5,
        lease_token=uuid.uuid4(),
        lease_expires_at=datetime.now(UTC),
        timeout_ms=draw(st.none() | st.integers(1, 10**6)),
        heartbeat_timeout_ms=None,
        depends_on=sorted({u[0] for u in upstream}),
        run_input=draw(st.dictionaries(_names, _json, max_size=3)),
        leased_at=datetime.now(UTC),
        inputs={f"{s}/{n}": ArtifactRef(d, 1) for s, n, d in upstream},
        rank=draw(st.integers(-5, 5)),
    )


def _key(step: LeasedStep) -> Any:
    key = key_of(step)
    assert key is not None
    return key


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_steps(), st.data())
def test_every_part_changes_the_key(step: LeasedStep, data: Any) -> None:
    before = _key(step)
    part = data.draw(st.sampled_from(["capability", "spec", "input", "upstream"]))
    if part == "capability":
        other = "corpus.clean@3" if step.capability != "corpus.clean@3" else "corpus.clean@4"
        changed = dataclasses.replace(step, capability=other)
    elif part == "spec":
        executor = "grpc" if step.executor == "inprocess" else "inprocess"
        changed = dataclasses.replace(step, executor=executor)
    elif part == "input":
        # The run's input, the definition's static input, or a map child's item: all input.
        where = data.draw(st.sampled_from(["run", "static", "item"]))
        extra = {"added-" + data.draw(_names): data.draw(_json)}
        if where == "run":
            changed = dataclasses.replace(step, run_input={**step.run_input, **extra})
        elif where == "static":
            payload = {**step.payload, "input": {**step.payload["input"], **extra}}
            changed = dataclasses.replace(step, payload=payload)
        else:
            payload = {**step.payload, "map": {"item": data.draw(_json), "index": 0}}
            changed = dataclasses.replace(step, payload=payload)
    else:
        digest = data.draw(
            _digests.filter(lambda d: d not in {r.digest for r in step.inputs.values()})
        )
        inputs = {**step.inputs, "zz/new": ArtifactRef(digest, 1)}
        changed = dataclasses.replace(step, inputs=inputs)
    after = _key(changed)
    assert after.key != before.key
    assert changed_parts(after.parts, before.parts) == [part]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_steps(), st.data())
def test_nothing_else_changes_the_key(step: LeasedStep, data: Any) -> None:
    """How a step runs and which run it is in are not what goes into it."""
    changed = dataclasses.replace(
        step,
        id=step.id + 1,
        run_id=step.run_id + 1,
        attempt=step.attempt + 1,
        lease_token=uuid.uuid4(),
        timeout_ms=data.draw(st.none() | st.integers(1, 10**6)),
        max_attempts=data.draw(st.integers(1, 9)),
        rank=data.draw(st.integers(-5, 5)),
        payload={
            **step.payload,
            "cache": {"ttl_ms": data.draw(st.none() | st.integers(1, 10**6))},
            # key order is not content
            "input": dict(reversed(list(step.payload["input"].items()))),
        },
        run_input=dict(reversed(list(step.run_input.items()))),
        # the bare names the lease adds beside "<step>/<name>" name the same bytes again
        inputs={**step.inputs, **{k.split("/", 1)[1]: v for k, v in step.inputs.items()}},
    )
    assert _key(changed) == _key(step)


def test_the_order_of_upstream_artifacts_is_part_of_the_key() -> None:
    a, b = ArtifactRef("sha256:" + "a" * 64, 1), ArtifactRef("sha256:" + "b" * 64, 1)
    step = LeasedStep(
        id=1, run_id=1, key="k", capability="c.x@1", executor="inprocess",
        payload={"cache": {}}, attempt=1, max_attempts=1, lease_token=uuid.uuid4(),
        lease_expires_at=datetime.now(UTC), timeout_ms=None, heartbeat_timeout_ms=None,
        depends_on=["s"], run_input={}, leased_at=datetime.now(UTC),
        inputs={"s/one": a, "s/two": b},
    )  # fmt: skip
    swapped = dataclasses.replace(step, inputs={"s/one": b, "s/two": a})
    assert _key(swapped).key != _key(step).key


def test_a_step_without_cache_has_no_key() -> None:
    step = LeasedStep(
        id=1, run_id=1, key="k", capability="c.x@1", executor="inprocess", payload={},
        attempt=1, max_attempts=1, lease_token=uuid.uuid4(), lease_expires_at=datetime.now(UTC),
        timeout_ms=None, heartbeat_timeout_ms=None, depends_on=[], run_input={},
        leased_at=datetime.now(UTC),
    )  # fmt: skip
    assert key_of(step) is None


def test_a_cache_ttl_out_of_range_is_refused_naming_the_field() -> None:
    doc = """
apiVersion: rara.dev/v1alpha1
kind: WorkflowDefinition
metadata: {name: ttl}
spec:
  steps:
    - {key: a, capability: x.y@1, cache: {ttl: 700h}}
"""
    with pytest.raises(DefinitionInvalid, match=r"cache\.ttl"):
        load_definition(doc)
    assert load_definition(doc.replace("700h", "596h")).spec.steps[0].cache is not None
