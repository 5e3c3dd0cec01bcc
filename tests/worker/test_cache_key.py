"""The step cache's key (rara.cache, computed for a leased step by rara.worker.cache): every
part of what goes into a step changes it, and nothing else does. Two halves: the base, known
before the step runs, and the artifacts it read, known after (an entry's key covers both)."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from rara.artifacts.ref import ArtifactRef
from rara.cache import best_match, difference, entry_key, reads_of
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
def test_every_base_part_changes_the_base(step: LeasedStep, data: Any) -> None:
    before = _key(step)
    part = data.draw(st.sampled_from(["capability", "spec", "input", "given"]))
    if part == "given":  # one more artifact given (one the step was not given), whatever its bytes
        name = "zz/" + data.draw(_names.filter(lambda n: "zz/" + n not in step.inputs))
        changed = dataclasses.replace(
            step, inputs={**step.inputs, name: ArtifactRef(data.draw(_digests), 1)}
        )
    elif part == "capability":
        other = "corpus.clean@3" if step.capability != "corpus.clean@3" else "corpus.clean@4"
        changed = dataclasses.replace(step, capability=other)
    elif part == "spec":
        executor = "grpc" if step.executor == "inprocess" else "inprocess"
        changed = dataclasses.replace(step, executor=executor)
    else:
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
    after = _key(changed)
    assert after.base != before.base
    assert after.claim != before.claim
    assert difference(after, before.parts, {}).parts == (part,)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_steps(), st.data())
def test_an_upstream_artifact_counts_only_once_read(step: LeasedStep, data: Any) -> None:
    """Other bytes under a name it is given: the same base, so the entries of the step's
    earlier runs are found, and whether one is reused depends on what their steps read; two
    steps given different bytes never share a claim (single flight)."""
    before = _key(step)
    assume(before.upstream)
    digest = data.draw(_digests.filter(lambda d: d not in before.upstream.values()))
    name = data.draw(st.sampled_from(sorted(before.upstream)))
    changed = dataclasses.replace(step, inputs={**step.inputs, name: ArtifactRef(digest, 1)})
    after = _key(changed)
    assert after.base == before.base
    assert after.claim != before.claim
    # An entry of the step before the change: what its step read is all that decides.
    read = reads_of(
        before, data.draw(st.sets(st.sampled_from([*before.upstream.values(), digest])))
    )
    stale = difference(after, after.parts, read).reads
    assert stale == ((name,) if name in read else ())
    # An entry's key covers its reads: other bytes read, another entry.
    if name in read:
        assert entry_key(before, read)[0] != entry_key(after, reads_of(after, [digest]))[0]


def test_reads_are_only_of_what_the_step_was_given() -> None:
    """A read of bytes the step was not given (a checkpoint, a blob by digest) cannot change:
    it is no part of the key."""
    a, b = "sha256:" + "a" * 64, "sha256:" + "b" * 64
    step = dataclasses.replace(_plain_step(), inputs={"s/one": ArtifactRef(a, 1)})
    key = _key(step)
    assert reads_of(key, [a, b]) == {"s/one": a}
    stored, parts = entry_key(key, reads_of(key, [a, b]))
    assert parts["reads"] != entry_key(key, {})[1]["reads"]
    assert stored == entry_key(key, {"s/one": a})[0]


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


def _plain_step() -> LeasedStep:
    return LeasedStep(
        id=1, run_id=1, key="k", capability="c.x@1", executor="inprocess",
        payload={"cache": {}}, attempt=1, max_attempts=1, lease_token=uuid.uuid4(),
        lease_expires_at=datetime.now(UTC), timeout_ms=None, heartbeat_timeout_ms=None,
        depends_on=["s"], run_input={}, leased_at=datetime.now(UTC),
    )  # fmt: skip


def test_which_name_holds_which_bytes_is_part_of_the_key() -> None:
    a, b = ArtifactRef("sha256:" + "a" * 64, 1), ArtifactRef("sha256:" + "b" * 64, 1)
    step = dataclasses.replace(_plain_step(), inputs={"s/one": a, "s/two": b})
    swapped = dataclasses.replace(step, inputs={"s/one": b, "s/two": a})
    assert _key(swapped).claim != _key(step).claim
    read = reads_of(_key(step), [a.digest])
    assert difference(_key(swapped), _key(step).parts, read).reads == ("s/one",)


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


def test_an_explanation_names_the_input_fields_that_differ() -> None:
    """The fields' digests are beside the key, not in it: a difference of the input names
    them; an entry whose step's fields are not known (its run pruned) names the part only."""
    step = dataclasses.replace(_plain_step(), run_input={"limit": 1, "paths": ["a"]})
    before = _key(step)
    after = _key(dataclasses.replace(step, run_input={"limit": 2, "paths": ["a"], "new": 0}))
    assert set(before.fields) == {"limit", "paths"}
    assert before.base == _key(step).base  # (the fields are no part of it)
    changed = difference(after, before.parts, {}, before.fields)
    assert changed.fields == ("limit", "new")
    assert changed.describe() == "input (limit, new)"
    assert difference(after, before.parts, {}, None).describe() == "input"
    assert difference(before, before.parts, {}, before.fields).describe() == "nothing"


def test_the_best_match_differs_least_then_read_the_most_same_bytes() -> None:
    step = dataclasses.replace(
        _plain_step(), inputs={"s/one": ArtifactRef("sha256:" + "a" * 64, 1)}
    )
    key = _key(step)
    other = _key(dataclasses.replace(step, run_input={"x": 1}, executor="grpc"))
    same, stale = {"s/one": "sha256:" + "a" * 64}, {"s/one": "sha256:" + "b" * 64}
    two_parts = difference(key, other.parts, same)  # input and spec differ
    reads_stale = difference(key, key.parts, stale)  # one component: the reads
    read_nothing = difference(key, key.parts, {})  # nothing differs, nothing read
    read_same = difference(key, key.parts, same)  # nothing differs, one read the same
    assert (two_parts.components, reads_stale.components, read_same.components) == (2, 1, 0)
    assert reads_stale.describe() == "reads (s/one)"
    assert best_match([two_parts, reads_stale]) == 1
    assert best_match([read_nothing, read_same]) == 1  # the same bytes read count
    assert best_match([read_same, read_same]) == 0  # of equals, the first: the newest
    run_input = {"a": 1, "b": 1}
    mine = _key(dataclasses.replace(step, run_input=run_input))
    one_field, two_fields = (
        _key(dataclasses.replace(step, run_input={**run_input, **changed}))
        for changed in ({"a": 2}, {"a": 2, "b": 2})
    )
    by_fields = [difference(mine, k.parts, {}, k.fields) for k in (two_fields, one_field)]
    assert best_match(by_fields) == 1  # one component each: the fewer fields
    assert best_match([]) is None
