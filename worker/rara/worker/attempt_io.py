"""What a running attempt writes through, in one small object: the supervisor and the step
context get this instead of loose callables.

Every write is fenced (``rara.worker.store``): the checkpoint rows a handler saves, its latest
progress and the rest of its log (each flushed once more before the end), its one end — a
success, failure or cancel through the completion batcher, or a release on shutdown.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rara.artifacts.ref import ArtifactRef
from rara.states import StepStatus
from rara.worker.batcher import CompletionBatcher
from rara.worker.log_shipping import LogShipper
from rara.worker.progress import ProgressWriter
from rara.worker.retry import persist
from rara.worker.settings import WorkerSettings
from rara.worker.store import WorkerStore
from rara.worker.vocabulary import AttemptState, Ending

# How long a checkpoint write may wait out a database outage before the handler sees the error.
CHECKPOINT_PATIENCE = 30.0


@dataclass(frozen=True, slots=True)
class AttemptIO:
    store: WorkerStore
    batcher: CompletionBatcher
    progress: ProgressWriter
    settings: WorkerSettings
    logs: LogShipper

    async def checkpoint(
        self, state: AttemptState, seq: int, data: Mapping[str, Any], ref: ArtifactRef | None
    ) -> bool:
        """The checkpoint row, fenced (False: the lease is lost)."""
        fence = state.fence
        return await persist(
            "checkpoint",
            lambda: self.store.write_checkpoint(fence.step_id, fence.token, seq, data, ref),
            give_up_after=CHECKPOINT_PATIENCE,
        )

    async def flush_progress(self, state: AttemptState) -> None:
        """The attempt's latest progress, written now (before its end)."""
        await self.progress.flush([state])

    async def flush_logs(self, state: AttemptState) -> None:
        """The attempt's log, all of it, written now (before its end)."""
        await self.logs.flush([state], final=True)

    async def end(self, ending: Ending) -> StepStatus | None:
        """The attempt's end through the completion batcher: the step's status after it, or
        None when the fence matched nothing."""
        return await self.batcher.submit(ending)

    async def release(self, state: AttemptState) -> bool:
        """Give the lease back (shutdown); False: it was lost already."""
        fence = state.fence
        return bool(await self.store.release([(fence.step_id, fence.token)]))
