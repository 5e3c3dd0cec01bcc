"""The StepContext in-process handlers (and executor adapters) receive, and the attempt state
behind it.

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
import itertools
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import TYPE_CHECKING

from rara.artifacts.ref import ArtifactRef
from rara.context import JSON, ArtifactStoreAPI, Checkpoint
from rara.errors import RaraError
from rara.worker.dispatch import LeasedStep
from rara.worker.store import Fence

if TYPE_CHECKING:
    from rara.worker.attempt_io import AttemptIO


class LeaseLost(RaraError):
    """The attempt no longer owns its step; nothing more may be written for it."""


class StopReason(StrEnum):
    """Why the supervisor stops a handler before it returned."""

    SHUTDOWN = "shutdown"  # the worker stops: the lease is released
    LEASE_LOST = "lease_lost"  # a fence matched nothing, or no heartbeat confirmed the lease
    LEASE_HORIZON = "lease_horizon"  # (a wake-up only: the lease must be confirmed by then)
    TIMEOUT = "timeout"  # the attempt's deadline
    HEARTBEAT_TIMEOUT = "heartbeat_timeout"  # no progress or checkpoint for too long
    CANCEL = "cancel"  # cancel asked and the grace for a cooperative stop is over


Progress = tuple[float | None, str, Mapping[str, float]]


@dataclass
class AttemptState:
    """What the worker's loops and the handler share about one running attempt."""

    step: LeasedStep
    fence: Fence
    loop: asyncio.AbstractEventLoop
    started: float = field(default_factory=time.monotonic)
    deadline: float | None = None  # monotonic; None: no timeout
    lease_valid_until: float = float("inf")  # monotonic: surely held until then
    cancel_requested: bool = False
    lease_lost: bool = False
    # The supervisor is done with the attempt: its end was written, found lost, or given up
    # ("its lease will expire"). Set before the worker forgets the attempt (a task's done
    # callbacks run later), so no heartbeat sent meanwhile names it.
    ended: bool = False
    stop_reason: StopReason | None = None  # set by the worker when it stops the handler itself
    pending_progress: Progress | None = None
    last_report: float = field(default_factory=time.monotonic)  # progress or checkpoint
    progress_seq: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    checkpoint_seq: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    # The supervisor's wake-up: ``woken`` when poked while it was not waiting, else ``waiter``
    # (a plain future, cheaper than an Event's wait task) is resolved.
    woken: bool = False
    waiter: asyncio.Future[None] | None = None
    # Checkpoint writes queued by save_checkpoint on the loop thread: the end waits for them.
    queued_checkpoints: list[asyncio.Task[None]] = field(default_factory=list)

    @property
    def holds_lease(self) -> bool:
        """Whether a heartbeat should extend this attempt's lease: never once the attempt was
        stopped as lost or its supervisor is done with it; such a lease is left to expire (or
        was already taken), and extending it would keep a step that nobody runs from the
        reaper for another lease."""
        return not (self.lease_lost or self.ended)

    def poke(self) -> None:
        """Wake the attempt's supervisor (from any thread)."""
        if _on_loop(self.loop):
            self._wake_up()
        else:
            self.loop.call_soon_threadsafe(self._wake_up)

    def _wake_up(self) -> None:
        self.woken = True
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def request_cancel(self) -> None:
        if not self.cancel_requested:
            self.cancel_requested = True
            self.poke()

    def lose(self) -> None:
        if not self.lease_lost:
            self.lease_lost = True
            self.poke()


def _on_loop(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


class WorkerStepContext:
    """``rara.context.StepContext`` for an attempt leased by this worker."""

    def __init__(self, state: AttemptState, io: AttemptIO, artifacts: ArtifactStoreAPI) -> None:
        self._state = state
        self._step = state.step
        # The latest checkpoint and the upstream inputs came with the lease (step_lease).
        self._checkpoint = state.step.checkpoint
        self._inputs = dict(state.step.inputs)
        self._artifacts = artifacts
        self._io = io
        static = self._step.payload.get("input") or {}
        # The definition's static input, overlaid by the run's input (the run is more specific),
        # and for a map step's child by its element and index (`item`, `index`; the model
        # refuses a static input of those names).
        self._input = {**static, **self._step.run_input, **(self._step.payload.get("map") or {})}
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
        return (s.cancel_requested or s.lease_lost or s.stop_reason is not None
                or (s.deadline is not None and time.monotonic() >= s.deadline))

    def progress(self, fraction: float | None = None, message: str = "",
                 metrics: Mapping[str, float] | None = None) -> None:
        if fraction is not None and not 0.0 <= fraction <= 1.0:
            raise ValueError(f"progress fraction must be within 0..1, got {fraction}")
        self._state.pending_progress = (fraction, message, dict(metrics or {}))
        self._state.last_report = time.monotonic()

    async def asave_checkpoint(self, state: Mapping[str, JSON],
                               artifact: ArtifactRef | None = None) -> None:
        """Durably record a checkpoint: returns once the fenced row is written."""
        s = self._check_owned()
        await self._written(next(s.checkpoint_seq), state, artifact)

    def save_checkpoint(self, state: Mapping[str, JSON],
                        artifact: ArtifactRef | None = None) -> None:
        s = self._check_owned()
        if _on_loop(s.loop):  # never block the loop: queue the write (see the module docstring)
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

    async def _written(self, seq: int, state: Mapping[str, JSON],
                       artifact: ArtifactRef | None) -> None:
        s = self._state
        if not await self._io.checkpoint(s, seq, state, artifact):
            s.lose()
            raise LeaseLost(f"step {self.step_id} attempt {self.attempt} lost its lease")
        s.last_report = time.monotonic()
