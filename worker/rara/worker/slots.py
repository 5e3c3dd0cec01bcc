"""The worker's slots: the attempts it runs now, shared by the lease loops that fill them, the
keeping of their leases and the drain that empties them.

``concurrency`` slots, of which ``held_back_slots`` are kept for namespaces with nothing
running here (``rara.worker.leasing``); every other slot is open to every namespace. An
attempt enters by ``start`` (one task: its supervisor, ``run``) and leaves when that task
ends, which frees its slot and wakes the lease loop. ``attempts`` is the one list the
heartbeat, the progress writer and the drain read: an attempt is in it exactly while its
supervisor runs.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from functools import partial
from typing import Any

import structlog

from rara import metrics
from rara.worker.vocabulary import (
    ABANDONED,
    AttemptEnd,
    AttemptState,
    Fence,
    LeasedStep,
    StopReason,
)
from rara.worker.worker_metrics import WorkerMetrics

log = structlog.get_logger("rara.worker")

# The attempt's coroutine, made (not awaited) by the worker: run as the attempt's one task.
Supervise = Callable[[AttemptState], Coroutine[Any, Any, AttemptEnd]]


class Slots:
    def __init__(
        self,
        worker: str,
        concurrency: int,
        held_back_slots: int,
        lease_seconds: float,
        supervise: Supervise,
    ) -> None:
        self.worker = worker
        self.concurrency = concurrency
        self.held_back_slots = held_back_slots
        self.lease_seconds = lease_seconds
        self._supervise = supervise
        self.attempts: dict[int, AttemptState] = {}
        self.held_back_running = 0  # attempts running in the held-back slots
        # Set by the leasing room (rara.worker.leasing): a freed slot wakes its loops.
        self.on_freed: Callable[[], None] = lambda: None
        self.stopping = False  # an attempt leased as the stop began is given straight back
        self.metrics = WorkerMetrics()
        # Read when scraped, not set at every start and end.
        metrics.RUNNING.set_function(lambda: len(self.attempts))
        self._supervisors: set[asyncio.Task[AttemptEnd]] = set()

    def running_for_everyone(self) -> int:
        """Attempts running here in the slots every namespace may have."""
        return len(self.attempts) - self.held_back_running

    def free_for_everyone(self) -> int:
        return self.concurrency - self.held_back_slots - self.running_for_everyone()

    def start(self, step: LeasedStep, sent: float, *, held_back: bool = False) -> None:
        """Run ``step``, leased by a statement sent at ``sent`` (monotonic): its lease is surely
        held until ``sent + lease_seconds``."""
        state = AttemptState(
            step=step,
            fence=Fence(step.id, self.worker, step.lease_token),
            loop=asyncio.get_running_loop(),
            lease_valid_until=sent + self.lease_seconds,
        )
        if step.timeout_ms is not None:
            state.deadline = state.started + step.timeout_ms / 1000
        if self.stopping:
            state.stop_reason = StopReason.SHUTDOWN
        try:
            attempt = self._supervise(state)
        except Exception:  # as if its task had failed: logged, and its lease left to expire
            log.exception("attempt supervisor failed", step_id=step.id)
            return
        self.attempts[step.id] = state
        self.held_back_running += held_back
        task = state.loop.create_task(attempt)
        self._supervisors.add(task)
        task.add_done_callback(partial(self._finished, state=state, held_back=held_back))

    def _finished(self, t: asyncio.Task[AttemptEnd], state: AttemptState, held_back: bool) -> None:
        self._supervisors.discard(t)
        step = state.step
        # Only its own entry: a lost attempt still winding down must not drop the state of a
        # newer attempt of the same step that this worker leased meanwhile.
        if self.attempts.get(step.id) is state:
            del self.attempts[step.id]
        self.held_back_running -= held_back
        self.on_freed()
        if not t.cancelled() and t.exception() is not None:
            log.error("attempt supervisor failed", step_id=step.id, exc_info=t.exception())
            return
        self.metrics.ended(
            step.capability,
            ABANDONED if t.cancelled() else t.result(),
            time.monotonic() - state.started,
        )

    async def drain(self, grace: float, aborting: asyncio.Event) -> None:
        """Grace for running attempts (cut short by ``aborting``), then stop and release the
        rest, and wait for their supervisors."""
        if self._supervisors:
            log.info(
                "stopping: waiting for running attempts",
                worker=self.worker,
                running=len(self._supervisors),
                grace=grace,
            )
            loop = asyncio.get_running_loop()
            abort = loop.create_task(aborting.wait())
            all_done = loop.create_task(asyncio.wait(set(self._supervisors)))
            await asyncio.wait(
                {abort, all_done}, timeout=grace, return_when=asyncio.FIRST_COMPLETED
            )
            abort.cancel()
            all_done.cancel()
        for state in list(self.attempts.values()):
            state.stop_reason = state.stop_reason or StopReason.SHUTDOWN
            state.poke()
        if self._supervisors:
            await asyncio.wait(set(self._supervisors))
