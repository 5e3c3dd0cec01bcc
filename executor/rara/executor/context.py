"""The StepContext an executor plugin sees.

It reports through the job's Outbox instead of a database: progress becomes coalesced
Progress events, ``save_checkpoint`` a Checkpoint event (the worker makes it durable), and
artifacts go straight to the shared content-addressed store, whose refs travel in the
result's manifest. The blobs the plugin fetched travel with the result too (``reads``: lineage).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from datetime import datetime

from rara.artifacts.reads import ReadsNoted
from rara.artifacts.ref import ArtifactRef
from rara.context import JSON, ArtifactStoreAPI, Checkpoint
from rara.executor import limits
from rara.executor.errors import JobError
from rara.executor.outbox import Outbox
from rara.executor.wire import JobSpec, credential_problem, dumps, ref_to_pb
from rara.secrets import redact
from rara.v1 import executor_pb2 as pb

MAX_PROGRESS_MESSAGE = 4096  # characters; a progress line is a status, not a log


class ExecutorStepContext:
    """Implements ``rara.context.StepContext`` for one job attempt on this executor."""

    def __init__(
        self,
        spec: JobSpec,
        store: ArtifactStoreAPI,
        outbox: Outbox,
        is_cancelled: Callable[[], bool],
    ) -> None:
        self._spec = spec
        # The digests the plugin fetched, reported with its success (JobSucceeded.reads).
        self.reads: set[str] = set()
        self._store = ReadsNoted(store, self.reads)
        self._outbox = outbox
        self._is_cancelled = is_cancelled
        self._loop_thread = threading.get_ident()

    @property
    def run_id(self) -> int:
        return self._spec.run_id

    @property
    def step_id(self) -> int:
        return self._spec.step_id

    @property
    def step_key(self) -> str:
        return self._spec.step_key

    @property
    def attempt(self) -> int:
        return self._spec.attempt

    @property
    def idempotency_key(self) -> str:
        return self._spec.idempotency_key

    @property
    def capability(self) -> str:
        return self._spec.capability

    @property
    def input(self) -> Mapping[str, JSON]:
        return self._spec.payload

    @property
    def inputs(self) -> Mapping[str, ArtifactRef]:
        return self._spec.inputs

    @property
    def deadline(self) -> datetime | None:
        return self._spec.deadline

    @property
    def checkpoint(self) -> Checkpoint | None:
        return self._spec.checkpoint

    @property
    def artifacts(self) -> ArtifactStoreAPI:
        return self._store

    def cancelled(self) -> bool:
        return self._is_cancelled()

    def progress(
        self,
        fraction: float | None = None,
        message: str = "",
        metrics: Mapping[str, float] | None = None,
    ) -> None:
        # Progress leaves the process (stored by the worker, shown by `rara runs show`):
        # mask credential-looking text, in metric names too, and bound the message.
        masked = {redact(k): v for k, v in (metrics or {}).items()}
        event = pb.JobProgress(message=redact(message)[:MAX_PROGRESS_MESSAGE], metrics=masked)
        if fraction is not None:
            event.fraction = fraction
        self._outbox.put_progress(event)

    def save_checkpoint(
        self, state: Mapping[str, JSON], artifact: ArtifactRef | None = None
    ) -> None:
        # Check here so a bad state fails in the plugin that produced it (JobError, terminal):
        # the worker persists checkpoints, so no credential and nothing over the wire limit.
        state_json = dumps(dict(state))
        problem = credential_problem(dict(state), "checkpoint state")
        if problem is None and len(state_json) > limits.MAX_MESSAGE_BYTES // 2:
            problem = "checkpoint state: " + limits.describe(len(state_json))
        if problem is not None:
            raise JobError(problem, code=pb.ERROR_CODE_HANDLER_ERROR, retryable=False)
        event = pb.JobCheckpoint(state_json=state_json)
        if artifact is not None:
            event.artifact.CopyFrom(ref_to_pb(artifact))
        if threading.get_ident() == self._loop_thread:
            # An async plugin cannot block the loop that sends the event; ordering still
            # guarantees the checkpoint goes out before the terminal event.
            self._outbox.put(pb.ExecuteResponse(checkpoint=event))
            return
        written = threading.Event()
        self._outbox.put(pb.ExecuteResponse(checkpoint=event), written)
        written.wait()

    async def asave_checkpoint(
        self, state: Mapping[str, JSON], artifact: ArtifactRef | None = None
    ) -> None:
        # On the job's loop: the event is queued in order, ahead of the verdict, without
        # blocking the loop that sends it (the sync form's loop-thread path).
        self.save_checkpoint(state, artifact)
