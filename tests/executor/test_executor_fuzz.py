"""Property-based fuzzing of job decoding: any Job a client can send is either a valid
JobSpec or an IncompatibleJob (non-retryable, with a message) — never a crash, which would
reach the worker as an opaque gRPC UNKNOWN and be retried forever."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rara.executor.conformance_plugins import register
from rara.executor.errors import IncompatibleJob
from rara.executor.plugins import PluginRegistry
from rara.executor.wire import decode_job, dumps
from rara.secrets import find_credentials
from rara.v1 import executor_pb2 as pb

INT64 = st.integers(-(2**63), 2**63 - 1)
UINT32 = st.integers(0, 2**32 - 1)
UINT64 = st.integers(0, 2**64 - 1)
INT32 = st.integers(-(2**31), 2**31 - 1)
# Protobuf strings are UTF-8: lone surrogates cannot be set on a message at all.
TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=40)
DIGEST = "sha256:" + "ab" * 32

capabilities = st.one_of(
    st.sampled_from(
        [
            "test.echo@1",
            "test.echo@2",
            "test.echo",
            "@1",
            "x@",
            "",
            "test.echo@01",
            "test.echo@²",
            "test.echo@١",
            "Test.Echo@1",
            "test.echo@-1",
            "a@1@1",
            "test.echo@99999999999999999999999",
        ]
    ),
    TEXT,
)
json_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    TEXT,
    st.sampled_from(
        [
            "ghp_" + "a" * 36,
            "postgresql://u:hunter2x@h/db",
            "password=swordfish",
            "sha256:" + "0" * 64,
            "https://example.org/x",
        ]
    ),
)
json_values = st.recursive(
    json_leaf,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(
            st.one_of(TEXT, st.sampled_from(["token", "password", "input"])), inner, max_size=4
        ),
    ),
    max_leaves=16,
)
json_bytes = st.one_of(
    st.binary(max_size=64),
    json_values.map(lambda v: json.dumps(v).encode()),  # NaN/Infinity literals included
    st.sampled_from(
        [
            b"",
            b"{}",
            b"null",
            b"[]",
            b'{"a": 1e999}',
            b'{"a": -Infinity}',
            b"\xef\xbb\xbf{}",
            b'{"a": "\\ud800"}',
            b"[" * 5000 + b"]" * 5000,
            b'{"a":' * 3000 + b"1" + b"}" * 3000,
            b'{"a": ' + b"9" * 5000 + b"}",
        ]
    ),
)
refs = st.builds(
    pb.ArtifactRef,
    name=TEXT,
    digest=st.one_of(st.just(DIGEST), TEXT, st.just("SHA256:" + "AB" * 32)),
    size=UINT64,
    media_type=TEXT,
)
timestamps = st.builds(lambda s, n: (s, n), INT64, INT32)


@st.composite
def jobs(draw: st.DrawFn) -> pb.Job:
    job = pb.Job(
        run_id=draw(INT64),
        step_id=draw(INT64),
        step_key=draw(TEXT),
        attempt=draw(st.one_of(st.just(1), UINT32)),
        idempotency_key=draw(st.one_of(st.just("run:step"), TEXT)),
        capability=draw(capabilities),
        payload_json=draw(json_bytes),
        inputs=draw(st.lists(refs, max_size=3)),
    )
    if draw(st.booleans()):
        job.deadline.seconds, job.deadline.nanos = draw(timestamps)
    if draw(st.booleans()):
        cp = job.last_checkpoint
        cp.attempt, cp.seq, cp.state_json = draw(UINT32), draw(UINT64), draw(json_bytes)
        if draw(st.booleans()):
            cp.artifact.CopyFrom(draw(refs))
    # What the server sees: the bytes a client sent, parsed again.
    return pb.Job.FromString(job.SerializeToString())


REGISTRY = PluginRegistry()
register(REGISTRY)
STATS = {"decoded": 0, "refused": 0}


def _check(job: pb.Job) -> IncompatibleJob | None:
    """Decode and route as the server does; the refusal, if any (anything else propagates)."""
    try:
        spec = decode_job(job)
        REGISTRY.resolve(spec.capability)
    except IncompatibleJob as exc:
        return exc
    # What was admitted is what a plugin may rely on: a JSON object PostgreSQL accepts,
    # no credentials, a real attempt number, an aware deadline.
    assert isinstance(spec.payload, dict)
    dumps(dict(spec.payload))  # raises on NaN/Infinity
    assert list(find_credentials(spec.payload)) == []
    assert spec.attempt >= 1
    assert spec.idempotency_key
    assert spec.capability
    assert spec.deadline is None or spec.deadline.tzinfo is not None
    if spec.checkpoint is not None:
        dumps(dict(spec.checkpoint.state))
    return None


@settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(jobs())
def test_decode_job_never_crashes(job: pb.Job) -> None:
    refusal = _check(job)
    STATS["refused" if refusal else "decoded"] += 1
    if refusal is not None:
        assert refusal.message
        assert not refusal.retryable
        assert refusal.code in (
            pb.ERROR_CODE_INVALID_ARGUMENT,
            pb.ERROR_CODE_UNKNOWN_CAPABILITY,
            pb.ERROR_CODE_INCOMPATIBLE_VERSION,
        )


def test_the_fuzzed_failure_classes_are_refused() -> None:
    # The crashes the fuzzer found before the fixes, kept as plain regression cases.
    base = {"attempt": 1, "idempotency_key": "k", "capability": "test.echo@1"}
    cases = {
        "payload_json nests too deeply": pb.Job(**base, payload_json=b"[" * 5000 + b"]" * 5000),
        "job.deadline is out of range": pb.Job(**base, deadline={"nanos": -1}),
        "must look like name@major": pb.Job(**{**base, "capability": "test.echo@\u00b2"}),
        "out of range": pb.Job(**base, payload_json=b'{"x": [1.5, {"y": 2e308}]}'),
        "NaN is not JSON": pb.Job(**base, payload_json=b'{"x": NaN}'),
    }
    for message, job in cases.items():
        refusal = _check(job)
        assert refusal is not None, message
        assert message in refusal.message
