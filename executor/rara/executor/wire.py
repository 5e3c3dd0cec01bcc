"""Conversion between the wire messages and the Python types plugins see.

JSON crosses the wire as UTF-8 bytes (see the comment on ``Job`` in executor.proto), so
every decode here checks shape and turns a bad value into ``IncompatibleJob`` — the job is
refused before any work, non-retryably, instead of failing halfway through.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from google.protobuf.timestamp_pb2 import Timestamp

from rara.artifacts.ref import ArtifactRef
from rara.context import JSON, Checkpoint
from rara.executor.errors import IncompatibleJob
from rara.secrets import find_credentials
from rara.v1 import executor_pb2 as pb


@dataclass(frozen=True, slots=True)
class JobSpec:
    """A decoded, validated ``Job``."""

    run_id: int
    step_id: int
    step_key: str
    attempt: int
    idempotency_key: str
    capability: str
    payload: Mapping[str, JSON]
    inputs: Mapping[str, ArtifactRef]
    deadline: datetime | None
    checkpoint: Checkpoint | None

    @property
    def key(self) -> tuple[str, int]:
        """Identifies one attempt on this executor (what ``Cancel`` names)."""
        return (self.idempotency_key, self.attempt)


def dumps(value: JSON) -> bytes:
    # allow_nan=False: NaN/Infinity are not JSON and PostgreSQL's jsonb would refuse them.
    return json.dumps(value, separators=(",", ":"), allow_nan=False).encode()


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):  # "1e999": valid syntax, but jsonb refuses it
        raise ValueError(f"number {text[:20]} is out of range")
    return value


def loads_object(data: bytes, what: str) -> dict[str, Any]:
    """Decode a JSON object strictly (no NaN/Infinity, as PostgreSQL); empty bytes mean ``{}``."""
    if not data:
        return {}
    try:
        value = json.loads(data, parse_constant=_refuse_constant, parse_float=_finite_float)
    except (UnicodeDecodeError, ValueError) as exc:
        raise IncompatibleJob(f"{what} is not valid UTF-8 JSON: {exc}") from None
    except RecursionError:
        raise IncompatibleJob(f"{what} nests too deeply") from None
    if not isinstance(value, dict):
        raise IncompatibleJob(f"{what} must be a JSON object, got {type(value).__name__}")
    return value


def credential_problem(value: Any, what: str) -> str | None:
    """A message naming the JSON path of each credential-looking value (never the value).

    Secrets travel by reference (``secretRef``) and are resolved inside the plugin; a value
    in a job, result or checkpoint would be persisted in PostgreSQL and printed in logs.
    """
    try:
        found = list(find_credentials(value))
    except RecursionError:
        return f"{what} nests too deeply"
    if not found:
        return None
    return (
        f"{what} holds what looks like a secret at {', '.join(found)}; "
        "secrets travel by reference (secretRef), never by value"
    )


def _deadline(job: pb.Job) -> datetime | None:
    if not job.HasField("deadline"):
        return None
    try:
        return job.deadline.ToDatetime(tzinfo=UTC)
    except (ValueError, OverflowError, OSError):
        raise IncompatibleJob(
            f"job.deadline is out of range (seconds={job.deadline.seconds}, "
            f"nanos={job.deadline.nanos})"
        ) from None


def ref_from_pb(ref: pb.ArtifactRef) -> ArtifactRef:
    try:
        return ArtifactRef(ref.digest, ref.size, ref.media_type or "application/octet-stream")
    except ValueError as exc:
        raise IncompatibleJob(f"artifact {ref.name!r}: {exc}") from None


def ref_to_pb(ref: ArtifactRef, name: str = "") -> pb.ArtifactRef:
    return pb.ArtifactRef(name=name, digest=ref.digest, size=ref.size, media_type=ref.media_type)


def _inputs(refs: Iterable[pb.ArtifactRef]) -> dict[str, ArtifactRef]:
    # Full names ("<step key>/<artifact>") always; bare artifact names too when unambiguous,
    # as the StepContext protocol promises.
    full = {r.name: ref_from_pb(r) for r in refs}
    bare: dict[str, list[str]] = {}
    for name in full:
        bare.setdefault(name.rsplit("/", 1)[-1], []).append(name)
    out = dict(full)
    for short, names in bare.items():
        if len(names) == 1 and short not in out:
            out[short] = full[names[0]]
    return out


def decode_job(job: pb.Job) -> JobSpec:
    """Validate and convert; every refusal is an IncompatibleJob naming the field at fault."""
    if not job.idempotency_key:
        raise IncompatibleJob("job.idempotency_key is required")
    if not job.capability:
        raise IncompatibleJob("job.capability is required (name@major)")
    if job.attempt < 1:
        # Attempts count from 1 (the lease sets attempt+1); 0 means the field was not set.
        raise IncompatibleJob(f"job.attempt must be >= 1, got {job.attempt}")
    checkpoint = None
    if job.HasField("last_checkpoint"):
        cp = job.last_checkpoint
        artifact = ref_from_pb(cp.artifact) if cp.HasField("artifact") else None
        state = loads_object(cp.state_json, "last_checkpoint.state_json")
        checkpoint = Checkpoint(attempt=cp.attempt, seq=cp.seq, state=state, artifact=artifact)
    payload = loads_object(job.payload_json, "payload_json")
    if (problem := credential_problem(payload, "payload_json")) is not None:
        raise IncompatibleJob(problem)
    return JobSpec(
        run_id=job.run_id,
        step_id=job.step_id,
        step_key=job.step_key,
        attempt=job.attempt,
        idempotency_key=job.idempotency_key,
        capability=job.capability,
        payload=payload,
        inputs=_inputs(job.inputs),
        deadline=_deadline(job),
        checkpoint=checkpoint,
    )


def make_job(
    *,
    capability: str,
    idempotency_key: str,
    payload: Mapping[str, JSON] | None = None,
    attempt: int = 1,
    run_id: int = 0,
    step_id: int = 0,
    step_key: str = "",
    inputs: Mapping[str, ArtifactRef] | None = None,
    deadline: datetime | None = None,
    checkpoint: Checkpoint | None = None,
) -> pb.Job:
    """Build a wire ``Job`` from Python values (the worker adapter and tests use this)."""
    job = pb.Job(
        run_id=run_id,
        step_id=step_id,
        step_key=step_key,
        attempt=attempt,
        idempotency_key=idempotency_key,
        capability=capability,
        payload_json=dumps(dict(payload or {})),
        inputs=[ref_to_pb(ref, name) for name, ref in (inputs or {}).items()],
    )
    if deadline is not None:
        ts = Timestamp()
        ts.FromDatetime(deadline)
        job.deadline.CopyFrom(ts)
    if checkpoint is not None:
        job.last_checkpoint.CopyFrom(
            pb.Checkpoint(
                attempt=checkpoint.attempt,
                seq=checkpoint.seq,
                state_json=dumps(dict(checkpoint.state)),
            )
        )
        if checkpoint.artifact is not None:
            job.last_checkpoint.artifact.CopyFrom(ref_to_pb(checkpoint.artifact))
    return job
