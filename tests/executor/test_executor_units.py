"""Registry and wire conversion: the parts with no network."""

from __future__ import annotations

import sys
import types
from collections.abc import Callable, Iterator
from datetime import UTC, datetime

import pytest

from rara.artifacts.ref import ArtifactRef
from rara.context import Checkpoint, StepContext, StepOutcome
from rara.executor.errors import IncompatibleJob, JobError, error_from_exception
from rara.executor.plugins import PluginRegistry, load_plugin_modules, parse_capability
from rara.executor.wire import decode_job, make_job
from rara.v1 import executor_pb2 as pb

DIGEST = "sha256:" + "ab" * 32


def noop(ctx: StepContext) -> StepOutcome:
    return StepOutcome()


async def anoop(ctx: StepContext) -> StepOutcome:
    return StepOutcome()


class AsyncCallable:
    async def __call__(self, ctx: StepContext) -> StepOutcome:
        return StepOutcome()


def test_parse_capability() -> None:
    assert parse_capability("adapt.lora@1") == ("adapt.lora", 1)
    for bad in ("adapt.lora", "adapt.lora@", "@1", "Adapt@1", "x@v1", "x@-1"):
        with pytest.raises(IncompatibleJob):
            parse_capability(bad)


def test_registry_resolves_by_name_and_major() -> None:
    reg = PluginRegistry()
    reg.register("a.sync", 1, noop)
    reg.register("a.async", 2, anoop, gpu=1, memory_bytes=1 << 30)
    reg.register("a.callable", 1, AsyncCallable())
    assert reg.resolve("a.async@2").is_async
    assert not reg.resolve("a.sync@1").is_async
    assert reg.resolve("a.callable@1").is_async
    with pytest.raises(IncompatibleJob) as unknown:
        reg.resolve("nope@1")
    assert unknown.value.code == pb.ERROR_CODE_UNKNOWN_CAPABILITY
    with pytest.raises(IncompatibleJob) as other:
        reg.resolve("a.async@1")
    assert other.value.code == pb.ERROR_CODE_INCOMPATIBLE_VERSION
    assert not other.value.retryable
    assert "serves 2" in other.value.message
    cap = reg.resolve("a.async@2").to_proto()
    assert (cap.name, cap.major, cap.resources.gpu, cap.resources.memory_bytes) == (
        "a.async",
        2,
        1,
        1 << 30,
    )


def test_registry_refuses_duplicates_and_bad_names() -> None:
    reg = PluginRegistry()
    reg.register("a", 1, noop)
    with pytest.raises(ValueError, match="already registered"):
        reg.register("a", 2, noop)
    with pytest.raises(ValueError, match="plugin name"):
        reg.register("Bad Name", 1, noop)


@pytest.fixture
def plugin_module() -> Iterator[str]:
    module = types.ModuleType("rara_test_plugin_module")
    setattr(module, "register", lambda registry: registry.register("from.module", 3, noop))  # noqa: B010
    sys.modules[module.__name__] = module
    yield module.__name__
    del sys.modules[module.__name__]


def test_load_plugin_modules(plugin_module: str) -> None:
    reg = PluginRegistry()
    load_plugin_modules(reg, [plugin_module])
    assert reg.resolve("from.module@3").fn is noop
    with pytest.raises(ValueError, match="no register"):
        load_plugin_modules(reg, ["json"])


def test_job_round_trip() -> None:
    deadline = datetime(2030, 1, 2, 3, 4, 5, 600000, tzinfo=UTC)
    ref = ArtifactRef(DIGEST, 10, "text/plain")
    job = make_job(
        capability="x@1",
        idempotency_key="run-1/step",
        payload={"big": 2**63 - 1},
        attempt=2,
        run_id=7,
        step_id=9,
        step_key="step",
        inputs={"collect/corpus": ref, "clean/corpus": ref, "clean/stats": ref},
        deadline=deadline,
        checkpoint=Checkpoint(attempt=1, seq=5, state={"epoch": 3}, artifact=ref),
    )
    spec = decode_job(pb.Job.FromString(job.SerializeToString()))
    assert spec.payload == {"big": 2**63 - 1}  # JSON bytes keep int64 exact
    assert (spec.run_id, spec.step_id, spec.step_key, spec.attempt) == (7, 9, "step", 2)
    assert spec.deadline == deadline
    assert spec.checkpoint == Checkpoint(attempt=1, seq=5, state={"epoch": 3}, artifact=ref)
    # Bare names only when unambiguous: "corpus" comes from two steps, "stats" from one.
    assert set(spec.inputs) == {"collect/corpus", "clean/corpus", "clean/stats", "stats"}
    assert spec.key == ("run-1/step", 2)


@pytest.mark.parametrize(
    ("mutate", "fragment"),
    [
        (lambda j: setattr(j, "payload_json", b"\xff"), "not valid UTF-8 JSON"),
        (lambda j: setattr(j, "payload_json", b"null"), "must be a JSON object"),
        (lambda j: setattr(j, "idempotency_key", ""), "idempotency_key is required"),
        (lambda j: j.inputs.add(name="a/b", digest="md5:x"), "artifact 'a/b'"),
        (lambda j: setattr(j.last_checkpoint, "state_json", b"[]"), "last_checkpoint"),
    ],
)
def test_malformed_jobs_are_refused(mutate: Callable[[pb.Job], object], fragment: str) -> None:
    job = make_job(capability="x@1", idempotency_key="k")
    mutate(job)
    with pytest.raises(IncompatibleJob, match=fragment) as err:
        decode_job(job)
    assert err.value.code == pb.ERROR_CODE_INVALID_ARGUMENT
    assert not err.value.retryable


def test_error_from_exception() -> None:
    plain = error_from_exception(RuntimeError("boom"))
    assert (plain.code, plain.retryable, plain.message) == (
        pb.ERROR_CODE_HANDLER_ERROR,
        True,
        "boom",
    )
    assert plain.details["exception"] == "builtins.RuntimeError"

    class Permanent(Exception):
        retryable = False

    assert not error_from_exception(Permanent()).retryable
    assert error_from_exception(Permanent()).message == "Permanent"
    typed = error_from_exception(
        JobError("gpu oom", code=pb.ERROR_CODE_RESOURCE_EXHAUSTED, details={"gpu": "0"})
    )
    assert (typed.code, typed.retryable, dict(typed.details)) == (
        pb.ERROR_CODE_RESOURCE_EXHAUSTED,
        True,
        {"gpu": "0"},
    )
