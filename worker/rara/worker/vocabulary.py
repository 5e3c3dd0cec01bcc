"""The words the worker's modules share about an attempt: data types and enums, no I/O.

An attempt is leased as a ``LeasedStep`` (decoded from ``step_lease`` in ``rara.worker.store``,
where the statement lives); every later write of it is conditioned on its ``Fence``; while it
runs, the worker's loops and its handler share an ``AttemptState``; the supervisor stops a
handler for a ``StopReason``, and a write that finds the lease gone raises ``LeaseLost``. Its
one end is written as an ``Ending`` (``rara.worker.store.end_many``, through the completion
batcher), and the supervisor returns what it wrote as an ``AttemptEnd`` — or why nothing was
written (``Unwritten``).

Every other worker module imports these from here, and this module imports nothing of the
worker's: so no two worker modules need each other for a type.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any
from uuid import UUID

from rara.artifacts.ref import ArtifactRef
from rara.context import Checkpoint, StepOutcome
from rara.errors import RaraError
from rara.namespaces import DEFAULT_NAMESPACE
from rara.states import AttemptOutcome, StepStatus
from rara.step_output import StepOutput

# -- the lease ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LeasedStep:
    """One attempt as leased: a row of ``step_lease``, whose columns are these fields' names
    (the row factory ``rara.worker.lease_row.LEASED`` builds it from them)."""

    id: int
    run_id: int
    key: str
    capability: str
    executor: str
    payload: Mapping[str, Any]
    attempt: int
    max_attempts: int
    lease_token: UUID
    lease_expires_at: datetime
    timeout_ms: int | None
    heartbeat_timeout_ms: int | None
    depends_on: Sequence[str]
    run_input: Mapping[str, Any]
    leased_at: datetime  # database clock at lease time
    # Folded into the lease (no round trip at attempt start): what a retry resumes from, and
    # the upstream artifacts as ``"<step>/<name>"`` (and the bare name when unique).
    checkpoint: Checkpoint | None = None
    inputs: Mapping[str, ArtifactRef] = field(default_factory=dict)
    # Its lease key (-priority, available_at, id): where the worker's next lease scan of the
    # pair may start (rara.worker.lease_cursor).
    rank: int = 0
    available_at: datetime | None = None
    namespace: str = DEFAULT_NAMESPACE  # its run's: with the pair, the lane of its cursor

    @property
    def input(self) -> dict[str, Any]:
        """What its code reads as ``ctx.input`` (and what its cache key digests): the
        definition's static input, overlaid by the run input (the run is more specific; only
        the fields its inputSchema names, when it names them: the lease gives no more), and for
        a map step's child by its element and index (``item``, ``index``; the model refuses a
        static input of those names)."""
        static = self.payload.get("input") or {}
        return {**static, **self.run_input, **(self.payload.get("map") or {})}


@dataclass(frozen=True, slots=True)
class Fence:
    """Who owns an attempt: every write after the lease is conditioned on it."""

    step_id: int
    worker: str
    token: UUID


class LeaseLost(RaraError):
    """The attempt no longer owns its step; nothing more may be written for it."""


# -- a running attempt ----------------------------------------------------------------------


class StopReason(StrEnum):
    """Why the supervisor stops a handler before it returned."""

    SHUTDOWN = "shutdown"  # the worker stops: the lease is released
    LEASE_LOST = "lease_lost"  # a fence matched nothing, or no heartbeat confirmed the lease
    LEASE_HORIZON = "lease_horizon"  # (a wake-up only: the lease must be confirmed by then)
    TIMEOUT = "timeout"  # the attempt's deadline
    HEARTBEAT_TIMEOUT = "heartbeat_timeout"  # no progress or checkpoint for too long
    CANCEL = "cancel"  # cancel asked and the grace for a cooperative stop is over


Progress = tuple[float | None, str, Mapping[str, float]]  # (fraction, message, metrics)


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
    # A step with ``cache:`` that missed: its key (rara.worker.cache.entry_of), which its
    # success completes with what it read and writes as an entry.
    cache_entry: Mapping[str, Any] | None = None
    # The blob digests the attempt read (written with a success: lineage, rara_step_reads).
    reads: set[str] = field(default_factory=set)
    # What an in-process handler writes (rara.step_output); None: not captured.
    output: StepOutput | None = None

    @property
    def holds_lease(self) -> bool:
        """Whether a heartbeat should extend this attempt's lease: never once the attempt was
        stopped as lost or its supervisor is done with it; such a lease is left to expire (or
        was already taken), and extending it would keep a step that nobody runs from the
        reaper for another lease."""
        return not (self.lease_lost or self.ended)

    def poke(self) -> None:
        """Wake the attempt's supervisor (from any thread)."""
        if on_loop(self.loop):
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


def on_loop(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether the caller runs on ``loop``'s thread, inside it."""
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


@dataclass(slots=True)
class RemoteOutcome(StepOutcome):
    """A remote executor's outcome, with the blob digests the job read when the executor
    reports them; None when it does not (an older executor): lineage then counts every input
    the worker handed over (docs/artifacts.md, "Lineage")."""

    reads: frozenset[str] | None = None


# -- the end of an attempt ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Ending:
    """One attempt's end, for ``end_many``, by its outcome: ``SUCCEEDED`` (result, artifact
    manifest), ``FAILED`` or ``TIMED_OUT`` (error, retryable, jitter) or ``CANCELLED``.
    ``run_id`` is the step's run (known from the lease), aggregated in the same transaction."""

    fence: Fence
    run_id: int
    outcome: AttemptOutcome
    result: Any = None
    artifacts: Sequence[Mapping[str, Any]] = ()
    reads: Sequence[str] = ()  # digests the attempt read (kept for a success only)
    error: Mapping[str, Any] | None = None
    retryable: bool = True
    jitter: float = 0.0
    # A success of a step with ``cache:`` (docs/step-cache.md): its key (entry_of), recorded
    # on the step and, unless the result was reused, written as an entry (with_reads);
    # and where a reused result came from ({via, cache_key, run, step, key, attempt}).
    cache: Mapping[str, Any] | None = None
    reused_from: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        outcome = AttemptOutcome(self.outcome)
        if outcome not in _ENDINGS:
            raise ValueError(f"an attempt cannot end as {outcome}")
        object.__setattr__(self, "outcome", outcome)


# What an attempt's own end may record (released and lease_expired are not endings of its own).
_ENDINGS = frozenset(
    {
        AttemptOutcome.SUCCEEDED,
        AttemptOutcome.FAILED,
        AttemptOutcome.TIMED_OUT,
        AttemptOutcome.CANCELLED,
    }
)


class Unwritten(StrEnum):
    """Why an attempt ended without a write of its own."""

    LEASE_LOST = "lease_lost"  # someone else owns the step now (or may: the lease lapsed)
    ABANDONED = "abandoned"  # the write kept failing; the lease will expire


@dataclass(frozen=True, slots=True)
class AttemptEnd:
    """What the supervisor wrote: the attempt's outcome and the step's status after it
    (``READY``: retried after backoff), or why nothing was written (``step`` None)."""

    outcome: AttemptOutcome | Unwritten
    step: StepStatus | None = None

    @property
    def retried(self) -> bool:
        """Failed (or timed out) and back to ready after the backoff (a release is no retry)."""
        return self.step is StepStatus.READY and self.outcome is not AttemptOutcome.RELEASED


LOST = AttemptEnd(Unwritten.LEASE_LOST)
ABANDONED = AttemptEnd(Unwritten.ABANDONED)
