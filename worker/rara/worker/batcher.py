"""The completion batcher: many attempts' ends in one transaction (group commit).

An attempt that ended hands its ``Ending`` to ``submit`` and waits for its answer. One flush
at a time writes everything queued so far (up to ``max_batch``) through the ``EndingStore``
it was given (``WorkerStore.end_many``); whatever ends while a flush is in flight waits for
the next one, so under load batches grow by themselves, and an idle worker's lone completion
is written at once (after ``window`` seconds, 0 by default: just the rest of the current loop
iteration).

Fencing stays per step: ``end_many`` answers ``None`` for a step whose lease was lost, and only
that attempt learns it. A batch that fails as a whole is split: a transient error (connection
lost, deadlock) is handed to every attempt, whose own retry (``persist``) submits it again; any
other error (a bad row in one attempt) is retried item by item, so it reaches only its own
attempt.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Protocol

from rara.states import StepStatus
from rara.worker.retry import TRANSIENT
from rara.worker.vocabulary import Ending


class EndingStore(Protocol):
    """Where the batcher writes ends: ``rara.worker.store.WorkerStore`` in the worker."""

    async def end_many(self, endings: Sequence[Ending]) -> list[StepStatus | None]:
        """Each ending's step status after it, in order; ``None`` where its lease was lost."""
        ...


class CompletionBatcher:
    def __init__(self, store: EndingStore, *, max_batch: int = 500, window: float = 0.0) -> None:
        self._store = store
        self.max_batch = max_batch
        self.window = window
        self._queue: list[tuple[Ending, asyncio.Future[StepStatus | None]]] = []
        self._flusher: asyncio.Task[None] | None = None
        self.batches = 0  # flushes written (for tests and benchmarks)
        self.largest = 0

    async def submit(self, ending: Ending) -> StepStatus | None:
        """Write ``ending`` (in some batch); its answer as ``end_many`` gives it."""
        future: asyncio.Future[StepStatus | None] = asyncio.get_running_loop().create_future()
        self._queue.append((ending, future))
        if self._flusher is None:
            self._flusher = asyncio.get_running_loop().create_task(self._flush_all())
        return await future

    async def _flush_all(self) -> None:
        try:
            await asyncio.sleep(self.window)  # the rest of this loop iteration, or the window
            while self._queue:
                batch = self._queue[: self.max_batch]
                del self._queue[: self.max_batch]
                await self._flush(batch)
        finally:
            self._flusher = None

    async def _flush(self, batch: list[tuple[Ending, asyncio.Future[StepStatus | None]]]) -> None:
        self.batches += 1
        self.largest = max(self.largest, len(batch))
        try:
            answers = await self._store.end_many([e for e, _ in batch])
        except TRANSIENT as exc:
            for _, future in batch:
                _settle(future, exc=exc)
            return
        except Exception as exc:
            if len(batch) == 1:
                _settle(batch[0][1], exc=exc)
                return
            for item in batch:  # one bad ending must not fail the others
                await self._flush([item])
            return
        except BaseException:  # cancelled mid-flush: nobody may wait forever
            for _, future in batch:
                future.cancel()
            raise
        for (_, future), answer in zip(batch, answers, strict=True):
            _settle(future, answer)


def _settle(
    future: asyncio.Future[StepStatus | None],
    answer: StepStatus | None = None,
    *,
    exc: BaseException | None = None,
) -> None:
    if future.done():  # its attempt gave up waiting
        return
    if exc is not None:
        future.set_exception(exc)
    else:
        future.set_result(answer)
