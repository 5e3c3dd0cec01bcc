"""The StepContext in-process handlers (and executor adapters) receive, and the attempt state
behind it.

Everything here is safe from the event loop and from a handler thread: ``progress()`` only
stores the latest state (the worker's progress loop writes it, coalesced and rate-limited);
``save_checkpoint()`` blocks until the fenced row is written — from a thread through the
worker's loop (``run_coroutine_threadsafe``), from the loop thread itself (an async handler)
through a small synchronous connection, because waiting on the loop from the loop would
deadlock. A fence that matches nothing marks the lease lost and raises ``LeaseLost``.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from rara.artifacts.ref import ArtifactRef
from rara.context import JSON, ArtifactStoreAPI, Checkpoint
from rara.errors import RaraError
from rara.lifecycle import Fence
from rara.worker.dispatch import LeasedStep


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
    stop_reason: StopReason | None = None  # set by the worker when it stops the handler itself
    pending_progress: Progress | None = None
    last_report: float = field(default_factory=time.monotonic)  # progress or checkpoint
    progress_seq: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    checkpoint_seq: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    # The supervisor's wake-up: ``woken`` when poked while it was not waiting, else ``waiter``
    # (a plain future, cheaper than an Event's wait task) is resolved.
    woken: bool = False
    waiter: asyncio.Future[None] | None = None

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


CheckpointWriter = Callable[[AttemptState, int, Mapping[str, Any], ArtifactRef | None],
                            Coroutine[Any, Any, bool]]
SyncCheckpointWriter = Callable[[AttemptState, int, Mapping[str, Any], ArtifactRef | None], bool]


class WorkerStepContext:
    """``rara.context.StepContext`` for an attempt leased by this worker."""

    def __init__(self, state: AttemptState, *, checkpoint: Checkpoint | None,
                 inputs: Mapping[str, ArtifactRef], artifacts: ArtifactStoreAPI,
                 write_checkpoint: CheckpointWriter,
                 write_checkpoint_sync: SyncCheckpointWriter) -> None:
        self._state = state
        self._step = state.step
        self._checkpoint = checkpoint
        self._inputs = dict(inputs)
        self._artifacts = artifacts
        self._write = write_checkpoint
        self._write_sync = write_checkpoint_sync
        static = self._step.payload.get("input") or {}
        # The definition's static input, overlaid by the run's input (the run is more specific).
        self._input = {**static, **self._step.run_input}
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

    def save_checkpoint(self, state: Mapping[str, JSON],
                        artifact: ArtifactRef | None = None) -> None:
        s = self._state
        if s.lease_lost:
            raise LeaseLost(f"step {self.step_id} attempt {self.attempt} lost its lease")
        with self._lock:  # seq order = write order, even with several threads
            seq = next(s.checkpoint_seq)
            if _on_loop(s.loop):
                written = self._write_sync(s, seq, state, artifact)
            else:
                future = asyncio.run_coroutine_threadsafe(
                    self._write(s, seq, state, artifact), s.loop)
                written = future.result()
        if not written:
            s.lose()
            raise LeaseLost(f"step {self.step_id} attempt {self.attempt} lost its lease")
        s.last_report = time.monotonic()
