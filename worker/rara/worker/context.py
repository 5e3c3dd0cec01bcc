"""The StepContext in-process handlers (and executor adapters) receive, over the attempt's
state (``rara.worker.vocabulary.AttemptState``) and its writes (``rara.worker.attempt_io``).

Everything here is safe from the event loop and from a handler thread: ``progress()`` only
stores the latest state (the worker's progress loop writes it, coalesced and rate-limited).
Checkpoints are written on the worker's loop, never by a blocking call on it:

- ``await ctx.asave_checkpoint(...)`` (async handlers, the gRPC adapter) returns once the fenced
  row is written;
- ``ctx.save_checkpoint(...)`` from a handler thread blocks that thread until then
  (``run_coroutine_threadsafe``);
- ``ctx.save_checkpoint(...)`` on the loop thread (an async handler using the sync form) cannot
  wait without stalling the loop: it queues the write, in order, and returns; the attempt's end
  waits for every queued write first, so none is lost and none lands after the end.

A fence that matches nothing marks the lease lost and raises ``LeaseLost`` (for a queued write:
the attempt stops and writes nothing more, as for any lost lease).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Mapping
from datetime import datetime, timedelta

from rara.artifacts.reads import ReadsNoted
from rara.artifacts.ref import ArtifactRef
from rara.context import JSON, ArtifactStoreAPI, Checkpoint
from rara.worker.attempt_io import AttemptIO
from rara.worker.vocabulary import AttemptState, LeaseLost, on_loop


class WorkerStepContext:
    """``rara.context.StepContext`` for an attempt leased by this worker."""

    def __init__(self, state: AttemptState, io: AttemptIO, artifacts: ArtifactStoreAPI) -> None:
        self._state = state
        self._step = state.step
        # The latest checkpoint and the upstream inputs came with the lease (step_lease).
        self._checkpoint = state.step.checkpoint
        self._inputs = dict(state.step.inputs)
        self._artifacts = ReadsNoted(artifacts, state.reads)
        self._io = io
        self._input = self._step.input
        self._lock = threading.Lock()

    @property
    def run_id(self) -> int:
        return self._step.run_id

    @property
    def step_id(self) -> int:
        return self._step.id

    @property
    def step_key(self) -> str:
        return self._step.key

    @property
    def attempt(self) -> int:
        return self._step.attempt

    @property
    def idempotency_key(self) -> str:
        return f"{self._step.run_id}:{self._step.key}"  # stable across attempts

    @property
    def capability(self) -> str:
        return self._step.capability

    @property
    def input(self) -> Mapping[str, JSON]:
        return self._input

    @property
    def inputs(self) -> Mapping[str, ArtifactRef]:
        return self._inputs

    @property
    def deadline(self) -> datetime | None:
        if self._step.timeout_ms is None:
            return None
        return self._step.leased_at + timedelta(milliseconds=self._step.timeout_ms)

    @property
    def checkpoint(self) -> Checkpoint | None:
        return self._checkpoint

    @property
    def artifacts(self) -> ArtifactStoreAPI:
        return self._artifacts

    def cancelled(self) -> bool:
        s = self._state
        return (
            s.cancel_requested
            or s.lease_lost
            or s.stop_reason is not None
            or (s.deadline is not None and time.monotonic() >= s.deadline)
        )

    def progress(
        self,
        fraction: float | None = None,
        message: str = "",
        metrics: Mapping[str, float] | None = None,
    ) -> None:
        if fraction is not None and not 0.0 <= fraction <= 1.0:
            raise ValueError(f"progress fraction must be within 0..1, got {fraction}")
        self._state.pending_progress = (fraction, message, dict(metrics or {}))
        self._state.last_report = time.monotonic()

    async def asave_checkpoint(
        self, state: Mapping[str, JSON], artifact: ArtifactRef | None = None
    ) -> None:
        """Durably record a checkpoint: returns once the fenced row is written."""
        s = self._check_owned()
        await self._written(next(s.checkpoint_seq), state, artifact)

    def save_checkpoint(
        self, state: Mapping[str, JSON], artifact: ArtifactRef | None = None
    ) -> None:
        s = self._check_owned()
        if on_loop(s.loop):  # never block the loop: queue the write (see the module docstring)
            write = self._written(next(s.checkpoint_seq), state, artifact)
            s.queued_checkpoints.append(s.loop.create_task(write))
            s.last_report = time.monotonic()
            return
        with self._lock:  # seq order = write order, even with several threads
            seq = next(s.checkpoint_seq)
            asyncio.run_coroutine_threadsafe(self._written(seq, state, artifact), s.loop).result()

    def _check_owned(self) -> AttemptState:
        if self._state.lease_lost:
            raise LeaseLost(f"step {self.step_id} attempt {self.attempt} lost its lease")
        return self._state

    async def _written(
        self, seq: int, state: Mapping[str, JSON], artifact: ArtifactRef | None
    ) -> None:
        s = self._state
        if not await self._io.checkpoint(s, seq, state, artifact):
            s.lose()
            raise LeaseLost(f"step {self.step_id} attempt {self.attempt} lost its lease")
        s.last_report = time.monotonic()
